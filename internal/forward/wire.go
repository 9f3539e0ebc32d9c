package forward

import (
	"net"
	"sync/atomic"
)

// countingConn counts the bytes written to a connection, so that a failed
// exchange can tell "nothing reached the upstream" from "something did": the
// count is taken before the request is written and compared after a
// failure, before the connection is closed. Under TLS it counts the
// records on the wire: a TLS alert written by a failing write can only turn
// a "not sent" into a "sent", the safe (ambiguous) side.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}
