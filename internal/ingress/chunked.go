package ingress

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// chunkedRoutes carries the route of each request with a chunked body from
// its header to its handler.
//
// fasthttp reads a chunked body after Server.HeaderReceived, and when the
// body overflows server.body_limit it resets the whole request, request
// line included, before the error handler runs: without this the 413
// could not be counted on its route (hookstamp_requests_total{route,
// outcome}, SPEC §7), and chunked floods would go unseen. The header lives
// in the connection's RequestCtx, which the error handler gets too, so its
// address is the key. A request that reaches a handler takes its entry
// out; one a client leaves behind by vanishing between two chunks (fasthttp
// then calls neither) is replaced or taken out as soon as the next
// request's header is read on the same RequestCtx, so an entry the error
// handler finds is always its request's. About maxChunked are held at most
// (racing puts may pass it by a few); when full, entries older than the
// server's read timeout — requests that can no longer be read — are
// dropped first.
type chunkedRoutes struct {
	m sync.Map // *fasthttp.RequestHeader → chunkedRequest
	n atomic.Int64
}

// chunkedRequest is what the reset takes away that the error handler needs.
type chunkedRequest struct {
	route  *Route
	method string
	at     time.Time // when its header was read
}

// maxChunked bounds the entries held (each keeps its RequestCtx from the
// collector until taken out); past it, chunked overflows are still
// answered 413 but not counted on their route.
const maxChunked = 256

// put notes r for h; entries noted more than stale before r are dropped
// if the set is full.
func (cr *chunkedRoutes) put(h *fasthttp.RequestHeader, r chunkedRequest, stale time.Duration) {
	if cr.n.Load() >= maxChunked {
		cr.m.Range(func(k, v any) bool { // rare: maxChunked clients gone mid-body
			if r.at.Sub(v.(chunkedRequest).at) > stale && cr.m.CompareAndDelete(k, v) {
				cr.n.Add(-1)
			}
			return true
		})
	}
	if cr.n.Load() >= maxChunked {
		_, _ = cr.take(h) // not this request's
		return
	}
	if _, loaded := cr.m.Swap(h, r); !loaded {
		cr.n.Add(1)
	}
}

// take returns and forgets what was put for h, if anything. With nothing
// held (the usual case: providers send Content-Length) it costs one atomic
// load.
func (cr *chunkedRoutes) take(h *fasthttp.RequestHeader) (chunkedRequest, bool) {
	if cr.n.Load() == 0 {
		return chunkedRequest{}, false
	}
	v, ok := cr.m.LoadAndDelete(h)
	if !ok {
		return chunkedRequest{}, false
	}
	cr.n.Add(-1)
	return v.(chunkedRequest), true
}

// headerReceived is fasthttp's Server.HeaderReceived: it notes the route
// of a request whose body is chunked, before the body is read. The zero
// RequestConfig keeps the server's own limits and timeouts.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if h.ContentLength() != -1 { // -1: Transfer-Encoding: chunked
		// An entry left by an earlier request on this RequestCtx must not
		// be taken for this one's.
		_, _ = s.chunked.take(h)
		return fasthttp.RequestConfig{}
	}
	u := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(u)
	var route *Route
	method := string(h.Method())
	if u.Parse(h.Host(), h.RequestURI()) == nil {
		route, _ = s.router.match(method, string(u.Path()))
	}
	if route == nil {
		_, _ = s.chunked.take(h) // no route: nothing of an earlier request's either
		return fasthttp.RequestConfig{}
	}
	stale := s.o.ReadTimeout // the longest a body can take to arrive
	if stale <= 0 {
		stale = time.Minute
	}
	s.chunked.put(h, chunkedRequest{route: route, method: method, at: time.Now()}, stale)
	return fasthttp.RequestConfig{}
}

// dropTrailers takes out of a chunked request's header the trailer fields
// fasthttp merged into it, declared or not. They are not header fields
// (RFC 9110 §6.5.1): a key or a signature must not come from them, and
// the forward, whose body goes with a Content-Length, carries no trailers.
// VisitAllInOrder still walks the header as received (fasthttp reparses
// its raw block, bare LFs and folded lines as its parser read them): a
// field name that now occurs more often than it was received is set back
// to its received values, none for a name only the trailer had. fasthttp
// keeps Content-Type, User-Agent and Cookie in one slot each, where
// counts cannot tell a trailer from a repeated line: those are always set
// back.
func dropTrailers(h *fasthttp.RequestHeader) {
	received := map[string][]string{}
	h.VisitAllInOrder(func(k, v []byte) {
		name := strings.ToLower(string(k))
		received[name] = append(received[name], string(v))
	})
	seen := map[string]int{}
	h.VisitAll(func(k, _ []byte) { seen[strings.ToLower(string(k))]++ })
	for name, n := range seen {
		values := received[name]
		switch name {
		case "content-type", "user-agent", "cookie":
		default:
			if n <= len(values) {
				continue
			}
		}
		h.Del(name)
		for _, v := range values {
			h.Add(name, v)
		}
	}
}

// framing reports whether a request's body came chunked (from the header
// as received: fasthttp reports an empty chunked body as Content-Length 0,
// trailer included), and says what is ambiguous in how it is framed, or ""
// when nothing is. fasthttp accepts conflicting Content-Length values (it
// takes the last), Content-Length beside Transfer-Encoding (it takes the
// chunked body and keeps the connection), a Transfer-Encoding whose last
// coding is not chunked (it reads chunks anyway), and Transfer-Encoding in
// HTTP/1.0. A proxy in front that framed the same bytes the other way would
// see other requests than hookstamp does: RFC 9112 §6.1 and §6.3 want such
// a request refused and its connection closed. The fields are walked as
// fasthttp's parser read them (VisitAllInOrder): a bare LF ends a line, a
// folded line continues the one before.
func framing(h *fasthttp.RequestHeader) (chunked bool, problem string) {
	var clBuf [32]byte // the first Content-Length value, copied: f must not keep it
	cl := clBuf[:0]
	hasCL, hasTE := false, false
	h.VisitAllInOrder(func(name, value []byte) {
		if problem != "" || len(name) == 0 || (name[0]|0x20 != 'c' && name[0]|0x20 != 't') {
			return
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if hasCL && !bytes.Equal(value, cl) {
				problem = "the request has conflicting Content-Length values"
			}
			hasCL, cl = true, append(cl[:0], value...)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			hasTE = true
			codings := bytes.Split(value, []byte(","))
			if !bytes.EqualFold(bytes.TrimSpace(codings[len(codings)-1]), []byte("chunked")) {
				problem = "the request's Transfer-Encoding does not end in chunked: its length cannot be known"
			}
		}
	})
	switch {
	case problem != "":
	case hasCL && hasTE:
		problem = "the request has both Content-Length and Transfer-Encoding"
	case hasTE && !h.IsHTTP11():
		problem = "the request has Transfer-Encoding in HTTP/1.0"
	}
	return hasTE, problem
}
