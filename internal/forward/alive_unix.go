//go:build unix

package forward

import (
	"errors"
	"syscall"
)

// alive reports whether an idle pooled connection may carry a request: the
// upstream has neither closed it nor sent anything unasked (a late or
// stray answer, a TLS alert). It peeks at the socket without blocking and
// without consuming: one recvfrom(MSG_PEEK|MSG_DONTWAIT).
func alive(c *conn) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.cc.Conn.(syscall.Conn)
	if !ok {
		return true // cannot look (tests' wrapped connections)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is the only healthy answer: without
		// an error there is unasked data (n > 0) or the upstream's FIN
		// (n == 0), and any other error (ECONNRESET) is a dead
		// connection.
		ok = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && ok
}
