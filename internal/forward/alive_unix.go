//go:build unix

package forward

import (
	"errors"
	"syscall"
)

// alive reports whether an idle pooled connection may carry a request: the
// upstream has neither closed it nor sent anything unasked. It peeks with
// one non-blocking recvfrom(MSG_PEEK).
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
		// EAGAIN is the only healthy answer: data, FIN or another error
		// all mean the connection is unusable.
		ok = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && ok
}
