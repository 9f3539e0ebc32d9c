package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// scriptCalls is how many Lua scripts Redis has run (EVAL and EVALSHA),
// from INFO commandstats.
func scriptCalls(tb testing.TB, c cluster) int64 {
	tb.Helper()
	info, err := c.redisClient(tb).Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_eval" && name != "cmdstat_evalsha") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			tb.Fatalf("commandstats line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// repeatWhileInFlight sends body once, and once the upstream holds it (it
// waits on release), calls atInFlight and sends n repeats at once; it
// closes release after they have had time to arrive, and returns what the
// first delivery and the repeats got.
func repeatWhileInFlight(t *testing.T, g *Gateway, up *upstream, key, body string, n int, release chan struct{}, atInFlight func()) (reply, []reply) {
	t.Helper()
	first := make(chan reply, 1)
	go func() { first <- send(t, g, "/hooks", body) }()
	testenv.Eventually(t, 5*time.Second, "the first delivery to reach the upstream", func() bool {
		return up.count(key) == 1
	})
	atInFlight()
	done := make(chan []reply, 1)
	go func() { done <- race(t, n, func(int) reply { return send(t, g, "/hooks", body) }) }()
	// Let the repeats arrive while the first is held upstream; any that
	// come later are answered from the cache or the screen.
	time.Sleep(300 * time.Millisecond)
	close(release)
	return <-first, <-done
}

// Repeats whose first delivery is in flight in the same gateway wait for
// it in-process: each gets the first delivery's answer, the upstream sees
// the event once, and the waiting costs Redis nothing. Through the screen
// each repeat would run three scripts (claim, mark as waited for, claim
// again after the wake-up).
func TestRepeatsOfAnInFlightDeliveryWaitInProcess(t *testing.T) {
	t.Parallel()
	c, _ := dedicatedCluster(t) // a Redis of its own: its command counts are this test's
	up := newUpstream(t)
	release := make(chan struct{})
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"key":%q,"n":%d}`, r.Header.Get("Idempotency-Key"), n)
	})
	cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfg.Screen.LocalCache = 1 << 20
	g := startGateway(t, cfg)

	const repeats = 20
	var before int64
	f, replies := repeatWhileInFlight(t, g, up, "evt_storm", `{"id":"evt_storm"}`, repeats, release,
		func() { before = scriptCalls(t, c) })
	wantOutcome(t, f, 200, "forwarded")
	for _, r := range replies {
		wantOutcome(t, r, 200, "replayed")
		sameReply(t, f, r)
	}
	if n := up.count("evt_storm"); n != 1 {
		t.Fatalf("upstream received evt_storm %d times, want 1", n)
	}
	if rec := lookup(t, g, "hooks", "evt_storm"); rec.State != idempotency.StateDone || string(rec.Body) != string(f.body) {
		t.Fatalf("ledger row %s %q, want done with the answer every copy got %q", rec.State, rec.Body, f.body)
	}
	// After the claim, the first delivery runs one script (its complete;
	// two calls if Redis did not have it cached yet and it was resent).
	if n := scriptCalls(t, c) - before; n > 2 {
		t.Fatalf("Redis ran %d scripts while %d repeats waited for an in-flight delivery, want at most 2", n, repeats)
	}
}

// When the delivery they wait for is released (the upstream answered 503),
// repeats waiting in-process take over: exactly one is forwarded, and the
// others get its answer.
func TestRepeatsWaitingInProcessTakeOverAReleasedDelivery(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	release := make(chan struct{})
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"try again"}`)
			return
		}
		fmt.Fprintf(w, `{"key":%q,"n":%d}`, r.Header.Get("Idempotency-Key"), n)
	})
	cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfg.Screen.LocalCache = 1 << 20
	g := startGateway(t, cfg)

	const repeats = 10
	f, replies := repeatWhileInFlight(t, g, up, "evt_released", `{"id":"evt_released"}`, repeats, release, func() {})
	wantOutcome(t, f, 503, "released")
	outcomes := map[string]int{}
	var forwarded *reply
	for i, r := range replies {
		outcomes[r.outcome()]++
		if r.status != 200 {
			t.Fatalf("repeat %d: %d %q %s", i, r.status, r.outcome(), r.body)
		}
		if r.outcome() == "forwarded" {
			forwarded = &replies[i]
		}
	}
	if outcomes["forwarded"] != 1 || outcomes["replayed"] != repeats-1 {
		t.Fatalf("outcomes %v, want 1 forwarded and %d replayed", outcomes, repeats-1)
	}
	for _, r := range replies {
		sameReply(t, *forwarded, r)
	}
	if n := up.count("evt_released"); n != 2 {
		t.Fatalf("upstream received evt_released %d times, want 2 (the released one and one retry)", n)
	}
}

// The embedded default keeps done records once, in the local cache; its
// memory screen keeps claims only. Without the cache (local_cache: 0)
// nothing in the process remembers a done delivery, so every repeat —
// those that waited for the first delivery and those that came after it —
// is confirmed in the ledger and replayed from it: the upstream still sees
// the event once and every repeat gets its answer byte for byte.
func TestEmbeddedRepeatsWithoutAScreenCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, screen string }{
		{"local cache", ""},
		{"no local cache", "screen:\n  local_cache: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, release := heldUpstream(t)
			g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    inflight: wait\n    wait_timeout: 10s", tc.screen))
			body := `{"id":"evt_embedded"}`
			first, waited := repeatWhileInFlight(t, g, up, "evt_embedded", body, 10, release, func() {})
			wantOutcome(t, first, 200, "forwarded")
			later := race(t, 10, func(int) reply { return send(t, g, "/hooks", body) })
			for i, r := range append(waited, later...) {
				if r.outcome() != "replayed" {
					t.Fatalf("repeat %d: %d %q, want replayed", i, r.status, r.outcome())
				}
				sameReply(t, first, r)
			}
			if n := up.count("evt_embedded"); n != 1 {
				t.Fatalf("upstream received %d, want 1", n)
			}
			if rec := lookup(t, g, "hooks", "evt_embedded"); rec.State != idempotency.StateDone || string(rec.Body) != string(first.body) {
				t.Fatalf("ledger holds %s %q, want done with the first answer", rec.State, rec.Body)
			}
		})
	}
}
