//go:build unix

package ingress

import (
	"net"
	"syscall"
)

// hasPending reports whether bytes wait unread on c: a request that has
// arrived but that the server's goroutine has not read yet. One
// non-blocking recvfrom(MSG_PEEK) through Control, which, unlike Read,
// does not queue behind the server's own blocked read.
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
