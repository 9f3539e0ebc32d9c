//go:build !unix

package forward

// alive cannot peek at a socket on this platform: an idle connection is
// reused while IdleConnTimeout has not passed (see alive_unix.go).
func alive(c *conn) bool { return c.br.Buffered() == 0 }
