package ingress

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// dropTrailers takes a chunked request's trailer fields out of its header
// and reports whether it had any. They are not header fields (RFC 9110
// §6.5.1), so no key or signature may come from them and none is
// forwarded; fasthttp keeps them apart from the fields All walks, but Peek
// still finds them. A name the header also has keeps its values as
// received; the Trailer field, which announced fields that are dropped, is
// dropped with them.
func dropTrailers(h *fasthttp.RequestHeader) (received bool) {
	var names []string
	for name := range h.Trailers() {
		names = append(names, string(name))
		received = received || len(h.PeekAllTrailer(string(name))) > 0
	}
	if len(names) == 0 {
		return false
	}
	values := map[string][]string{}
	for k, v := range h.AllInOrder() {
		for _, name := range names {
			if strings.EqualFold(string(k), name) {
				values[name] = append(values[name], string(v))
			}
		}
	}
	for _, name := range names {
		h.Del(name)
	}
	h.Del(fasthttp.HeaderTrailer)
	for _, name := range names {
		for _, v := range values[name] {
			h.Add(name, v)
		}
	}
	return received
}

// codings tallies a request's Transfer-Encoding lines, which are one
// list (RFC 9110 §5.3): framing adds each line it reads, refusedByParser
// the line the parser refused.
type codings struct {
	seen, endsChunked bool // endsChunked: judged on the last line
	chunked, other    int
}

func (c *codings) add(line []byte) {
	list := bytes.Split(trimOWS(line), []byte(","))
	c.seen = true
	c.endsChunked = bytes.EqualFold(trimOWS(list[len(list)-1]), []byte("chunked"))
	for _, e := range list {
		switch e = trimOWS(e); {
		case len(e) == 0: // an empty list element (RFC 9110 §5.6.1)
		case bytes.EqualFold(e, []byte("chunked")):
			c.chunked++
		default:
			c.other++
		}
	}
}

// problem is what makes the list unusable, with the status to refuse it
// with: 400 when the body's length cannot be known, 501 for a coding the
// gateway does not decode; "" for chunked alone.
func (c *codings) problem() (int, string) {
	switch {
	case !c.endsChunked:
		return http.StatusBadRequest, "the request's Transfer-Encoding does not end in chunked: its length cannot be known"
	case c.chunked > 1:
		return http.StatusBadRequest, "the request's Transfer-Encoding applies chunked more than once"
	case c.other > 0:
		return http.StatusNotImplemented, "the request's Transfer-Encoding has a coding other than chunked, which the gateway does not decode"
	}
	return http.StatusBadRequest, ""
}

// framing reports whether a request's body came chunked, and what is
// ambiguous in how it is framed ("" when nothing is) with the status to
// refuse it with: conflicting Content-Lengths, Content-Length beside
// Transfer-Encoding, Transfer-Encoding in HTTP/1.0 or not chunked alone,
// several Host fields, fields that are not tokens or hold controls. fasthttp
// accepts them all, and a proxy in front reading the bytes otherwise would
// see other requests (RFC 9112 §3.2, §6.1, §6.3, §7). declared is the
// Content-Length as received (-1 when none): headerReceived may change it.
func framing(h *fasthttp.RequestHeader) (chunked bool, declared, status int, problem string) {
	if status, problem = version(h.Protocol()); problem != "" {
		return false, -1, status, problem
	}
	if obsFolded(h.RawHeaders()) {
		return false, -1, http.StatusBadRequest,
			"the request has a header field folded over several lines (obs-fold), which the gateway refuses (RFC 9112 §5.2)"
	}
	var clBuf [32]byte // the first Content-Length value, copied: f must not keep it
	cl := clBuf[:0]
	hasCL, hasHost := false, false
	// The parser refuses every coding but chunked and identity before the
	// header gets here (refusedByParser).
	var te codings
	for name, value := range h.AllInOrder() {
		if problem != "" {
			break
		}
		// As received: fasthttp keeps Transfer-Encoding, Content-Length
		// and Connection out of the fields All walks, so a control
		// character around "chunked" (a vertical tab, a form feed) would
		// not be seen there, and bytes.TrimSpace would read it as space
		// where a proxy in front may not.
		if problem = fieldProblem(name, value); problem != "" {
			break
		}
		if name[0]|0x20 != 'c' && name[0]|0x20 != 't' && name[0]|0x20 != 'h' {
			continue
		}
		switch value := trimOWS(value); {
		case bytes.EqualFold(name, []byte("Host")):
			if hasHost {
				problem = "the request has more than one Host field"
			}
			hasHost = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			if hasCL && !bytes.Equal(value, cl) {
				problem = "the request has conflicting Content-Length values"
			}
			hasCL, cl = true, append(cl[:0], value...)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te.add(value)
		}
	}
	if problem == "" && !hasHost && h.IsHTTP11() {
		// RFC 9112 §3.2: 400. SPEC §4 promises the upstream the Host used.
		problem = "the HTTP/1.1 request has no Host field (RFC 9112 §3.2)"
	}
	if problem == "" {
		// As fasthttp keeps them, which is what is forwarded.
		for name, value := range h.All() {
			if problem = fieldProblem(name, value); problem != "" {
				break
			}
		}
	}
	status = http.StatusBadRequest
	switch {
	case problem != "":
	case hasCL && te.seen:
		problem = "the request has both Content-Length and Transfer-Encoding"
	case te.seen && !h.IsHTTP11():
		problem = "the request has Transfer-Encoding in HTTP/1.0"
	case te.seen:
		status, problem = te.problem()
	}
	declared = -1
	if hasCL {
		if n, err := fasthttp.ParseUint(cl); err == nil {
			declared = n
		}
	}
	return te.seen, declared, status, problem
}

