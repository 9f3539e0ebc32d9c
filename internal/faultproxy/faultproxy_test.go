package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(tb testing.TB) string {
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

func TestProxyCutsHangsSlowsAndRestores(t *testing.T) {
	p, err := New("echo", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

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
