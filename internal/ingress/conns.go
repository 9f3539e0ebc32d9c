package ingress

import (
	"net"
	"sync"
	"sync/atomic"
)

// connListener tracks the connections it accepts so that Shutdown can close
// those that never sent a byte.
//
// fasthttp counts a new connection as active from the moment it starts
// reading the first request, so a connection a client opened and never
// used (an HTTP client's spare dial that lost the race to an idle
// connection, a health checker's TCP probe) would hold Shutdown for the
// whole read_timeout. Such a connection carries no request: closing it
// loses nothing, and a client that wanted to use it sees it closed before
// it wrote anything, which HTTP clients retry on a fresh connection.
// Connections that have read anything are left to fasthttp, which finishes
// the request they carry and closes them after its response.
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

// closeUnused closes every connection that has not read a byte yet.
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
		_ = c.Close()
	}
}

// trackedConn is an accepted connection that remembers whether it has read
// anything. The flag costs one atomic load per Read.
type trackedConn struct {
	net.Conn
	l      *connListener
	used   atomic.Bool
	closed sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	return n, err
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
