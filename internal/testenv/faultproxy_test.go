package testenv

import (
	"bufio"
	"errors"
	"net"
	"os"
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

// roundTrip writes a line on c and reads the answer within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func dial(tb testing.TB, addr string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		tb.Fatalf("dial proxy: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestFaultProxy(t *testing.T) {
	p := StartFaultProxy(t, echoServer(t))

	c, r := dial(t, p.Addr)
	if got, err := roundTrip(c, r, time.Second); err != nil || got != "ping\n" {
		t.Fatalf("proxied: %q %v", got, err)
	}

	p.Cut()
	if _, err := roundTrip(c, r, time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("open connection after Cut: %v, want reset", err)
	}
	// A new connection is reset at once: during the dial or at first use.
	if c2, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		defer c2.Close()
		if _, err := roundTrip(c2, bufio.NewReader(c2), time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("new connection after Cut: %v, want reset", err)
		}
	}

	p.Restore()
	c3, r3 := dial(t, p.Addr)
	if got, err := roundTrip(c3, r3, time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after Restore: %q %v", got, err)
	}

	p.Hang()
	if _, err := roundTrip(c3, r3, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("open connection after Hang: %v, want no answer", err)
	}
	c4, r4 := dial(t, p.Addr) // accepted
	if _, err := roundTrip(c4, r4, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection after Hang: %v, want no answer", err)
	}

	p.Restore()
	if _, err := roundTrip(c4, r4, time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hung connection after Restore: %v, want reset", err)
	}
	c5, r5 := dial(t, p.Addr)
	if got, err := roundTrip(c5, r5, time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after Restore from Hang: %q %v", got, err)
	}
}
