package ingress

import (
	"bytes"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

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
// when nothing is, with the status to refuse it with. fasthttp accepts
// conflicting Content-Length values (it takes the last), Content-Length
// beside Transfer-Encoding (it takes the chunked body and keeps the
// connection), a Transfer-Encoding whose last coding is not chunked (it
// reads chunks anyway), Transfer-Encoding in HTTP/1.0, and several Host
// fields (it takes the last). A proxy in front that read the same bytes
// the other way would see other requests than hookstamp does: RFC 9112
// §3.2, §6.1 and §6.3 want such a request refused and its connection
// closed. So is a field whose name is
// not a token or whose value holds a control character (RFC 9110 §5.1,
// §5.5), which fasthttp also accepts: forwarded, it would be refused by
// the upstream's server (or the forwarder) on every retry. The fields are walked as
// fasthttp's parser read them (VisitAllInOrder): a bare LF ends a line. A
// folded line is refused before the walk (obsFolded). declared is the Content-Length
// as received (-1 when there is none or it is not a number): headerReceived
// may have changed the one fasthttp reads the body by.
//
// fasthttp decodes only the chunked coding, and reads any
// Transfer-Encoding ending in chunked as chunked alone: the body of
// "gzip, chunked" (or "chunked, chunked") would be forwarded, with a
// Content-Length and no Transfer-Encoding, still gzip-coded (or still
// chunk-framed), a corrupted delivery the upstream cannot tell as such.
// Every Transfer-Encoding line is one list (RFC 9110 §5.3); it must be
// chunked alone: chunked applied twice is malformed (400, RFC 9112 §7),
// another coding is one the gateway does not decode (501, RFC 9112 §6.1).
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
	hasCL, hasTE, hasHost := false, false, false
	chunkedCodings, otherCodings := 0, 0
	// Whether the list's last coding is chunked, judged on the last line:
	// "gzip" then "chunked" on two lines is "gzip, chunked" (RFC 9110
	// §5.3), a coding the gateway does not decode (501), not a length that
	// cannot be known (400).
	endsChunked := false
	h.VisitAllInOrder(func(name, value []byte) {
		if problem != "" {
			return
		}
		// As received: fasthttp keeps Transfer-Encoding, Content-Length
		// and Connection out of the fields VisitAll walks, so a control
		// character around "chunked" (a vertical tab, a form feed) would
		// not be seen there, and bytes.TrimSpace would read it as space
		// where a proxy in front may not.
		if problem = fieldProblem(name, value); problem != "" {
			return
		}
		if name[0]|0x20 != 'c' && name[0]|0x20 != 't' && name[0]|0x20 != 'h' {
			return
		}
		value = trimOWS(value)
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			// fasthttp keeps the last of several; a proxy in front may
			// have routed on the first, and the upstream would get the
			// other as X-Forwarded-Host (RFC 9112 §3.2: 400).
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
			hasTE = true
			codings := bytes.Split(value, []byte(","))
			endsChunked = bytes.EqualFold(trimOWS(codings[len(codings)-1]), []byte("chunked"))
			for _, c := range codings {
				switch c = trimOWS(c); {
				case len(c) == 0: // an empty list element (RFC 9110 §5.6.1)
				case bytes.EqualFold(c, []byte("chunked")):
					chunkedCodings++
				default:
					otherCodings++
				}
			}
		}
	})
	if problem == "" && !hasHost && h.IsHTTP11() {
		// RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request
		// without Host. Passed on, the upstream got an empty
		// X-Forwarded-Host, where SPEC §4 promises the Host the client used.
		problem = "the HTTP/1.1 request has no Host field (RFC 9112 §3.2)"
	}
	if problem == "" && hasTE && !endsChunked {
		problem = "the request's Transfer-Encoding does not end in chunked: its length cannot be known"
	}
	if problem == "" {
		// The fields as fasthttp keeps them, which is what is forwarded
		// (VisitAllInOrder skips a field with an empty name).
		h.VisitAll(func(name, value []byte) {
			if problem == "" {
				problem = fieldProblem(name, value)
			}
		})
	}
	status = http.StatusBadRequest
	switch {
	case problem != "":
	case hasCL && hasTE:
		problem = "the request has both Content-Length and Transfer-Encoding"
	case hasTE && !h.IsHTTP11():
		problem = "the request has Transfer-Encoding in HTTP/1.0"
	case chunkedCodings > 1:
		problem = "the request's Transfer-Encoding applies chunked more than once"
	case otherCodings > 0:
		status = http.StatusNotImplemented
		problem = "the request's Transfer-Encoding has a coding other than chunked, which the gateway does not decode"
	}
	declared = -1
	if hasCL {
		if n, err := fasthttp.ParseUint(cl); err == nil {
			declared = n
		}
	}
	return hasTE, declared, status, problem
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

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// obsFolded reports a header line that begins with a space or a tab: the
// continuation of the line before (obs-fold, RFC 9112 §5.2). fasthttp
// (v1.51) unfolds such a line inside its read buffer and then skips as
// many bytes as the unfolded header is long, so the buffer's last two
// bytes are read again once per fold: in front of a body that arrived
// after the header (a corrupted delivery, forwarded, fingerprinted and
// recorded as sent), or as the start of the connection's next request.
// Such a request is refused and its connection closed (see handle), so
// that nothing is read from the bytes left behind. raw is the header
// block as received, without the request line.
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