// version says what is wrong with a request line's HTTP version, with
// the status to refuse it with, or "". fasthttp serves any version but
// "HTTP/1.1" as HTTP/1.0 ("HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/x"),
// framing its body and keeping its connection by HTTP/1.0's rules: a
// proxy in front that read it as the version it names would not. A
// version the gateway does not speak is 505 (RFC 9110 §15.6.6), one that
// is not "HTTP/" and two digits (the name is case-sensitive, RFC 9112
// §2.3) 400.
func version(proto []byte) (int, string) {
	switch string(proto) {
	case "HTTP/1.1", "HTTP/1.0":
		return 0, ""
	}
	if len(proto) == 8 && string(proto[:5]) == "HTTP/" && isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]) {
		return http.StatusHTTPVersionNotSupported, "the gateway speaks HTTP/1.0 and HTTP/1.1 only"
	}
	return http.StatusBadRequest, "the request line's HTTP version is malformed"
}

// versionNamed refuses a request whose request line names no HTTP version,
// which fasthttp serves as HTTP/1.0 without saying so. Its first line is seen
// on the connection; an HTTP/1.0 request never keeps its connection (its
// answer closes it), so an HTTP/1.0 request after the first on a
// connection followed an HTTP/1.1 one and may be such a line: refused too.
func versionNamed(ctx *fasthttp.RequestCtx) (int, string) {
	const problem = "the request line names no HTTP version (HTTP/0.9 is not spoken)"
	if ctx.Request.Header.IsHTTP11() {
		return 0, ""
	}
	if ctx.ConnRequestNum() > 1 {
		return http.StatusBadRequest, problem + ", or HTTP/1.0 followed HTTP/1.1 on one connection"
	}
	ctx.SetConnectionClose()
	if firstLineVersionless(ctx.Conn()) {
		return http.StatusBadRequest, problem
	}
	return 0, ""
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// obsFolded reports a header line that begins with a space or a tab
// (obs-fold, RFC 9112 §5.2). fasthttp unfolds it inside its read buffer and
// then reads the buffer's last bytes again, into the body or the next
// request; such a request is refused and its connection closed. raw is the
// header block as received, without the request line.
func obsFolded(raw []byte) bool {
	if len(raw) > 0 && (raw[0] == ' ' || raw[0] == '\t') {
		return true
	}
	for i := bytes.IndexByte(raw, '\n'); i >= 0 && i+1 < len(raw); {
		if c := raw[i+1]; c == ' ' || c == '\t' {
			return true
		}
		j := bytes.IndexByte(raw[i+1:], '\n')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// fieldProblem says what is wrong with a header field as received, or "".
func fieldProblem(name, value []byte) string {
	if len(name) == 0 {
		return "the request has a header field with an empty name"
	}
	for _, b := range name {
		if b >= utf8.RuneSelf || !httpguts.IsTokenRune(rune(b)) {
			return "the request has a header field whose name is not an HTTP token"
		}
	}
	for _, b := range value {
		if b < 0x20 && b != '\t' || b == 0x7f {
			return "the request has a header field whose value holds a control character"
		}
	}
	return ""
}

// unreadable is a request fasthttp's parser refused, with the status and
// problem detail to refuse it with.
type unreadable struct {
	status int
	detail string
}

func (u *unreadable) Error() string { return u.detail }

// parseRefusals answers what fasthttp's parser refused with a problem that
// names it; other read errors (431, 408, 413) go to fiberErrors, Fiber's
// handler. The connection is closed after either.
func (s *Server) parseRefusals(fiberErrors func(*fasthttp.RequestCtx, error)) func(*fasthttp.RequestCtx, error) {
	return func(ctx *fasthttp.RequestCtx, err error) {
		u := refusedByParser(err)
		if u == nil {
			fiberErrors(ctx, err)
			return
		}
		c := s.app.AcquireCtx(ctx)
		defer s.app.ReleaseCtx(c)
		_ = s.errorHandler(c, u)
	}
}

// refusedByParser names the framing and request line faults fasthttp
// refuses before the header reaches framing, or returns nil. Most carry no
// sentinel: each error in the chain is judged by how its message begins,
// which names the fault (the request's bytes are quoted after it), and a
// transfer coding is read from the message.
func refusedByParser(err error) *unreadable {
	switch {
	case errors.Is(err, fasthttp.ErrDuplicateContentLength):
		return &unreadable{http.StatusBadRequest, "the request has more than one Content-Length field"}
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		return &unreadable{http.StatusBadRequest, "the request has Transfer-Encoding in HTTP/1.0"}
	case errors.Is(err, fasthttp.ErrorInvalidURI):
		return &unreadable{http.StatusBadRequest, malformedLine}
	case errors.Is(err, fasthttp.ErrBadTrailer):
		// fasthttp refuses a malformed name and a forbidden one alike.
		return &unreadable{http.StatusBadRequest, "the request's Trailer field names a field that is malformed or may not be sent in a trailer (RFC 9110 §6.5.1)"}
	}
	for ; err != nil; err = errors.Unwrap(err) {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "too many transfer-encoding headers"):
			// A Transfer-Encoding line after one naming chunked.
			return &unreadable{http.StatusBadRequest, "the request's Transfer-Encoding has a coding after chunked"}
		case strings.HasPrefix(msg, "unsupported transfer-encoding: "):
			return codingsRefusal(msg)
		case strings.HasPrefix(msg, "invalid request uri"), strings.HasPrefix(msg, "unsupported http version"),
			strings.HasPrefix(msg, "cannot find whitespace"):
			return &unreadable{http.StatusBadRequest, malformedLine}
		case strings.HasPrefix(msg, "too many host headers"):
			return &unreadable{http.StatusBadRequest, "the request has more than one Host field"}
		case strings.HasPrefix(msg, "missing required host header"):
			return &unreadable{http.StatusBadRequest, "the HTTP/1.1 request has no Host field, or an empty one (RFC 9112 §3.2)"}
		case strings.HasPrefix(msg, "conflicting content-type headers"):
			return &unreadable{http.StatusBadRequest, "the request has conflicting Content-Type fields"}
		case strings.HasPrefix(msg, "invalid header key"), strings.HasPrefix(msg, "malformed mime header"):
			return &unreadable{http.StatusBadRequest, malformedField}
		case strings.HasPrefix(msg, "invalid header value"), strings.HasPrefix(msg, "invalid trailer value"):
			return &unreadable{http.StatusBadRequest, controlInValue}
		case strings.HasPrefix(msg, "forbidden trailer key"):
			return &unreadable{http.StatusBadRequest, forbiddenTrailer}
		}
	}
	return nil
}

const malformedLine = "the request line is malformed (RFC 9112 §3)"

const (
	malformedField   = "a field line is malformed: no colon, or a name that is not a token (RFC 9112 §5)"
	controlInValue   = "a field's value holds a control character (RFC 9110 §5.5)"
	forbiddenTrailer = "the request's trailer has a field no sender may put in one, such as Cookie or Authorization (RFC 9110 §6.5.1)"
)

// codingsRefusal refuses the Transfer-Encoding line fasthttp quotes in
// its refusal msg, judged as framing judges one.
func codingsRefusal(msg string) *unreadable {
	var te codings
	if quoted, err := strconv.QuotedPrefix(strings.TrimPrefix(msg, "unsupported transfer-encoding: ")); err == nil {
		if line, err := strconv.Unquote(quoted); err == nil {
			te.add([]byte(line))
		}
	}
	status, problem := te.problem()
	return &unreadable{status, problem}
}
