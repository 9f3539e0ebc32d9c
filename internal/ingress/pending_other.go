//go:build !unix

package ingress

import "net"

// hasPending cannot look at the socket here: a connection that has not
// been read from counts as unused.
func hasPending(net.Conn) bool { return false }
