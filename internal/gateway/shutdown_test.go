package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/testenv"
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
	testenv.Eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })

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
	testenv.Eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })
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
	g, up, unused := patientGateway(t)
	half, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	start := time.Now()
	shutdownMidRequest(t, g, half, "evt_half")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v (an unused connection held it until the deadline?)", d)
	}
	if _, err := unused.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("unused connection: read %v, want EOF (closed by the gateway)", err)
	}
	if n := up.count("evt_half"); n != 1 {
		t.Fatalf("upstream received evt_half %d times, want 1", n)
	}
	g.closeAll()
}

// finishHalfSent sends the rest of a request that was half sent on half
// when Shutdown (whose result shut delivers) began: the request is still
// shutdownMidRequest sends the first bytes of a delivery of key on half,
// starts a Shutdown once it and one idle connection are accepted, waits for
// the listener to close, then finishes the request: it must still be
// answered and recorded (finishHalfSent).
func shutdownMidRequest(t *testing.T, g *Gateway, half net.Conn, key string) {
	t.Helper()
	body := `{"id":"` + key + `"}`
	req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(half, req[:20]); err != nil {
		t.Fatal(err)
	}
	// Both accepted (connections still in the listener's backlog when it
	// closes are reset by the kernel, whatever the server does), and the
	// half-sent request's first bytes read.
	testenv.Eventually(t, 5*time.Second, "connections accepted, one with a request begun", func() bool {
		open, used := g.server.Conns()
		return open == 2 && used == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- g.server.Shutdown(ctx) }()
	testenv.Eventually(t, 5*time.Second, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", g.Addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	finishHalfSent(t, g, half, req[20:], key, shut)
}

// answered 200 forwarded, its delivery recorded, and Shutdown returns nil.
func finishHalfSent(t *testing.T, g *Gateway, half net.Conn, rest, key string, shut <-chan error) {
	t.Helper()
	if _, err := io.WriteString(half, rest); err != nil {
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
		t.Fatalf("shutdown: %v", err)
	}
	if rec := lookup(t, g, "hooks", key); rec.State != idempotency.StateDone {
		t.Fatalf("half-sent delivery not recorded: %+v", rec)
	}
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
	testenv.Eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })

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
	cfg := gwConfig(t, up.URL, dbPath(t), "", "screen:\n  driver: none\n  local_cache: 0")
	cfg.Server.ShutdownTimeout = 300 * time.Millisecond
	cfg.Routes[0].Upstream.Timeout = 20 * time.Second
	_, addr, stopRun := runGateway(t, cfg)
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
	testenv.Eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })
	stopRun()
}

// runGateway runs a gateway on cfg at a free address with Run, as
// `gateway serve` does. stopRun ends Run's context (SIGTERM) and fails the
// test unless Run returns nil — abandoning deliveries is no error: the
// process exits 0 — within 3 s (for a shutdown_timeout well under that).
func runGateway(t *testing.T, cfg *config.Config) (g *Gateway, addr string, stopRun func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	_ = ln.Close()
	cfg.Server.Listen = addr
	g, err = New(context.Background(), cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ctx) }()
	return g, addr, func() {
		t.Helper()
		start := time.Now()
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Fatalf("Run: %v, want nil", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("Run took %v to stop, shutdown_timeout is %v", d, cfg.Server.ShutdownTimeout)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Run did not stop within 20s of its context ending (shutdown_timeout %v)", cfg.Server.ShutdownTimeout)
		}
	}
}

