//go:build unix

package ingress

import (
	"net"
	"syscall"
)

// hasPending reports whether bytes wait unread on c, with one
// non-blocking recvfrom(MSG_PEEK) through Control, which does not queue
// behind the server's blocked read.
func hasPending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var b [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = err == nil && n > 0
	})
	return pending
}
