package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// SIGTERM: a delivery in flight when shutdown starts is finished and
// recorded within shutdown_timeout.
func TestShutdownDrainsInFlightDelivery(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(500 * time.Millisecond)
		fmt.Fprint(w, "done")
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	got := make(chan reply, 1)
	go func() { got <- send(t, g, "/hooks", `{"id":"evt_drain"}`) }()
	eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.server.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	r := <-got
	wantOutcome(t, r, 200, "forwarded")
	rec := lookup(t, g, "hooks", "evt_drain")
	if rec.State != idempotency.StateDone || string(rec.Body) != "done" {
		t.Fatalf("drained delivery not recorded: %+v", rec)
	}
	g.closeAll()
}

// SIGTERM past shutdown_timeout: the abandoned delivery's forward is cut and
// its claim released, so the provider's retry is forwarded at once instead of
// waiting for the lease.
func TestShutdownReleasesAbandonedClaims(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		fmt.Fprint(w, "second")
	})
	db := dbPath(t)
	cfg := gwConfig(t, up.URL, db, "", "screen:\n  driver: none\n  lease: 30s\n  local_cache: 0")
	cfg.Routes[0].Upstream.Timeout = 20 * time.Second
	g := startGateway(t, cfg)
	got := make(chan reply, 1)
	go func() { got <- send(t, g, "/hooks", `{"id":"evt_abandon"}`) }()
	eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })
	ref := idempotency.Ref{Route: "hooks", Key: "evt_abandon"}
	if rec, err := g.Ledger().Lookup(context.Background(), ref); err != nil || rec.State != idempotency.StatePending {
		t.Fatalf("in-flight delivery has no pending claim: %+v %v", rec, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := g.server.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v, want the deadline to pass", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v after abandoning", d)
	}
	if _, err := g.Ledger().Lookup(context.Background(), ref); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("abandoned claim still in the ledger: %v", err)
	}
	<-got // the provider got an answer (or a cut connection); either way nothing is recorded
	g.closeAll()

	g2 := startGateway(t, gwConfig(t, up.URL, db, "", "screen:\n  driver: none\n  lease: 30s\n  local_cache: 0"))
	start = time.Now()
	wantOutcome(t, send(t, g2, "/hooks", `{"id":"evt_abandon"}`), 200, "forwarded")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("retry waited %v: the abandoned claim was not released", d)
	}
	if n := up.count("evt_abandon"); n != 2 {
		t.Fatalf("upstream received %d, want 2 (abandoned + retry)", n)
	}
}

// SIGTERM with connections a client opened and never used (an HTTP client's
// spare dial, a TCP health probe): shutdown does not wait read_timeout for
// them, and a request that was half sent when shutdown began is still
// answered and recorded.
func TestShutdownClosesUnusedConnections(t *testing.T) {
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.ReadTimeout = 30 * time.Second
	g := startGateway(t, cfg)

	unused, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer unused.Close()
	half, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	body := `{"id":"evt_half"}`
	req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(half, req[:20]); err != nil {
		t.Fatal(err)
	}
	// Both accepted (connections still in the listener's backlog when it
	// closes are reset by the kernel, whatever the server does), and the
	// half-sent request's first bytes read.
	eventually(t, 5*time.Second, "connections accepted", func() bool {
		open, used := g.server.Conns()
		return open == 2 && used == 1
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- g.server.Shutdown(ctx) }()
	eventually(t, 5*time.Second, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", g.Addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if _, err := io.WriteString(half, req[20:]); err != nil {
		t.Fatalf("finishing the half-sent request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(half), nil)
	if err != nil {
		t.Fatalf("half-sent request got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != "forwarded" {
		t.Fatalf("half-sent request: %d %q, want 200 forwarded", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v (an unused connection held it until the deadline)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	if _, err := unused.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("unused connection: read %v, want EOF (closed by the gateway)", err)
	}
	if n := up.count("evt_half"); n != 1 {
		t.Fatalf("upstream received evt_half %d times, want 1", n)
	}
	if rec := lookup(t, g, "hooks", "evt_half"); rec.State != idempotency.StateDone {
		t.Fatalf("half-sent delivery not recorded: %+v", rec)
	}
	g.closeAll()
}

// On a record.ambiguous: hold route, a forward that shutdown abandoned
// after sending may have been acted on like one that timed out: it is held
// for an operator, not released, and the provider's retry is not forwarded.
func TestShutdownHoldsAbandonedForwardOnHoldRoute(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	db := dbPath(t)
	cfg := func() *config.Config {
		c := gwConfig(t, up.URL, db, "    record:\n      ambiguous: hold", "screen:\n  driver: none\n  lease: 30s\n  local_cache: 0")
		c.Routes[0].Upstream.Timeout = 20 * time.Second
		return c
	}
	g := startGateway(t, cfg())
	got := make(chan reply, 1)
	go func() { got <- send(t, g, "/hooks", `{"id":"evt_abandon_held"}`) }()
	eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := g.server.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v, want the deadline to pass", err)
	}
	ref := idempotency.Ref{Route: "hooks", Key: "evt_abandon_held"}
	if rec, err := g.Ledger().Lookup(context.Background(), ref); err != nil || rec.State != idempotency.StateHeld {
		t.Fatalf("abandoned forward on a hold route: ledger %+v %v, want a held row", rec, err)
	}
	<-got
	g.closeAll()

	g2 := startGateway(t, cfg())
	wantOutcome(t, send(t, g2, "/hooks", `{"id":"evt_abandon_held"}`), 409, "held")
	if n := up.count("evt_abandon_held"); n != 1 {
		t.Fatalf("upstream received %d, want 1: the held key was forwarded again", n)
	}
}

// Run (what SIGTERM ends in cmd/gateway) stops within
// server.shutdown_timeout even while a delivery is still in flight, and
// abandoning it is no error: the process exits 0.
func TestRunStopsWithinShutdownTimeout(t *testing.T) {
	up, release := heldUpstream(t)
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := gwConfig(t, up.URL, dbPath(t), "", "screen:\n  driver: none\n  local_cache: 0")
	cfg.Server.Listen = addr
	cfg.Server.ShutdownTimeout = 300 * time.Millisecond
	cfg.Routes[0].Upstream.Timeout = 20 * time.Second
	g, err := New(context.Background(), cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ctx) }()
	go func() {
		for {
			resp, err := http.Post("http://"+addr+"/hooks", "application/json", strings.NewReader(`{"id":"evt_run"}`))
			if err == nil {
				resp.Body.Close()
				return
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return // cut by the shutdown
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })
	start := time.Now()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run after an abandoned delivery: %v, want nil", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("Run took %v to stop, shutdown_timeout is 300ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Run did not stop within 5s of its context ending (shutdown_timeout 300ms)")
	}
}