// Shutdown lets the engine's background calls finish before it closes the
// screen they use (Engine.Close before the closers). Replica a's screen
// claim lands in Redis but its answer is lost, so the delivery goes ahead on
// a ledger claim (screen.on_unavailable: store); the upstream answers 500,
// and the claim left in Redis is released in the background (tidyScreen)
// while a shuts down. Closed under that release, the screen would keep the
// claim until its lease ran out, and the provider's retry at replica b
// would be refused 409 all that time.
func TestShutdownFinishesReleasingLostScreenClaims(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			http.Error(w, "try again later", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	a := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	cfgB := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfgB.Routes[0].Inflight = config.InflightReject // answer at once instead of waiting out the lease
	b := startGateway(t, cfgB)

	const key = "evt_tidy"
	tap := tapScreen(t, a, key)
	tap.loseNextAnswer()
	// The background release waits before it is sent, as one still waiting
	// for its goroutine or a connection would, so that it is under way when
	// a shuts down: Shutdown must wait for it. Nothing in the engine's Close
	// can be seen from outside, so the wait is a fixed one, but no outcome
	// races on it: in the right order the release is sent after it, well
	// within the screen's 1s operation timeout; with the screen closed
	// first, that happens milliseconds into Shutdown, long before.
	held := tap.holdNext(func(ctx context.Context) {
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
		}
	})
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_tidy"}`), 500, "released")
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("no background release of the claim whose answer was lost; the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s, err := c.redisClient(t).HGet(ctx, c.prefix+"hooks:"+key, "s").Result(); err != nil || s != "f" {
		t.Fatalf("the screen does not hold the claim whose answer was lost (state %q, %v); the test proves nothing", s, err)
	}

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := a.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_tidy"}`), 200, "forwarded")
	if n := up.count(key); n != 2 {
		t.Fatalf("upstream received %s %d times, want 2 (the failed copy and the retry)", key, n)
	}
}

// Shutdown closes what it built in reverse order: the admin listener
// (started last) first, the screen (opened first) last, so that an
// operator's DELETE being answered as a replica shuts down completes. The
// record leaves the ledger and the screen, and the provider's next delivery
// at another replica is forwarded afresh. Closed in the order they were
// opened, the screen would be gone under the DELETE: 503 for the operator,
// and replica b would go on replaying the deleted record from the screen
// for screen.ttl.
func TestShutdownFinishesAdminRequests(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	cfgA := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfgA.Admin.Listen, cfgA.Admin.Token = "127.0.0.1:0", "t0ken"
	a := startGateway(t, cfgA)
	b := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	const key = "evt_deleted"
	first := send(t, a, "/hooks", `{"id":"evt_deleted"}`)
	wantOutcome(t, first, 200, "forwarded")
	sameReply(t, first, send(t, b, "/hooks", `{"id":"evt_deleted"}`))

	// The DELETE's screen call waits until the admin listener closes, so
	// that it is under way when a shuts down: Shutdown must finish it before
	// closing the screen. No timing is involved: the listener closes first
	// in the right order, last in the wrong one.
	tap := tapScreen(t, a, key)
	held := tap.holdNext(func(ctx context.Context) {
		for ctx.Err() == nil {
			conn, err := net.DialTimeout("tcp", a.AdminAddr(), 100*time.Millisecond)
			if err != nil {
				return
			}
			conn.Close()
			time.Sleep(5 * time.Millisecond)
		}
	})
	deleted := make(chan int, 1)
	go func() {
		req, err := http.NewRequest(http.MethodDelete, "http://"+a.AdminAddr()+"/admin/routes/hooks/records/"+key, nil)
		if err != nil {
			deleted <- 0
			return
		}
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := client.Do(req)
		if err != nil {
			deleted <- 0
			return
		}
		resp.Body.Close()
		deleted <- resp.StatusCode
	}()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the DELETE never asked the screen to forget the key; the test proves nothing")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if status := <-deleted; status != http.StatusNoContent {
		t.Errorf("DELETE during shutdown: %d, want 204", status)
	}
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_deleted"}`), 200, "forwarded")
	if n := up.count(key); n != 2 {
		t.Fatalf("upstream received %s %d times, want 2 (before and after the DELETE)", key, n)
	}
}

// screenTap is a go-redis hook on one replica's screen client (a white-box
// seam: g.screen) that acts on the commands about one screen entry. It does
// what a fault proxy cannot: a proxy delays bytes already written, which
// reach Redis even once the client is closed, while the calls these tests
// hold must not have been sent yet, as a call still waiting for its
// goroutine or a connection has not. And it loses an answer exactly: the
// command runs in Redis, its caller gets the error of a reply that never
// came.
type screenTap struct {
	entry string // the entry's Redis key
	held  chan struct{}

	mu   sync.Mutex
	lose bool                      // the next command that succeeds loses its answer
	hold func(ctx context.Context) // the next command waits for it before it is sent
}

// tapScreen taps g's screen (driver redis) on route hooks, key.
func tapScreen(tb testing.TB, g *Gateway, key string) *screenTap {
	tb.Helper()
	s, ok := g.screen.(*redisscreen.Screen)
	if !ok {
		tb.Fatalf("screen %T, want the Redis screen", g.screen)
	}
	tap := &screenTap{entry: g.cfg.Screen.Prefix + "hooks:" + key, held: make(chan struct{})}
	s.Client().AddHook(tap)
	return tap
}

