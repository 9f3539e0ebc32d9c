package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// downScreen cannot be reached: every claim fails.
type downScreen struct{ idempotency.Screen }

func (downScreen) Claim(context.Context, idempotency.ClaimRequest) (idempotency.Claim, error) {
	return idempotency.Claim{}, fmt.Errorf("%w: connection refused", idempotency.ErrUnavailable)
}

// lookupCounter counts ledger lookups.
type lookupCounter struct {
	*sqlledger.Ledger
	n atomic.Int64
}

func (l *lookupCounter) Lookup(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	l.n.Add(1)
	return l.Ledger.Lookup(ctx, r)
}

// With screen.on_unavailable: pass and the screen down, a delivery is
// forwarded and recorded in the ledger (passthrough). What it recorded is
// current, read under no earlier ticket: it is cached, so that its repeats
// during the outage are answered in-process, not by a ledger lookup each.
// A replica with a Redis screen has always had one Clear (its first
// subscription's) before it serves.
func TestPassthroughRecordIsCachedAfterAClear(t *testing.T) {
	ctx := context.Background()
	ms := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(ms.Close)
	l := &lookupCounter{Ledger: sqliteLedger(t)}
	cache := idempotency.NewCache(1<<20, 64<<10, 0)
	cache.Clear() // the subscription's first Clear, long before this delivery
	e := newEngine(t, idempotency.Options{Screen: downScreen{ms}, Ledger: l,
		ScreenUnavailable: idempotency.FailPass, Cache: cache})
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_pass_cached"}}
	if r := e.Handle(ctx, racePolicy, d, fwdCount(&forwards)); r.Outcome != idempotency.Passthrough {
		t.Fatalf("delivery with the screen down: %s, want passthrough", r.Outcome)
	}
	before := l.n.Load()
	if r := e.Handle(ctx, racePolicy, d, fwdCount(&forwards)); r.Outcome != idempotency.Replayed || forwards.Load() != 1 {
		t.Fatalf("repeat: %s, upstream received %d", r.Outcome, forwards.Load())
	}
	if _, ok := cache.Get(d.Ref); !ok || l.n.Load() != before {
		t.Fatalf("the recorded passthrough delivery was not cached (cached %v): its repeat took %d ledger lookups, want 0", ok, l.n.Load()-before)
	}
}
