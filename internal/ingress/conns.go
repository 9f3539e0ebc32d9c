package ingress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connListener tracks the connections it accepts so that Shutdown can end
// those that never sent a byte: fasthttp counts them active, and an unused
// spare dial or TCP probe would hold Shutdown for read_timeout. Ending one
// loses nothing (HTTP clients retry a connection closed before they wrote);
// connections that read anything are left to fasthttp.
//
// With TLS the tracking sits above the TLS layer: a connection that
// completed its handshake but sent no request is as unused as a plain one,
// while bytes waiting on the socket (a ClientHello) count as use.
type connListener struct {
	net.Listener
	tls *tls.Config // nil = plain HTTP
	log *slog.Logger
	// warned is when a shortage was last logged (Unix nanoseconds): once
	// a minute at most, however many accepts it fails.
	warned atomic.Int64

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnListener(ln net.Listener, tc *tls.Config, log *slog.Logger) *connListener {
	return &connListener{Listener: ln, tls: tc, log: log, conns: make(map[*trackedConn]struct{})}
}

// Accept waits out a shortage of file descriptors or kernel memory, as
// net/http's server does: fasthttp ends Serve at any other error than a
// timeout, and the gateway would exit with it, cutting every delivery in
// flight, at the will of a sender opening connections.
func (l *connListener) Accept() (net.Conn, error) {
	var wait time.Duration
	raw, err := l.Listener.Accept()
	for err != nil {
		if !shortOfResources(err) {
			return nil, err
		}
		if now := time.Now().UnixNano(); now-l.warned.Load() >= int64(time.Minute) {
			l.warned.Store(now)
			l.log.Warn("cannot accept connections: the process is out of file descriptors or memory; retrying until it has some",
				"err", err)
		}
		wait = min(max(2*wait, 5*time.Millisecond), time.Second)
		time.Sleep(wait)
		raw, err = l.Listener.Accept()
	}
	tc := &trackedConn{Conn: raw, raw: raw, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	if l.tls == nil {
		return tc, nil
	}
	// The handshake runs at the server's first read, in the
	// connection's own goroutine.
	s := tls.Server(raw, l.tls)
	tc.Conn = s
	return &tlsTrackedConn{trackedConn: tc, tls: s}, nil
}

// tlsTrackedConn shows fasthttp the TLS connection beneath the tracking
// (RequestCtx.IsTLS, and so X-Forwarded-Proto: https).
type tlsTrackedConn struct {
	*trackedConn
	tls *tls.Conn
}

func (c *tlsTrackedConn) Handshake() error { return c.tls.Handshake() }

func (c *tlsTrackedConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// closeUnused ends every connection that has neither read a byte nor has
// bytes waiting to be read.
func (l *connListener) closeUnused() {
	l.mu.Lock()
	var unused []*trackedConn
	for c := range l.conns {
		if !c.used.Load() {
			unused = append(unused, c)
		}
	}
	l.mu.Unlock()
	for _, c := range unused {
		// Again after the socket: the server may have read meanwhile.
		if !hasPending(c.raw) && !c.used.Load() {
			c.stopReading()
		}
	}
}

// counts returns how many accepted connections are open and how many of
// them have read something.
func (l *connListener) counts() (open, used int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.used.Load() {
			used++
		}
	}
	return len(l.conns), used
}

// trackedConn is an accepted connection that remembers whether it has read
// anything, and whether a read has failed (the peer closed its side, the
// connection broke or a read deadline passed).
type trackedConn struct {
	net.Conn          // what the server reads: raw, or TLS over it
	raw      net.Conn // the accepted socket
	l        *connListener
	used     atomic.Bool
	ended    atomic.Bool
	closed   sync.Once

	// The first request line as received, up to its LF: read and written
	// by the connection's serving goroutine only.
	firstLine []byte
	lineDone  bool
}

// maxFirstLine bounds what is kept of a first request line; fasthttp
// refuses a longer one with its read buffer.
const maxFirstLine = 8 << 10

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	if err != nil {
		c.ended.Store(true)
		tellPlainHTTP(err)
	}
	if !c.lineDone && n > 0 {
		c.noteFirstLine(p[:n])
	}
	return n, err
}

// noteFirstLine keeps the bytes of the first request line, skipping the
// empty lines a server may ignore before it (RFC 9112 §2.2).
func (c *trackedConn) noteFirstLine(b []byte) {
	if len(c.firstLine) == 0 {
		b = bytes.TrimLeft(b, "\r\n")
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b, c.lineDone = b[:i], true
	}
	if room := maxFirstLine - len(c.firstLine); len(b) > room {
		b, c.lineDone = b[:room], true
	}
	c.firstLine = append(c.firstLine, b...)
}

// firstLineVersionless reports whether c's first request line, read whole,
// names no HTTP version ("POST /hooks"): fasthttp serves it as HTTP/1.0.
func firstLineVersionless(c net.Conn) bool {
	var tc *trackedConn
	switch t := c.(type) {
	case *trackedConn:
		tc = t
	case *tlsTrackedConn:
		tc = t.trackedConn
	default:
		return false
	}
	if !tc.lineDone {
		return false
	}
	line := bytes.TrimSuffix(tc.firstLine, []byte("\r"))
	sp := bytes.IndexByte(line, ' ')
	return sp > 0 && bytes.IndexByte(line[sp+1:], ' ') < 0
}

// readEnded reports whether a read on c has failed: nothing more will come
// from the peer. false for a connection that is not a trackedConn.
func readEnded(c net.Conn) bool {
	switch tc := c.(type) {
	case *trackedConn:
		return tc.ended.Load()
	case *tlsTrackedConn:
		return tc.ended.Load()
	}
	return false
}

// stopReading ends the connection's reading side: the server's read
// returns EOF and fasthttp closes it. Not Close: had the server just taken
// a request's first bytes, fasthttp would panic setting the response's
// write deadline on a closed connection.
func (c *trackedConn) stopReading() {
	if cr, ok := c.raw.(interface{ CloseRead() error }); ok {
		_ = cr.CloseRead()
		return
	}
	_ = c.Close()
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// plainHTTP answers a request sent in plain HTTP to the TLS listener,
// which would otherwise see its connection closed without a word.
const plainHTTP = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"

const plainHTTPProblem = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"a plain HTTP request was sent to the HTTPS listener; send it over TLS"}`

// tellPlainHTTP answers plainHTTP when err is a TLS handshake that met
// the start of an HTTP request.
func tellPlainHTTP(err error) {
	re, ok := errors.AsType[tls.RecordHeaderError](err)
	if !ok || re.Conn == nil || !looksLikeHTTP(re.RecordHeader[:]) {
		return
	}
	_ = re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(re.Conn, plainHTTP, len(plainHTTPProblem), plainHTTPProblem)
}

// looksLikeHTTP reports whether a TLS record header is the start of an
// HTTP/1 request line.
func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "PATCH", "DELET", "OPTIO"} {
		if string(hdr) == m {
			return true
		}
	}
	return false
}

// shortOfResources reports whether an Accept failed for want of file
// descriptors or memory, which closing connections gives back.
func shortOfResources(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
