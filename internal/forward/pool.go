package forward

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// The caller's goroutine writes the request and reads the answer on a
// pooled connection. The pool never re-sends, counts what each connection
// wrote (countingConn), and checks an idle connection is still open before
// writing on it (alive): writing on a closed one would turn "not sent"
// into "no answer".

// conn is one upstream connection.
type conn struct {
	cc     *countingConn // the TCP connection, counting what it writes
	nc     net.Conn      // cc, or a TLS client over it
	lim    *headLimit    // between nc and br
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	// reused: an exchange completed on c before (it came from the pool).
	reused bool
}

// maxResponseHead bounds what is read of an answer before its body: the
// status line, interim answers and headers.
const maxResponseHead = 1 << 20

// headLimit fails reads once left reaches zero; left < 0 is unlimited. It
// sits under the bufio.Reader, read-ahead included.
type headLimit struct {
	r    io.Reader
	left int64
	// head keeps what was read while left >= 0 (the answer's head, and
	// whatever arrived with it), for connectionOf.
	head []byte
}

var errHeadTooLarge = errors.New("response status line and headers over 1 MiB")

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	l.head = append(l.head, p[:n]...)
	return n, err
}

func (c *conn) close() { _ = c.nc.Close() }

// hostPool holds the connections to one scheme://host:port.
type hostPool struct {
	f          *Forwarder
	addr       string // host:port to dial
	serverName string // for TLS; "" for plain http
	tls        bool

	mu    sync.Mutex
	idle  []*conn // most recently used last
	open  int     // idle and busy connections
	freed chan struct{}
	sweep *time.Timer
}

func (f *Forwarder) pool(scheme, addr, host string) *hostPool {
	key := scheme + "://" + addr
	if p, ok := f.pools.Load(key); ok {
		return p.(*hostPool)
	}
	p := &hostPool{f: f, addr: addr, tls: scheme == "https", freed: make(chan struct{})}
	if p.tls {
		p.serverName = host
	}
	actual, _ := f.pools.LoadOrStore(key, p)
	return actual.(*hostPool)
}

// get returns an idle connection that is still open, or dials a new one,
// waiting for a free slot while MaxConnsPerHost connections are open.
func (p *hostPool) get(ctx context.Context) (*conn, error) {
	for {
		// A pooled connection would carry the delivery of an ended
		// forward before Do's AfterFunc cuts it.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			c := p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			if time.Since(c.idleAt) < p.f.idleTimeout && alive(c) && tlsIdle(c) {
				return c, nil
			}
			p.discard(c)
			continue
		}
		if p.f.maxConns <= 0 || p.open < p.f.maxConns {
			p.open++
			p.mu.Unlock()
			c, err := p.dial(ctx)
			if err != nil {
				p.mu.Lock()
				p.release()
				p.mu.Unlock()
			}
			return c, err
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *hostPool) dial(ctx context.Context) (*conn, error) {
	raw, err := p.f.dialTCP(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: raw}
	c := &conn{cc: cc, nc: cc}
	if p.tls {
		cfg := &tls.Config{}
		if p.f.tlsConfig != nil {
			cfg = p.f.tlsConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = p.serverName
		}
		cfg.NextProtos = []string{"http/1.1"} // the only protocol spoken here
		tc := tls.Client(cc, cfg)
		hctx, cancel := context.WithTimeout(ctx, p.f.tlsTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = tc.Close()
			return nil, err
		}
		c.nc = tc
	}
	c.lim = &headLimit{r: c.nc, left: -1}
	c.br = bufio.NewReaderSize(c.lim, 4<<10)
	c.bw = bufio.NewWriterSize(c.nc, 4<<10)
	return c, nil
}

// put returns c for reuse, or closes it when MaxIdleConnsPerHost are idle.
func (p *hostPool) put(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= p.f.maxIdle {
		c.close()
		p.release()
		return
	}
	c.idleAt, c.reused = time.Now(), true
	p.idle = append(p.idle, c)
	p.signal()
	if p.sweep == nil {
		p.sweep = time.AfterFunc(p.f.idleTimeout, p.closeExpired)
	}
}

// discard closes c, which is not coming back.
func (p *hostPool) discard(c *conn) {
	c.close()
	p.mu.Lock()
	p.release()
	p.mu.Unlock()
}

// release gives up one connection's slot; p.mu is held.
func (p *hostPool) release() {
	p.open--
	p.signal()
}

// signal wakes the deliveries waiting for a connection (a slot was freed,
// or a connection became idle); p.mu is held.
func (p *hostPool) signal() {
	if p.f.maxConns > 0 {
		close(p.freed)
		p.freed = make(chan struct{})
	}
}

// closeExpired closes the connections idle for IdleConnTimeout, and runs
// again while connections are idle.
func (p *hostPool) closeExpired() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if now.Sub(c.idleAt) >= p.f.idleTimeout {
			c.close()
			p.release()
			continue
		}
		kept = append(kept, c)
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	if len(p.idle) == 0 {
		p.sweep = nil
		return
	}
	p.sweep.Reset(p.f.idleTimeout - now.Sub(p.idle[0].idleAt))
}

// closeIdle closes every idle connection (Forwarder.Close).
func (p *hostPool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.close()
		p.release()
	}
	clear(p.idle)
	p.idle = p.idle[:0]
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
}

// tlsIdle reports whether a TLS connection holds nothing unread above the
// socket: crypto/tls reads ahead whole records, where neither the
// bufio.Reader nor alive sees them. A read that may not wait finds them;
// only its timeout (which crypto/tls does not keep) means idle.
func tlsIdle(c *conn) bool {
	if c.nc == net.Conn(c.cc) {
		return true // plain TCP: alive looked at everything
	}
	_ = c.nc.SetReadDeadline(aLongTimeAgo)
	_, err := c.br.Peek(1)
	_ = c.nc.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
