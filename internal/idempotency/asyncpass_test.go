package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// unpeekableScreen fails every Peek, as a screen does for the instant
// before it answers again; its claims are granted.
type unpeekableScreen struct{ idempotency.Screen }

func (unpeekableScreen) Peek(context.Context, idempotency.Ref) (idempotency.Claim, bool, error) {
	return idempotency.Claim{}, false, fmt.Errorf("peek: %w: connection reset", idempotency.ErrUnavailable)
}

// downLedger is a ledger and queue that cannot be reached.
type downLedger struct{ idempotency.Ledger }

func down(op string) error {
	return fmt.Errorf("%s: %w: connection refused", op, idempotency.ErrUnavailable)
}

func (downLedger) Lookup(context.Context, idempotency.Ref) (*idempotency.Record, error) {
	return nil, down("lookup")
}

func (downLedger) Claim(context.Context, idempotency.ClaimRequest, time.Time) (idempotency.Claim, error) {
	return idempotency.Claim{}, down("claim")
}

func (downLedger) Commit(context.Context, *idempotency.Record, string, time.Time) error {
	return down("commit")
}

func (downLedger) Release(context.Context, idempotency.Ref, string) error { return down("release") }

func (downLedger) Enqueue(context.Context, *idempotency.Record, string, time.Time) (bool, error) {
	return false, down("enqueue")
}

// An async delivery whose screen could not be peeked goes through the
// claim loop; when the screen grants the claim and the ledger cannot
// confirm it, store.on_unavailable: pass forwards it at once, as the
// intake does when the ledger cannot store it, instead of trying the
// unreachable ledger again and answering 503.
func TestAsyncScreenClaimLedgerDownPassForwards(t *testing.T) {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	l := downLedger{}
	e := newEngine(t, idempotency.Options{Screen: unpeekableScreen{s}, Ledger: l, Queue: l,
		ScreenUnavailable: idempotency.FailStore, LedgerUnavailable: idempotency.FailPass})
	p := *racePolicy
	p.Ack = &idempotency.Response{Status: 202}
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_async_pass"},
		Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(`{}`)}}
	var forwards atomic.Int64
	r := e.Handle(context.Background(), &p, d, fwdBody(&forwards, []byte(`{"ok":1}`)))
	if r.Outcome != idempotency.Passthrough || forwards.Load() != 1 {
		t.Fatalf("outcome %s (%v), upstream received %d, want passthrough once", r.Outcome, r.Err, forwards.Load())
	}
}
