// Package faultproxy is a TCP proxy on loopback that stands between code
// under test and one of its dependencies (Redis, PostgreSQL) and can cut,
// hang, slow, mute, strand and restore the connection, so that outages are
// real network failures while the dependency itself keeps running and
// keeps its data. The chaos harness and the outage tests share it.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does to the traffic it carries.
type Mode int

// Proxy modes.
const (
	// Pass forwards bytes as they come (plus Latency, if set).
	Pass Mode = iota
	// Cut closes every open connection and resets new ones as soon as
	// they are accepted: the dependency is down, clients fail fast.
	Cut
	// Blackhole keeps connections open but moves no byte, and accepts
	// new connections without ever connecting them: the dependency hangs,
	// clients fail only by their own timeouts. Restore lets the held bytes
	// flow again, like a network that recovers.
	Blackhole
	// Mute carries the clients' bytes to the dependency, which acts on
	// them, and drops its replies: a reply lost on the way back, so a
	// client cannot tell a statement that ran from one that did not. With
	// a marker (MuteAfter) only the replies of connections that have sent
	// it since are dropped. TCP never delivers a stream with a gap, so a
	// connection that lost a reply is closed when the mute ends: it hangs
	// meanwhile, like a connection whose network failed after the request.
	Mute
	// Strand leaves every connection open and silent for good, those
	// accepted meanwhile too (never connected), even after Restore, which
	// passes new connections only: the database's host died with its
	// connections' state, as no reset ever comes from a host that is gone.
	Strand
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	case Mute:
		return "mute"
	case Strand:
		return "strand"
	}
	return "unknown"
}

// Proxy is a TCP proxy on loopback in front of one dependency (Redis,
// PostgreSQL) that can cut, hang, slow and restore the connection. It is the
// network between the gateways and their dependencies: the dependency itself
// keeps running and keeps its data.
type Proxy struct {
	name   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced on every mode change
	marker  []byte        // MuteAfter's; nil mutes every connection
	links   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
	// dial connects to the target (tests hold a link between its accept
	// and its connection with it).
	dial func(target string) (net.Conn, error)
}

// link is one proxied connection.
type link struct {
	client net.Conn
	// marked: the client sent the proxy's mute marker.
	marked atomic.Bool
	// dropped: a reply was dropped; the link ends with the mute.
	dropped atomic.Bool
	// stranded: the link moves no byte until the proxy closes (Strand).
	stranded atomic.Bool

	mu     sync.Mutex
	server net.Conn // nil until connected
	closed bool
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, like a dropped network
	}
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}

// connect attaches the server side, unless the link was closed (cut, or
// the proxy closed) while it was being dialled: then the caller closes s.
// Without this a link closed mid-dial kept its server connection open
// for good, and Close waited on it forever.
func (l *link) connect(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.server = s
	return true
}

// New listens on a free loopback port and forwards to target.
func New(name, target string) (*Proxy, error) {
	return newProxy(name, target, func(target string) (net.Conn, error) { return net.DialTimeout("tcp", target, 5*time.Second) })
}

func newProxy(name, target string, dial func(string) (net.Conn, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy %s: listen: %w", name, err)
	}
	p := &Proxy{name: name, target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}, dial: dial}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode reports the current mode and added latency.
func (p *Proxy) Mode() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency
}

// Cut closes every connection and resets new ones until Restore.
func (p *Proxy) Cut() { p.set(Cut, 0) }

// Blackhole stops every byte until Restore.
func (p *Proxy) Blackhole() { p.set(Blackhole, 0) }

// Mute drops the dependency's replies until Restore (Mute).
func (p *Proxy) Mute() { p.MuteAfter(nil) }

// MuteAfter drops the replies on each connection from the moment its
// client sends marker (all replies when nil) until Restore: a statement
// whose parameters hold the marker runs, and its client never hears back.
func (p *Proxy) MuteAfter(marker []byte) {
	p.mu.Lock()
	p.marker = marker
	for l := range p.links {
		l.marked.Store(false)
	}
	p.mu.Unlock()
	p.set(Mute, 0)
}

// Strand strands every connection, open and new, for good (Strand).
func (p *Proxy) Strand() {
	p.mu.Lock()
	for l := range p.links {
		l.stranded.Store(true)
	}
	p.mu.Unlock()
	p.set(Strand, 0)
}

// Slow delays every chunk of data, in both directions, by d.
func (p *Proxy) Slow(d time.Duration) { p.set(Pass, d) }

// Restore passes traffic again, without added latency.
func (p *Proxy) Restore() { p.set(Pass, 0) }

func (p *Proxy) set(m Mode, latency time.Duration) {
	p.mu.Lock()
	p.mode, p.latency = m, latency
	close(p.changed)
	p.changed = make(chan struct{})
	var cut []*link
	for l := range p.links {
		if m == Cut || (m != Mute && l.dropped.Load()) {
			cut = append(cut, l)
		}
	}
	p.mu.Unlock()
	for _, l := range cut {
		l.close()
	}
}

// mark notes a link whose client sent the marker while muted.
func (p *Proxy) mark(l *link, sent []byte) {
	p.mu.Lock()
	marker, muted := p.marker, p.mode == Mute
	p.mu.Unlock()
	if muted && marker != nil && bytes.Contains(sent, marker) {
		l.marked.Store(true)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	var all []*link
	for l := range p.links {
		all = append(all, l)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range all {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// gate blocks while the proxy is blackholed or the link stranded; it
// reports false once the link must end (cut or closed), and drop for a
// reply while muted.
func (p *Proxy) gate(l *link, reply bool) (latency time.Duration, drop, ok bool) {
	for {
		p.mu.Lock()
		mode, latency, changed, closed, marker := p.mode, p.latency, p.changed, p.closed, p.marker
		_, alive := p.links[l]
		p.mu.Unlock()
		switch {
		case closed || !alive || mode == Cut:
			return 0, false, false
		case l.stranded.Load():
		case mode == Pass:
			return latency, false, true
		case mode == Mute:
			return 0, reply && (marker == nil || l.marked.Load()), true
		}
		<-changed
	}
}

func (p *Proxy) serve(c net.Conn) {
	l := &link{client: c}
	p.mu.Lock()
	if p.closed || p.mode == Cut {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	l.stranded.Store(p.mode == Strand)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		l.close()
	}()
	// A blackholed proxy accepts but does not connect.
	if _, _, ok := p.gate(l, false); !ok {
		return
	}
	s, err := p.dial(p.target)
	if err != nil {
		return
	}
	if !l.connect(s) {
		_ = s.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(l, s, c, false); done <- struct{}{} }()
	go func() { p.pipe(l, c, s, true); done <- struct{}{} }()
	<-done
	l.close()
	<-done
}

// pipe copies src to dst chunk by chunk, holding each chunk while the
// proxy is blackholed, delaying it while slowed and dropping it when it is
// a reply (from the dependency) while muted.
func (p *Proxy) pipe(l *link, dst io.Writer, src io.Reader, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			latency, drop, ok := p.gate(l, reply)
			if !ok {
				return
			}
			if drop {
				l.dropped.Store(true)
				if m, _ := p.Mode(); m != Mute {
					return // the mute ended meanwhile, its closing missed this link
				}
				continue
			}
			if !reply {
				p.mark(l, buf[:n])
			}
			if latency > 0 {
				time.Sleep(latency)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return
		}
	}
}
