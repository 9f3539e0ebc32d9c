package faultproxy

import (
	"bufio"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line, after sending it on
// got (when not nil).
func echoServer(tb testing.TB, got chan<- string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if got != nil {
						got <- line
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads the echo within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadString('\n')
	return err
}

func dial(tb testing.TB, addr string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// echoProxy is a proxy in front of echoServer(got) and a connection
// through it that has made one round trip.
func echoProxy(tb testing.TB, got chan<- string) (*Proxy, net.Conn, *bufio.Reader) {
	tb.Helper()
	p, err := New("echo", echoServer(tb, got))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	c, r := dial(tb, p.Addr())
	if err := roundTrip(c, r, time.Second); err != nil {
		tb.Fatalf("through the proxy: %v", err)
	}
	return p, c, r
}

func TestProxyCutsHangsSlowsAndRestores(t *testing.T) {
	p, c, r := echoProxy(t, nil)

	p.Cut()
	if err := roundTrip(c, r, time.Second); err == nil {
		t.Fatal("an open connection still works after Cut")
	}
	// A cut proxy resets new connections as it accepts them: the reset
	// can reach the dial itself or the first round trip.
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		err = roundTrip(c2, bufio.NewReader(c2), time.Second)
		c2.Close()
		if err == nil {
			t.Fatal("a new connection works while cut")
		}
	}

	p.Restore()
	c3, r3 := dial(t, p.Addr())
	if err := roundTrip(c3, r3, time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}

	p.Blackhole()
	if err := roundTrip(c3, r3, 200*time.Millisecond); err == nil {
		t.Fatal("bytes moved while blackholed")
	}
	p.Restore()
	// The held ping comes through: the network recovered.
	_ = c3.SetDeadline(time.Now().Add(time.Second))
	if _, err := r3.ReadString('\n'); err != nil {
		t.Fatalf("the held bytes did not arrive after Restore: %v", err)
	}

	p.Slow(150 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c3, r3, 2*time.Second); err != nil {
		t.Fatalf("slowed: %v", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("a round trip through a proxy slowed by 150ms each way took %v", el)
	}
}

// A link cut, or closed with the proxy, while its server side is being
// dialled must not keep the server connection once the dial completes. It
// did: the server connection stayed open for good, and Close waited on it
// forever (a hung make test).
func TestStopWhileDialling(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(p *Proxy) (done <-chan struct{})
	}{
		{"cut", func(p *Proxy) <-chan struct{} {
			p.Cut()
			return nil
		}},
		{"close", func(p *Proxy) <-chan struct{} {
			done := make(chan struct{})
			go func() { p.Close(); close(done) }()
			return done
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				if c, err := ln.Accept(); err == nil {
					accepted <- c
				}
			}()
			dialling, release := make(chan struct{}), make(chan struct{})
			p, err := newProxy("held", ln.Addr().String(), func(target string) (net.Conn, error) {
				close(dialling)
				<-release
				return net.DialTimeout("tcp", target, time.Second)
			})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := dial(t, p.Addr())
			<-dialling
			closed := tc.stop(p)
			// The client side is reset when the link is closed.
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatal("the client read a byte from a stopped link")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the client side was not closed by the stop")
			}
			close(release)

			var s net.Conn
			select {
			case s = <-accepted:
			case <-time.After(2 * time.Second):
				t.Fatal("the held dial never connected")
			}
			defer s.Close()
			_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := s.Read(make([]byte, 1)); err == nil {
				t.Fatal("the server read a byte from a stopped link")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server connection of a link stopped mid-dial stayed open")
			}
			if closed == nil {
				done := make(chan struct{})
				go func() { p.Close(); close(done) }()
				closed = done
			}
			select {
			case <-closed:
			case <-time.After(2 * time.Second):
				t.Fatal("Close hung on a link stopped mid-dial")
			}
		})
	}
}

// Muted, a request reaches the server, which acts on it, and its reply
// never comes back; when the mute ends that connection is closed (TCP
// would never resume a stream with a gap) and new ones work. Muted after a
// marker, only the connection that sent it loses its replies.
func TestMuteDropsRepliesOnly(t *testing.T) {
	got := make(chan string, 16)
	received := func(want string) {
		t.Helper()
		select {
		case line := <-got:
			if line != want {
				t.Fatalf("the server received %q, want %q", line, want)
			}
		case <-time.After(time.Second):
			t.Fatalf("%q did not reach the server", want)
		}
	}
	p, c, r := echoProxy(t, got)
	received("ping\n")

	p.Mute()
	if err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("a reply came back while muted")
	}
	received("ping\n")
	p.Restore()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err == nil || os.IsTimeout(err) {
		t.Fatalf("the connection that lost a reply was not closed when the mute ended: %v", err)
	}
	c, r = dial(t, p.Addr())
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatalf("a new connection after Restore: %v", err)
	}
	received("ping\n")

	other, otherR := dial(t, p.Addr())
	p.MuteAfter([]byte("marked"))
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatalf("muted after a marker, before sending it: %v", err)
	}
	received("ping\n")
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("marked\n")); err != nil {
		t.Fatal(err)
	}
	received("marked\n")
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the reply %q to the marker came back", line)
	}
	if err := roundTrip(other, otherR, time.Second); err != nil {
		t.Fatalf("a connection that did not send the marker: %v", err)
	}
	received("ping\n")
}

// Stranded, open connections and those accepted meanwhile move no byte
// and are not closed, even after Restore; connections made after Restore
// pass.
func TestStrandKeepsConnectionsSilentForGood(t *testing.T) {
	p, c, r := echoProxy(t, nil)
	p.Strand()
	during, duringR := dial(t, p.Addr())
	// The proxy accepts after the kernel does: wait for it to take the link.
	if err := roundTrip(during, duringR, 300*time.Millisecond); !os.IsTimeout(err) {
		t.Fatalf("a connection accepted while stranded: %v, want a timeout", err)
	}
	p.Restore()
	for name, conn := range map[string]struct {
		c net.Conn
		r *bufio.Reader
	}{"open before": {c, r}, "accepted while stranded": {during, duringR}} {
		err := roundTrip(conn.c, conn.r, 300*time.Millisecond)
		if !os.IsTimeout(err) {
			t.Errorf("a connection %s, after Restore: %v, want a timeout (silent, not closed)", name, err)
		}
	}
	after, afterR := dial(t, p.Addr())
	if err := roundTrip(after, afterR, time.Second); err != nil {
		t.Fatalf("a connection made after Restore: %v", err)
	}
}
