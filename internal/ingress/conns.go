package ingress

import (
	"net"
	"sync"
	"sync/atomic"
)

// connListener tracks the connections it accepts so that Shutdown can end
// those that never sent a byte.
//
// fasthttp counts a new connection as active from the moment it starts
// reading the first request, so a connection a client opened and never
// used (an HTTP client's spare dial that lost the race to an idle
// connection, a health checker's TCP probe) would hold Shutdown for the
// whole read_timeout. Such a connection carries no request (bytes that
// have arrived unread count as use): ending it loses nothing, and a client
// that wanted to use it finds it closed before it wrote anything, which
// HTTP clients retry on a fresh connection. Connections that have read
// anything are left to fasthttp, which finishes the request they carry and
// closes them after its response.
type connListener struct {
	net.Listener

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnListener(ln net.Listener) *connListener {
	return &connListener{Listener: ln, conns: make(map[*trackedConn]struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

// closeUnused ends every connection that has neither read a byte nor has
// bytes waiting to be read (a request that arrived before the server's
// goroutine got to it is served).
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
		// Looked at again after the socket: the server may have read the
		// first bytes since the list was made (it consumed what
		// hasPending would have seen).
		if !hasPending(c.Conn) && !c.used.Load() {
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
// connection broke or a read deadline passed). The flags cost an atomic
// load per Read.
type trackedConn struct {
	net.Conn
	l      *connListener
	used   atomic.Bool
	ended  atomic.Bool
	closed sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	if err != nil {
		c.ended.Store(true)
	}
	return n, err
}

// readEnded reports whether a read on c has failed: nothing more will come
// from the peer. false for a connection that is not a trackedConn.
func readEnded(c net.Conn) bool {
	tc, ok := c.(*trackedConn)
	return ok && tc.ended.Load()
}

// stopReading ends the connection's reading side: the server's blocked
// read returns EOF and fasthttp closes the connection itself. Not Close:
// should the server have taken a request's first bytes in the instant
// since closeUnused looked, its reads fail and it answers with an error,
// where a closed connection would make fasthttp panic on the response's
// write deadline.
func (c *trackedConn) stopReading() {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
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
