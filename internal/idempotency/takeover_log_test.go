package idempotency_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A claim taken over after its owner's lease expired (a replica killed
// mid-forward) is the one case where the upstream gets a second copy: the
// log names its route and key, beside hookstamp_takeovers_total, whether
// the claim is in the ledger or in the screen.
func TestTakeoverIsLoggedWithItsKey(t *testing.T) {
	for _, screen := range []bool{false, true} {
		t.Run(map[bool]string{false: "ledger claim", true: "screen claim"}[screen], func(t *testing.T) {
			ctx := context.Background()
			var logs testenv.Buffer
			o := idempotency.Options{Ledger: sqliteLedger(t), Lease: time.Second,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			if screen {
				// Its lease ran out a minute ago.
				s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10, Now: func() time.Time { return time.Now().Add(time.Minute) }})
				t.Cleanup(s.Close)
				o.Screen, o.ScreenUnavailable = s, idempotency.FailStore
			}
			var takeovers atomic.Int64
			o.Hooks.Takeover = func(string) { takeovers.Add(1) }
			e := newEngine(t, o)
			t.Cleanup(e.Close)
			key := "evt_taken\"over"
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: key}}
			// The first delivery's replica claimed it, then died.
			dead := idempotency.ClaimRequest{Ref: d.Ref, Owner: "dead-replica", Lease: time.Millisecond}
			if _, err := o.Ledger.Claim(ctx, dead, time.Now().Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
			if screen {
				if _, err := o.Screen.Claim(ctx, dead); err != nil {
					t.Fatal(err)
				}
			}
			fwd := func(context.Context) (*idempotency.Upstream, error) {
				return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("ok")}, nil
			}
			if r := e.Handle(ctx, racePolicy, d, fwd); r.Outcome != idempotency.Forwarded {
				t.Fatalf("retry after the lease: %s (%v), want forwarded", r.Outcome, r.Err)
			}
			wantTakeoverLogged(t, &logs, &takeovers, key)
		})
	}
}

// The same on an async route: the dead replica's claim was made while
// the route was synchronous, and its forward may have reached the
// upstream before the queue delivers the retry's stored copy.
func TestAsyncTakeoverIsLoggedWithItsKey(t *testing.T) {
	ctx := context.Background()
	var logs testenv.Buffer
	l := sqliteLedger(t)
	l.UseJobs(&countedJobs{})
	var takeovers atomic.Int64
	o := idempotency.Options{Ledger: l, Queue: l, Lease: time.Second,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	o.Hooks.Takeover = func(string) { takeovers.Add(1) }
	e := newEngine(t, o)
	t.Cleanup(e.Close)
	key := "evt_async\ntaken_over"
	ref := idempotency.Ref{Route: "r", Key: key}
	dead := idempotency.ClaimRequest{Ref: ref, Owner: "dead-replica", Lease: time.Millisecond}
	if _, err := l.Claim(ctx, dead, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	p := *racePolicy
	p.Ack = &idempotency.Response{Status: 202}
	d := idempotency.Delivery{Ref: ref, Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte("{}")}}
	var forwards atomic.Int64
	if r := e.Handle(ctx, &p, d, fwdCount(&forwards)); r.Outcome != idempotency.Accepted || !r.TakenOver {
		t.Fatalf("retry after the lease: %s (taken over %v, %v), want accepted over the dead claim", r.Outcome, r.TakenOver, r.Err)
	}
	wantTakeoverLogged(t, &logs, &takeovers, key)
}

func wantTakeoverLogged(t *testing.T, logs *testenv.Buffer, takeovers *atomic.Int64, key string) {
	t.Helper()
	if n := takeovers.Load(); n != 1 {
		t.Fatalf("%d takeovers counted, want 1", n)
	}
	var found bool
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(l["msg"].(string), "taken over") {
			found = l["level"] == "WARN" && l["route"] == "r" && l["key"] == key
		}
	}
	if !found {
		t.Errorf("no WARN naming route r and key %q:\n%s", key, logs.String())
	}
}
