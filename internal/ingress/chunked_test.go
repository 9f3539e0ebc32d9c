package ingress

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// refusedByParser names what fasthttp's parser refused from how its error
// begins, never from the request's bytes the error quotes: a header value
// holding a fault's words is not that fault.
func TestRefusedByParser(t *testing.T) {
	const (
		notEndingInChunked = "the request's Transfer-Encoding does not end in chunked: its length cannot be known"
		chunkedTwice       = "the request's Transfer-Encoding applies chunked more than once"
		otherCoding        = "the request's Transfer-Encoding has a coding other than chunked, which the gateway does not decode"
	)
	head := "POST /hooks HTTP/1.1\r\nHost: gw\r\n"
	for _, c := range []struct {
		name, raw string
		status    int // 0: not the parser's framing refusal (Fiber answers it)
		detail    string
	}{
		{"gzip, chunked", head + "Transfer-Encoding: gzip, chunked\r\n\r\n", 501, otherCoding},
		{"chunked, gzip", head + "Transfer-Encoding: chunked, gzip\r\n\r\n", 400, notEndingInChunked},
		{"chunked, chunked", head + "Transfer-Encoding: chunked, chunked\r\n\r\n", 400, chunkedTwice},
		{"gzip then chunked", head + "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 400, notEndingInChunked},
		{"chunked then gzip", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "the request's Transfer-Encoding has a coding after chunked"},
		{"HTTP/1.0 chunked", "POST /hooks HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "the request has Transfer-Encoding in HTTP/1.0"},
		{"equal Content-Lengths", head + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n", 400, "the request has more than one Content-Length field"},
		{"space in the target", "POST /hooks?a=1 2 HTTP/1.1\r\nHost: gw\r\n\r\n", 400, malformedLine},
		{"control in the target", "POST /hooks?a=\x01 HTTP/1.1\r\nHost: gw\r\n\r\n", 400, malformedLine},
		{"two Hosts", head + "Host: other\r\n\r\n", 400, "the request has more than one Host field"},
		{"no Host", "POST /hooks HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400, "the HTTP/1.1 request has no Host field, or an empty one (RFC 9112 §3.2)"},
		{"two Content-Types", head + "Content-Type: a\r\nContent-Type: b\r\n\r\n", 400, "the request has conflicting Content-Type fields"},
		{"a control character in a value", head + "X-A: a\x7fb\r\n\r\n", 400, controlInValue},
		{"a control character in a name", head + "X-\x01A: b\r\n\r\n", 400, malformedField},
		{"an empty name", head + ": b\r\n\r\n", 400, malformedField},
		{"Cookie announced as a trailer", head + "Trailer: Cookie\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
			"the request's Trailer field names a field that is malformed or may not be sent in a trailer (RFC 9110 §6.5.1)"},
		{"a line without a colon", head + "X-Note\r\n\r\n", 400, malformedField},
		{"a fault's words in a bad value", head + "X-A: cannot find whitespace\x01\r\n\r\n", 400, controlInValue},
		{"a coding's words in a bad value", head + "X-A: unsupported transfer-encoding: \"gzip, chunked\"\x01\r\n\r\n", 400, controlInValue},
		{"a fault's words in a large header", head + "X-A: cannot find whitespace " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			err := h.Read(bufio.NewReaderSize(strings.NewReader(c.raw), 4<<10))
			if err == nil {
				t.Fatal("the parser read it")
			}
			u := refusedByParser(err)
			switch {
			case c.status == 0 && u != nil:
				t.Fatalf("%v: named %d %q, want it left to Fiber", err, u.status, u.detail)
			case c.status != 0 && (u == nil || u.status != c.status || u.detail != c.detail):
				t.Fatalf("%v: named %+v, want %d %q", err, u, c.status, c.detail)
			}
		})
	}
	if u := refusedByParser(http.ErrBodyNotAllowed); u != nil {
		t.Fatalf("another error named %+v", u)
	}
}
