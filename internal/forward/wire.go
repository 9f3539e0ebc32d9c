package forward

import (
	"net"
	"sync/atomic"
)

// countingConn counts the bytes written, so that a failed exchange can tell
// "nothing reached the upstream" from "something did". Under TLS a written
// alert can only turn "not sent" into "sent", the safe side.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}