// errLostAnswer is what a client sees of a command whose reply never came.
var errLostAnswer = fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)

// loseNextAnswer makes the next command on the entry run in Redis and fail
// as if its answer had been lost.
func (t *screenTap) loseNextAnswer() {
	t.mu.Lock()
	t.lose = true
	t.mu.Unlock()
}

// holdNext makes the next command on the entry (after the one whose answer
// is lost, if any) call hold before it is sent; the channel returned is
// closed when it starts waiting.
func (t *screenTap) holdNext(hold func(ctx context.Context)) <-chan struct{} {
	t.mu.Lock()
	t.hold = hold
	t.mu.Unlock()
	return t.held
}

func (t *screenTap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *screenTap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (t *screenTap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !slices.Contains(cmd.Args(), any(t.entry)) {
			return next(ctx, cmd)
		}
		t.mu.Lock()
		lose := t.lose
		var hold func(context.Context)
		if !lose {
			hold, t.hold = t.hold, nil
		}
		t.mu.Unlock()
		if hold != nil {
			close(t.held)
			hold(ctx)
		}
		err := next(ctx, cmd)
		if lose && err == nil {
			t.mu.Lock()
			t.lose = false
			t.mu.Unlock()
			err = errLostAnswer
			cmd.SetErr(err)
		}
		return err
	}
}

// A request whose header completes only after Shutdown gave up waiting
// (shutdown_timeout ran out; the process is about to exit) is not taken
// on: 503 unavailable (SPEC §2) with the connection closed, nothing
// forwarded — the provider retries it at a replica that is not stopping.
func TestRequestAfterShutdownGaveUpIsRefused(t *testing.T) {
	g, up, c := patientGateway(t)
	req := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"id\":\"evt_late\"}\n"
	if _, err := io.WriteString(c, req[:20]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the request begun", func() bool { _, used := g.server.Conns(); return used == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := g.server.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown did not give up: the test proves nothing")
	}
	if _, err := io.WriteString(c, req[20:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Hookstamp-Outcome") != "unavailable" ||
		resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("late request: %d, outcome %q, Retry-After %q, close %v; want 503 unavailable, Retry-After 1, connection closed",
			resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), resp.Header.Get("Retry-After"), resp.Close)
	}
	if n := up.count("evt_late"); n != 0 {
		t.Fatalf("upstream received the late request %d times", n)
	}
}

// patientGateway starts a gateway whose read_timeout (30 s) outlasts any
// test that sends a request in parts, and opens a connection to it.
func patientGateway(t *testing.T) (*Gateway, *upstream, net.Conn) {
	t.Helper()
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.ReadTimeout = 30 * time.Second
	g := startGateway(t, cfg)
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return g, up, c
}

// A delivery answered while the gateway drains tells its client to close
// the connection. Without `Connection: close` the client (a provider, or
// the load balancer in front, pooling connections) keeps it for its next
// delivery, but the draining gateway closes it right after this answer:
// that next POST goes into a closed socket and fails after being sent —
// not safely retryable, so a balancer answers 502 and the provider logs
// a failed attempt — instead of dialling a replica that is serving.
func TestShutdownClosesKeptAliveConnections(t *testing.T) {
	up := newUpstream(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the upstream closes (cleanups run last first)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		fmt.Fprint(w, "done")
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"id":"evt_keepalive"}`
	// HTTP/1.1 without "Connection: close": a client that keeps its connection.
	fmt.Fprintf(conn, "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	testenv.Eventually(t, 5*time.Second, "delivery in flight", func() bool { return up.total.Load() == 1 })

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- g.server.Shutdown(ctx)
	}()
	testenv.Eventually(t, 5*time.Second, "listener closed (drain begun)", func() bool {
		c, err := net.DialTimeout("tcp", g.Addr(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	unblock()

	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("answer to the delivery in flight: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != "forwarded" {
		t.Fatalf("delivery in flight: %d %q, want 200 forwarded", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
	}
	if !resp.Close {
		t.Errorf("answer given while draining has Connection %q, want close: the client keeps a connection the gateway closes under its next delivery", resp.Header.Get("Connection"))
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	g.closeAll()
}
