package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// failCommitLedger fails the first Commit, or every one if always is
// set, as an unreachable ledger would (the statement never reached the
// database); everything else works.
type failCommitLedger struct {
	idempotency.Ledger
	always bool
	failed atomic.Bool
}

func (l *failCommitLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	if l.failed.CompareAndSwap(false, true) || l.always {
		return fmt.Errorf("commit: %w: connection reset", idempotency.ErrUnavailable)
	}
	return l.Ledger.Commit(ctx, rec, owner, now)
}

func fwdBody(n *atomic.Int64, body []byte) idempotency.ForwardFunc {
	return func(context.Context) (*idempotency.Upstream, error) {
		n.Add(1)
		return &idempotency.Upstream{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}, nil
	}
}

// wantReplayOf asserts that r replays the first delivery's answer and
// that the upstream saw one copy.
func wantReplayOf(t *testing.T, r idempotency.Result, forwards *atomic.Int64, body []byte) {
	t.Helper()
	if n := forwards.Load(); n != 1 {
		t.Fatalf("repeat after a failed commit: outcome %s, upstream received %d copies, want 1 (SPEC §1: repeats are still intercepted)", r.Outcome, n)
	}
	if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 200 || !bytes.Equal(r.Replay.Body, body) {
		t.Fatalf("repeat: outcome %s, want a replay of the first answer (200, %d bytes)", r.Outcome, len(body))
	}
}

// SPEC §1 "Commit failure": after a successful forward whose commit fails,
// the screen entry is kept as done so that repeats are still intercepted
// while it lives. The embedded default builds its memory screen with
// NoDone (the local cache keeps done records); the screen must keep this
// one all the same, whether or not the cache is on, and however large the
// answer: one past a shard's share of the screen's budget for done entries
// (32 MiB over 64 shards) was dropped as soon as it was kept. The ledger
// keeps failing commits, so that the repeat cannot land the first's
// record by retrying its commit.
func TestCommitFailureMemoryScreenInterceptsRepeats(t *testing.T) {
	for _, cache := range []int{32 << 20, 0} {
		for _, size := range []int{8, 600 << 10} {
			t.Run(fmt.Sprintf("local cache %d, answer %d bytes", cache, size), func(t *testing.T) {
				commitFailureMemoryScreen(t, cache, size)
			})
		}
	}
}

func commitFailureMemoryScreen(t *testing.T, cacheBytes, size int) {
	ctx := context.Background()
	l := sqliteLedger(t)
	// As gateway.New builds them for screen.driver: memory.
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10, NoDone: cacheBytes > 0})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: &failCommitLedger{Ledger: l, always: true},
		ScreenUnavailable: idempotency.FailStore, Cache: idempotency.NewCache(cacheBytes, 64<<10, 0)})
	first, second := bytes.Repeat([]byte("1"), size), bytes.Repeat([]byte("2"), size)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_commit_fails"}}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, first)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	wantReplayOf(t, e.Handle(ctx, racePolicy, d, fwdBody(&forwards, second)), &forwards, first)
}

// The same with the Redis screen and a response larger than
// screen.max_cached_body, which a done entry normally leaves to the ledger.
// With ledger-claim confirms (redis + on_unavailable: store, the
// production setting) the failed commit leaves the pending ledger row
// behind: a replay that read its body from there replayed status 0 and an
// empty body. With lookup confirms (on_unavailable: reject or pass) the
// repeat found no row, took the record for deleted, and was forwarded
// again.
func TestCommitFailureLargeBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts idempotency.Options
	}{
		{"ledger-claim confirm", idempotency.Options{ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}},
		{"lookup confirm", idempotency.Options{ScreenUnavailable: idempotency.FailReject}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, s := productionStores(t) // MaxCachedBody 64 KiB
			o := tc.opts
			o.Screen, o.Ledger = s, &failCommitLedger{Ledger: l}
			e := newEngine(t, o)
			big := bytes.Repeat([]byte("x"), 100<<10)
			var forwards atomic.Int64
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_big_commit_fails"}}
			if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, big)); r.Outcome != idempotency.Forwarded {
				t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
			}
			wantReplayOf(t, e.Handle(ctx, racePolicy, d, fwdBody(&forwards, big)), &forwards, big)
		})
	}
}

// A done screen entry without its body sends the replay to the ledger for
// it. If the row there is no longer done — deleted from the ledger alone,
// then claimed by a replica that could not reach Redis — it has no answer
// to replay: the repeat must not get the pending row's empty "response"
// (status 0), but be claimed afresh and meet that claim.
func TestReplayFromLedgerSkipsARowThatIsNotDone(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t) // MaxCachedBody 64 KiB
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore})
	big := bytes.Repeat([]byte("z"), 100<<10)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_reclaimed"}}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, big)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	if err := l.Delete(ctx, d.Ref); err != nil {
		t.Fatal(err)
	}
	c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: d.Ref, Owner: "other-replica", Lease: time.Hour, Retention: time.Hour}, time.Now())
	if err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("ledger claim of the deleted key: %v %v", c.Status, err)
	}
	p := *racePolicy
	p.RejectInflight = true
	r := e.Handle(ctx, &p, d, fwdBody(&forwards, big))
	if r.Outcome == idempotency.Replayed {
		t.Fatalf("repeat replayed status %d with %d body bytes from a pending row", r.Replay.Status, len(r.Replay.Body))
	}
	if r.Outcome != idempotency.Conflict || forwards.Load() != 1 {
		t.Fatalf("repeat: %s, upstream received %d; want conflict (another replica holds the key) and 1", r.Outcome, forwards.Load())
	}
}

