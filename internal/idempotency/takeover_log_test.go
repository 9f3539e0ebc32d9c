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
		})
	}
}
