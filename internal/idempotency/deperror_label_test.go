package idempotency_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// SPEC §7: hookstamp_dependency_errors_total{dependency,op} names the store
// that failed. With ConfirmByClaim (the production pair, Redis + store) a
// claim lives in both stores; when the upstream's answer is not final it is
// released from both, and a ledger that cannot be reached then is a ledger
// release error, not a screen one.
func TestReleaseFromBothStoresNamesTheLedgerWhenItFails(t *testing.T) {
	ctx := context.Background()
	l := &switchLedger{Ledger: sqliteLedger(t)}
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	var mu sync.Mutex
	var got []string
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore,
		ConfirmByClaim: true,
		Hooks: idempotency.Hooks{DependencyError: func(dep, op string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, dep+"/"+op)
		}}})
	t.Cleanup(e.Close)
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_release_both"}, Fingerprint: []byte("fp")}
	r := e.Handle(ctx, racePolicy, d, func(context.Context) (*idempotency.Upstream, error) {
		l.down.Store(true) // the ledger goes away while the upstream answers
		return &idempotency.Upstream{Status: 503}, nil
	})
	if r.Outcome != idempotency.Released {
		t.Fatalf("outcome %s, want released", r.Outcome)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "ledger/release" {
		t.Fatalf("dependency errors %v, want [ledger/release]", got)
	}
}

// SPEC §7: with screen.on_unavailable: pass, a delivery meeting a screen
// that cannot be reached still asks the ledger first, so that a recorded
// delivery is replayed. When the ledger cannot be reached either, that
// lookup is a failed call to the ledger and counts in
// hookstamp_dependency_errors_total{dependency="ledger",op="lookup"}.
func TestFailOpenLookupFailureIsCounted(t *testing.T) {
	ctx := context.Background()
	l := &switchLedger{Ledger: sqliteLedger(t)}
	ms := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(ms.Close)
	counts := map[string]int{}
	var mu sync.Mutex
	e := newEngine(t, idempotency.Options{Screen: downScreen{ms}, Ledger: l,
		ScreenUnavailable: idempotency.FailPass, LedgerUnavailable: idempotency.FailPass,
		Hooks: idempotency.Hooks{DependencyError: func(dep, op string) {
			mu.Lock()
			defer mu.Unlock()
			counts[dep+"/"+op]++
		}}})
	t.Cleanup(e.Close)
	l.down.Store(true)
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_both_down"}, Fingerprint: []byte("fp")}
	r := e.Handle(ctx, racePolicy, d, func(context.Context) (*idempotency.Upstream, error) {
		return &idempotency.Upstream{Status: 200}, nil
	})
	if r.Outcome != idempotency.Passthrough {
		t.Fatalf("outcome %s (%v), want passthrough", r.Outcome, r.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["screen/claim"] != 1 || counts["ledger/lookup"] != 1 {
		t.Fatalf("dependency errors %v, want screen/claim 1 and ledger/lookup 1", counts)
	}
}