// With store.on_unavailable: pass and the ledger down, deliveries are
// passed through: their commits fail by design, and counting each one in
// commit_failures would bury the failures that break a promise. The screen
// still intercepts the repeat.
func TestPassthroughCommitIsNoCommitFailure(t *testing.T) {
	ctx := context.Background()
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	var failures atomic.Int64
	down := &switchLedger{} // no ledger behind it: never brought back
	down.down.Store(true)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: down, LedgerUnavailable: idempotency.FailPass,
		Hooks: idempotency.Hooks{CommitFailure: func(string) { failures.Add(1) }}})
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_pass"}}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte("ok"))); r.Outcome != idempotency.Passthrough {
		t.Fatalf("delivery with the ledger down: %s, want passthrough", r.Outcome)
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("commit_failures counted %d for a passthrough delivery", n)
	}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte("ok"))); r.Outcome != idempotency.Replayed || forwards.Load() != 1 {
		t.Fatalf("repeat: %s, upstream received %d; want a replay from the screen and 1", r.Outcome, forwards.Load())
	}
}

// hungCommitLedger hangs the first Commit until its context ends, as a
// ledger whose host vanished does; everything else works.
type hungCommitLedger struct {
	idempotency.Ledger
	hung atomic.Bool
}

func (l *hungCommitLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	if l.hung.CompareAndSwap(false, true) {
		<-ctx.Done()
		return fmt.Errorf("commit: %w: %w", idempotency.ErrUnavailable, ctx.Err())
	}
	return l.Ledger.Commit(ctx, rec, owner, now)
}

// A commit that hung until the settling deadline leaves the Redis screen
// the only record, and it must still be written: a repeat through another
// replica once the claim's lease is over is replayed, not taken over and
// forwarded again. The commit's retry is off, so that only the screen can
// intercept the repeat.
func TestHungCommitStillMarksTheScreen(t *testing.T) {
	ctx := context.Background()
	first, second := hungCommitReplicas(t, 300*time.Millisecond)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_commit_hangs"}}
	if r := first.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"ok":1}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	time.Sleep(1200 * time.Millisecond) // past the first claim's lease
	wantReplayOf(t, second.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"ok":2}`))), &forwards, []byte(`{"ok":1}`))
}

// hungCommitReplicas are two engines on one PostgreSQL ledger and Redis
// screen with a 1-s lease, the first's first commit hanging until
// opTimeout ends it; the commit's retry is off.
func hungCommitReplicas(t *testing.T, opTimeout time.Duration) (first, second *idempotency.Engine) {
	t.Helper()
	l, s := productionStores(t)
	o := idempotency.Options{Screen: s, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore,
		Lease: time.Second, OpTimeout: opTimeout, CommitRetryFor: -1}
	hung := o
	o.Ledger, hung.Ledger = l, &hungCommitLedger{Ledger: l}
	return newEngine(t, hung), newEngine(t, o)
}

// A commit the ledger holds past the claim's lease is cut before the lease
// ends, so that the screen, marked done with the answer, decides a repeat
// waiting on another replica: replayed, not taken over and forwarded again.
// A takeover is for an owner that died (SPEC §1, §6); this one answered.
func TestCommitHeldPastTheLeaseLeavesTheAnswerToTheScreen(t *testing.T) {
	ctx := context.Background()
	first, second := hungCommitReplicas(t, 3*time.Second)
	p := *racePolicy
	p.WaitTimeout = 5 * time.Second // past the lease: the repeat waits for the claim to settle or expire
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_commit_outlives_lease"}}
	firstDone := make(chan idempotency.Result, 1)
	go func() { firstDone <- first.Handle(ctx, &p, d, fwdBody(&forwards, []byte(`{"ok":1}`))) }()
	testenv.Eventually(t, 5*time.Second, "the first forward", func() bool { return forwards.Load() == 1 })
	wantReplayOf(t, second.Handle(ctx, &p, d, fwdBody(&forwards, []byte(`{"ok":2}`))), &forwards, []byte(`{"ok":1}`))
	if r := <-firstDone; r.Outcome != idempotency.Forwarded || r.Upstream == nil || string(r.Upstream.Body) != `{"ok":1}` {
		t.Fatalf("first delivery: %s (%v), want the upstream's answer", r.Outcome, r.Err)
	}
}

// slowCommitLedger delays the first Commit by delay, then commits.
type slowCommitLedger struct {
	idempotency.Ledger
	delay time.Duration
	slow  atomic.Bool
}

func (l *slowCommitLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	if l.slow.CompareAndSwap(false, true) {
		time.Sleep(l.delay)
	}
	return l.Ledger.Commit(ctx, rec, owner, now)
}

// Without a screen to take the answer, a commit that outlives the lease is
// not cut: landing late, before any takeover, is the record's only chance.
func TestLedgerOnlyCommitMayOutliveTheLease(t *testing.T) {
	ctx := context.Background()
	l := postgresLedger(t)
	var failures atomic.Int64
	e := newEngine(t, idempotency.Options{Ledger: &slowCommitLedger{Ledger: l, delay: 1500 * time.Millisecond},
		Lease: time.Second, OpTimeout: 3 * time.Second, CommitRetryFor: -1,
		Hooks: idempotency.Hooks{CommitFailure: func(string) { failures.Add(1) }}})
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_late_commit"}}
	if r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"ok":1}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("delivery: %s (%v)", r.Outcome, r.Err)
	}
	rec, err := l.Lookup(ctx, d.Ref)
	if err != nil || rec.State != idempotency.StateDone || failures.Load() != 0 {
		t.Fatalf("after a commit 0.5 s past the lease: record %+v (%v), %d commit failures; want it done, none", rec, err, failures.Load())
	}
}
