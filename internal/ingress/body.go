package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// The server streams request bodies and the handler reads each one first,
// with readBody: unstreamed, fasthttp reserves the declared Content-Length
// as soon as the header arrives, and clients promising large bodies and
// sending none would pin connections × body_limit. Streaming also lets the
// handler count a 413 on its route.

// pooledBody bounds the bodies whose buffers go back to the pool.
const pooledBody = 64 << 10

// prefetched is what fasthttp reads of a streamed body before the handler.
const prefetched = 8 << 10

// readBody reads the request's body into a pooled buffer, up to BodyLimit,
// and makes it the request's body; release hands the buffer back. A
// declared length over the limit is refused 413 unread, a chunked body 413
// once past it, an unreadable one 408 or 400; each time the connection is
// closed, since what follows on it is not where a next request starts.
func (s *Server) readBody(rc *fasthttp.RequestCtx, declared int) (release func(), err error) {
	req := &rc.Request
	limit := s.o.BodyLimit
	if declared > limit { // its Content-Length was set to 0 by headerReceived
		rc.SetConnectionClose()
		return nil, fiber.ErrRequestEntityTooLarge
	}
	if !req.IsBodyStream() {
		return func() {}, nil
	}
	bp := s.bodies.Get().(*[]byte)
	release = func() {
		if cap(*bp) <= pooledBody {
			s.bodies.Put(bp)
		}
	}
	b := (*bp)[:0]
	stream := rc.RequestBodyStream()
	cl := req.Header.ContentLength() // -1: chunked
	if cl < 0 || cl > prefetched {
		// Still arriving when Shutdown abandons deliveries, it is cut then
		// (408), not waited for until read_timeout.
		conn := rc.Conn() // not rc in the callback: it is reused once handle returns
		stop := context.AfterFunc(s.abandon, func() { _ = conn.SetReadDeadline(time.Now()) })
		defer stop()
	}
	for {
		if len(b) == cap(b) {
			// Grow only as bytes arrive, up to the limit plus one byte.
			b = slices.Grow(b, min(max(cap(b), 4<<10), limit+1-len(b)))
		}
		n, rerr := stream.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		*bp = b
		if len(b) > limit {
			release()
			rc.SetConnectionClose()
			return nil, fiber.ErrRequestEntityTooLarge
		}
		if errors.Is(rerr, io.EOF) {
			// fasthttp's stream passes the connection's EOF on as the body's
			// end: a body cut short would be forwarded as the delivery. A
			// chunked body read to a failed connection read ended before its
			// last chunk (that chunk is read from bytes that arrived).
			if cl >= 0 && len(b) != cl || cl < 0 && readEnded(rc.Conn()) {
				release()
				rc.SetConnectionClose()
				return nil, bodyReadError(io.ErrUnexpectedEOF)
			}
			break
		}
		if rerr != nil {
			release()
			rc.SetConnectionClose()
			return nil, bodyReadError(rerr)
		}
	}
	req.SetBodyRaw(b)
	return release, nil
}

// headerReceived is fasthttp's Server.HeaderReceived. A request whose
// declared length is over the limit gets Content-Length 0, so that fasthttp
// does not wait for its first 8 KiB and the handler refuses it at once
// (framing keeps the length as received). Its connection is closed after
// the answer: its unread body must never be parsed as the next request.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if h.ContentLength() > s.o.BodyLimit {
		h.SetContentLength(0)
		h.SetConnectionClose()
	}
	return fasthttp.RequestConfig{}
}

// bodyReadError is the answer to a body that could not be read, as Fiber
// maps fasthttp's errors: 408 for a timeout, else 400, naming what the
// parser refused in a chunked body's trailer (refusedByParser).
func bodyReadError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fiber.ErrRequestTimeout
	}
	if u := refusedByParser(err); u != nil {
		return u
	}
	return fiber.ErrBadRequest
}
