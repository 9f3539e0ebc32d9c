package forward

import (
	"context"
	"net"
	"net/http/httptrace"
	"sync/atomic"
)

// countingConn counts the bytes written to a connection, so that a failed
// exchange can tell "nothing reached the upstream" from "something did".
// httptrace alone cannot: WroteHeaders and WroteRequest report writes into the
// Transport's buffer, not onto the wire.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// countingDialer wraps every connection dial returns in a countingConn.
func countingDialer(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c}, nil
	}
}

// wire observes one exchange through httptrace: which connection the
// Transport handed it and how many bytes that connection had written then.
// The Transport never replays our requests, so GotConn fires at most once.
type wire struct {
	got  bool
	conn *countingConn
	mark int64
}

func (w *wire) gotConn(info httptrace.GotConnInfo) {
	w.got = true
	c := info.Conn
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = tc.NetConn()
	}
	if cc, ok := c.(*countingConn); ok {
		w.conn, w.mark = cc, cc.written.Load()
	}
}

// sent reports whether any byte may have reached the upstream. Without a
// connection nothing was sent; on a connection we cannot count, assume it
// was. Under TLS the count includes the close_notify alert written when the
// Transport closes the failed connection, which can only turn a "not sent"
// into a "sent": the error stays on the safe (ambiguous) side.
func (w *wire) sent() bool {
	if !w.got {
		return false
	}
	if w.conn == nil {
		return true
	}
	return w.conn.written.Load() != w.mark
}
