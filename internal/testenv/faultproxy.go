package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// FaultProxy is a TCP proxy between the code under test and one of its
// dependencies (PostgreSQL, Redis) that the test can break and mend, so
// that outages are real network failures without touching the shared
// servers:
//
//   - Cut: every open connection is reset, and new ones are accepted and
//     reset at once (the dependency is down).
//   - Hang: open connections stop carrying bytes and new ones are accepted
//     but never answered (the dependency hangs: only timeouts help).
//   - Restore: new connections are proxied again. Connections that were
//     hung are reset, as a peer that gave up on them would.
type FaultProxy struct {
	// Addr is the proxy's loopback address; point the client at it.
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	mode   faultMode
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type faultMode int

const (
	modeUp faultMode = iota
	modeCut
	modeHang
)

// proxyConn is one client connection and its upstream twin. While hung is
// set, bytes read from either side are dropped.
type proxyConn struct {
	client, server net.Conn
	mu             sync.Mutex
	hung           bool
}

func (c *proxyConn) isHung() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hung
}

func (c *proxyConn) reset() {
	for _, nc := range []net.Conn{c.client, c.server} {
		if nc == nil {
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN: the peer sees a reset
		}
		_ = nc.Close()
	}
}

// StartFaultProxy listens on a free loopback port and proxies to target
// (host:port). It is closed when the test ends.
func StartFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: fault proxy listen: %v", err)
	}
	p := &FaultProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Cut resets every connection and refuses service until Restore.
func (p *FaultProxy) Cut() { p.set(modeCut) }

// Hang makes every connection, open or new, silent until Restore.
func (p *FaultProxy) Hang() { p.set(modeHang) }

// Restore proxies new connections again.
func (p *FaultProxy) Restore() { p.set(modeUp) }

func (p *FaultProxy) set(m faultMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.mode
	p.mode = m
	for c := range p.conns {
		switch {
		case m == modeCut, m == modeUp && prev == modeHang:
			c.reset()
			delete(p.conns, c)
		case m == modeHang:
			c.mu.Lock()
			c.hung = true
			c.mu.Unlock()
		}
	}
}

// Close stops the proxy and resets every connection.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		c.reset()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *FaultProxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &proxyConn{client: client}
	p.mu.Lock()
	mode, closed := p.mode, p.closed
	switch {
	case closed || mode == modeCut:
		p.mu.Unlock()
		c.reset()
		return
	case mode == modeHang:
		// Accepted, never answered: swallow what the client sends.
		c.hung = true
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		_, _ = io.Copy(io.Discard, client)
		p.drop(c)
		return
	}
	p.mu.Unlock()

	server, err := net.Dial("tcp", p.target)
	if err != nil {
		c.reset()
		return
	}
	c.server = server
	p.mu.Lock()
	if p.closed || p.mode == modeCut {
		p.mu.Unlock()
		c.reset()
		return
	}
	c.hung = p.mode == modeHang
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	done := make(chan struct{}, 2)
	go func() { p.pipe(c, server, client); done <- struct{}{} }()
	go func() { p.pipe(c, client, server); done <- struct{}{} }()
	<-done
	c.reset() // one side ended: end both
	<-done
	p.drop(c)
}

// pipe copies src to dst, dropping what it reads while c is hung.
func (p *FaultProxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.isHung() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, reset or closed: serve ends both sides
		}
	}
}

func (p *FaultProxy) drop(c *proxyConn) {
	c.reset()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
