package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// problemListener accepts connections whose canned refusals are problem
// documents. net/http answers a request it cannot read — a path that is
// not validly percent-encoded, a malformed header, a header over its
// limit — itself, before any handler, with a plain-text body: every other
// admin answer is an RFC 9457 document, and a client reading them expects
// one.
type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

// problemConn rewrites net/http's canned refusal, which it writes to the
// connection in one Write ("HTTP/1.1 400 Bad Request" and cannedHeaders
// and a text body), into a problem document of the same status. Every
// other write passes unchanged.
type problemConn struct{ net.Conn }

// cannedHeaders are the header lines net/http writes with a canned
// refusal (net/http/server.go, conn.serve).
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *problemConn) Write(p []byte) (int, error) {
	status, ok := cannedStatus(p)
	if !ok {
		return c.Conn.Write(p)
	}
	body, _ := json.Marshal(problemDoc{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: "the request could not be read: its request line or header is malformed (a path that is not validly percent-encoded, a header field that is not HTTP) or too large"})
	resp := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	if _, err := io.WriteString(c.Conn, resp); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite is the connection's own, which net/http uses to end a
// connection it refused while the client still sends.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// cannedStatus reports the status of p when p is a canned refusal, whole:
// "HTTP/1.1 " and a 4xx or 5xx status line, cannedHeaders, and a body
// that repeats the status line or, for 501, names the transfer encoding.
// Matching the whole write keeps a page whose text holds such a refusal
// (a stored request body shown in the console) from being rewritten where
// a write happens to begin with it.
func cannedStatus(p []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok {
		return 0, false
	}
	line, body, ok := bytes.Cut(rest, []byte(cannedHeaders))
	if !ok || len(line) < 3 || bytes.IndexByte(line, '\n') >= 0 {
		return 0, false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 599 {
		return 0, false
	}
	if !bytes.Equal(body, line) && (status != http.StatusNotImplemented || string(body) != "Unsupported transfer encoding") {
		return 0, false
	}
	return status, true
}
