package ingress

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// shortListener fails its first accepts as a process out of file
// descriptors does.
type shortListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *shortListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// flakyListener fails every other accept as a process short of file
// descriptors does.
type flakyListener struct {
	net.Listener
	calls atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.calls.Add(1)%2 == 1 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// A shortage that lasts is logged once a minute, not once per connection
// accepted through it: a sender could otherwise fill the log.
func TestShortageIsLoggedOnceAMinute(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
		Engine: passEngine{}, Forwarder: &countingForwarder{}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(&flakyListener{Listener: ln}) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 10 {
		resp, err := client.Post("http://"+ln.Addr().String()+"/r", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "cannot accept connections"); n != 1 {
		t.Fatalf("%d warnings for 10 connections accepted through a shortage, want 1:\n%s", n, logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A sender that opens connections until the process runs out of file
// descriptors must not end the server: Serve returned at the first
// failed accept, and the gateway exited with every delivery in flight.
// It accepts again once descriptors are back, and the next delivery is
// forwarded.
func TestServerOutlivesRunningOutOfFileDescriptors(t *testing.T) {
	fwd := &countingForwarder{}
	// A method the route does not deduplicate is forwarded as it is: no
	// engine or key is involved.
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
		Engine: passEngine{}, Forwarder: fwd})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &shortListener{Listener: ln}
	sl.failures.Store(5)
	served := make(chan error, 1)
	go func() { served <- s.Serve(sl) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+ln.Addr().String()+"/r", "application/json", strings.NewReader("{}"))
	if err != nil {
		select {
		case err := <-served:
			t.Fatalf("Serve returned %v after accepts failed with EMFILE; want it to keep accepting", err)
		default:
		}
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || fwd.count() != 1 {
		t.Fatalf("status %d, %d forwards; want 200 and 1", resp.StatusCode, fwd.count())
	}
}

// server.max_conns bounds the connections served at once, idle keep-alive
// ones included: a sender holding thousands open cannot make the gateway
// hold a read buffer for each. One more is refused (fasthttp writes 503
// and closes without reading the request, so the client may read the
// answer or see the connection reset) and not forwarded; once one
// closes, the next is served.
func TestServerServesAtMostMaxConns(t *testing.T) {
	fwd := &countingForwarder{}
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
		Engine: passEngine{}, Forwarder: fwd, MaxConns: 2})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	addr := ln.Addr().String()
	// served posts on a connection of its own and reports whether the
	// request was answered 200; refused is any other answer, or none.
	served := func() bool {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Post("http://"+addr+"/r", "application/json", strings.NewReader("{}"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Accepted in order: the two idle ones hold both places.
	if served() {
		t.Fatal("a third connection was served; want it refused")
	}
	if n := fwd.count(); n != 0 {
		t.Fatalf("%d forwards of the refused request, want 0", n)
	}
	idle[0].Close()
	defer idle[1].Close()
	deadline := time.Now().Add(5 * time.Second)
	for !served() {
		if time.Now().After(deadline) {
			t.Fatal("still refused 5s after an idle connection closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := fwd.count(); n != 1 {
		t.Fatalf("%d forwards, want 1", n)
	}
}
