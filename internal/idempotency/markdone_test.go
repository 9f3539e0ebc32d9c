package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// gateScreen holds the Complete of every delivery's own record until gate
// closes (refills pass), and counts those that returned.
type gateScreen struct {
	idempotency.Screen
	gate      chan struct{}
	completed atomic.Int64
}

func (s *gateScreen) Complete(ctx context.Context, ref idempotency.Ref, owner string, e *idempotency.Entry, ttl time.Duration) error {
	if e.Refill {
		return s.Screen.Complete(ctx, ref, owner, e, ttl)
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := s.Screen.Complete(ctx, ref, owner, e, ttl)
	s.completed.Add(1)
	return err
}

// commitFailLedger fails every commit, as a ledger lost after the claim.
type commitFailLedger struct{ idempotency.Ledger }

func (l commitFailLedger) Commit(context.Context, *idempotency.Record, string, time.Time) error {
	return errors.New("commit: " + idempotency.ErrUnavailable.Error())
}

// With the production pair, the ledger's committed record decides every
// repeat, so the provider's answer does not wait for the screen's done
// mark: a first delivery is answered while its mark is still held back,
// and meanwhile a repeat on another replica, which finds the key in flight
// in the screen, is replayed from the ledger (with inflight: reject, the
// strictest); the upstream sees one copy. Close waits for the mark.
func TestAnswerDoesNotWaitForTheScreensDoneMark(t *testing.T) {
	ctx := context.Background()
	l, rs := productionStores(t)
	s := &gateScreen{Screen: rs, gate: make(chan struct{})}
	o := idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}
	first, other := newEngine(t, o), newEngine(t, o)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_mark_later"}, Fingerprint: []byte("fp")}
	answered := make(chan idempotency.Result, 1)
	go func() { answered <- first.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte("ok"))) }()
	var r idempotency.Result
	testenv.Eventually(t, 10*time.Second, "the first delivery's answer while its screen mark is held", func() bool {
		select {
		case r = <-answered:
			return true
		default:
			return false
		}
	})
	if r.Outcome != idempotency.Forwarded || s.completed.Load() != 0 {
		t.Fatalf("first delivery: %s with %d screen marks done, want forwarded with none yet", r.Outcome, s.completed.Load())
	}

	reject := *racePolicy
	reject.RejectInflight = true
	wantReplayOf(t, other.Handle(ctx, &reject, d, fwdBody(&forwards, []byte("ok"))), &forwards, []byte("ok"))

	close(s.gate)
	first.Close() // waits for the background mark
	if s.completed.Load() == 0 {
		t.Fatal("the screen was never marked done")
	}
}

// A commit that failed leaves the screen as the only record (SPEC §1), so
// its done mark is written before the provider is answered.
func TestFailedCommitMarksTheScreenBeforeTheAnswer(t *testing.T) {
	ctx := context.Background()
	l, rs := productionStores(t)
	s := &gateScreen{Screen: rs, gate: make(chan struct{})}
	close(s.gate)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: commitFailLedger{l}, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, CommitRetryFor: time.Millisecond})
	t.Cleanup(e.Close)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_commit_lost"}, Fingerprint: []byte("fp")}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte("ok"))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	if n := s.completed.Load(); n != 1 {
		t.Fatalf("screen marks done when the provider was answered: %d, want 1", n)
	}
}
