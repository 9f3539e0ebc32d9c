package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// flakyLedger is a real ledger whose commits (first ones and retries) fail
// as an unreachable database's do while down is set; everything else
// reaches the ledger. commits counts the attempts that were let through.
type flakyLedger struct {
	*sqlledger.Ledger
	down    atomic.Bool
	commits atomic.Int64
	refused atomic.Int64 // commits refused while down
	hang    atomic.Bool  // retried commits hang until their context ends
}

func (l *flakyLedger) unreachable() error {
	l.refused.Add(1)
	return fmt.Errorf("commit: %w: connection refused", idempotency.ErrUnavailable)
}

func (l *flakyLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	if l.down.Load() {
		return l.unreachable()
	}
	l.commits.Add(1)
	return l.Ledger.Commit(ctx, rec, owner, now)
}

func (l *flakyLedger) Recommit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time, claimed bool) error {
	if l.hang.Load() {
		<-ctx.Done()
		return fmt.Errorf("commit: %w: %w", idempotency.ErrUnavailable, ctx.Err())
	}
	if l.down.Load() {
		return l.unreachable()
	}
	l.commits.Add(1)
	return l.Ledger.Recommit(ctx, rec, owner, now, claimed)
}

// recommitSetups are the two ways a claim is held when its commit fails:
// a pending ledger row (no screen: the seed's design, and every Redis mode,
// which confirms by claiming), or the memory screen alone (the embedded
// default, which confirms by lookup, so that the ledger has no row).
var recommitSetups = []struct {
	name   string
	screen bool
}{{"ledger claim", false}, {"memory screen claim", true}}

var recommitLedgers = []struct {
	name string
	open func(testing.TB) *sqlledger.Ledger
}{{"sqlite", sqliteLedger}, {"postgres", postgresLedger}}

func recommitEngine(t *testing.T, l idempotency.Ledger, screen bool, lease time.Duration) *idempotency.Engine {
	t.Helper()
	o := idempotency.Options{Ledger: l, Lease: lease}
	if screen {
		s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
		t.Cleanup(s.Close)
		o.Screen, o.ScreenUnavailable = s, idempotency.FailStore
	}
	e := newEngine(t, o)
	t.Cleanup(e.Close)
	return e
}

// forwardThenLedgerDown answers 200 with body, counting the copies, and
// takes the ledger down while the upstream "processes" the delivery: the
// claim was made, the commit cannot be.
func forwardThenLedgerDown(l *flakyLedger, n *atomic.Int64, body []byte) idempotency.ForwardFunc {
	return func(context.Context) (*idempotency.Upstream, error) {
		n.Add(1)
		l.down.Store(true)
		return &idempotency.Upstream{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}, nil
	}
}

// A commit that could not reach the ledger after the upstream answered is
// retried until it lands: once the ledger is back it holds the record, and
// a repeat after the claim's lease ran out — which before was taken over
// and forwarded a second time wherever the screen did not remember the
// entry — is replayed from it.
func TestFailedCommitIsRecordedByItsRetry(t *testing.T) {
	t.Parallel()
	for _, lc := range recommitLedgers {
		for _, sc := range recommitSetups {
			t.Run(lc.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				l := &flakyLedger{Ledger: lc.open(t)}
				const lease = time.Second
				e := recommitEngine(t, l, sc.screen, lease)
				d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_commit_retried"}, Fingerprint: []byte("fp")}
				var forwards atomic.Int64
				body := []byte(`{"booked":1}`)
				r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, body))
				if r.Outcome != idempotency.Forwarded || r.Upstream == nil || !bytes.Equal(r.Upstream.Body, body) {
					t.Fatalf("first delivery: %s (%v), want forwarded with the upstream's answer", r.Outcome, r.Err)
				}
				if _, err := l.Lookup(ctx, d.Ref); !errors.Is(err, idempotency.ErrNotFound) && sc.screen {
					t.Fatalf("ledger right after the failed commit: %v, want no row", err)
				}

				testenv.Eventually(t, 10*time.Second, "an outage of a few retries", func() bool { return l.refused.Load() >= 3 })
				l.down.Store(false)
				waitRecord(t, l, d.Ref)
				if rec, err := l.Lookup(ctx, d.Ref); err != nil || rec.Status != 200 || !bytes.Equal(rec.Body, body) {
					t.Fatalf("record written by the retry: %+v (%v), want 200 %q", rec, err, body)
				}

				// Past the first claim's lease, as a provider's retry
				// minutes later is; and with nothing in any screen.
				time.Sleep(lease + 200*time.Millisecond)
				e2 := recommitEngine(t, l, sc.screen, lease)
				r = e2.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"booked":2}`)))
				wantReplayOf(t, r, &forwards, body)
			})
		}
	}
}

// An operator's DELETE while the commit is still being retried wins: the
// retry must not write the record back, and the provider's next delivery
// is forwarded (SPEC §8). With a ledger claim the retry writes only over
// its own pending row, which the DELETE removed; with the screen's claim
// alone there is no row, so the DELETE stops this process's retry first
// (the admin API calls CancelCommitRetry before deleting).
func TestDeleteStopsTheCommitRetry(t *testing.T) {
	t.Parallel()
	for _, sc := range recommitSetups {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := &flakyLedger{Ledger: postgresLedger(t)}
			e := recommitEngine(t, l, sc.screen, 30*time.Second)
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_deleted_while_retried"}, Fingerprint: []byte("fp")}
			var forwards atomic.Int64
			if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, []byte(`{"n":1}`))); r.Outcome != idempotency.Forwarded {
				t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
			}

			// The admin API's order: stop this process's retry, delete the
			// row, forget the key. The ledger-claim case goes without the
			// first and the last, as a DELETE through another replica does:
			// its retry must not write back a deleted row by itself. Then
			// the ledger takes commits again.
			if sc.screen {
				e.CancelCommitRetry(d.Ref)
			}
			if err := l.Delete(ctx, d.Ref); err != nil && !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("delete: %v", err)
			}
			if sc.screen {
				if err := e.Forget(ctx, d.Ref); err != nil {
					t.Fatal(err)
				}
			}
			before := l.commits.Load()
			l.down.Store(false)
			// The retries the schedule makes in this time: 250ms, +500ms, +1s.
			time.Sleep(2 * time.Second)
			if sc.screen && l.commits.Load() != before {
				t.Fatalf("%d commit attempts after the retry was cancelled, want none", l.commits.Load()-before)
			}
			if !sc.screen && l.commits.Load() == before {
				t.Fatalf("the claimed retry made no attempt: this test proves nothing")
			}
			if rec, err := l.Lookup(ctx, d.Ref); !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("after the DELETE the ledger holds %+v (%v), want no row: the retry wrote the record back", rec, err)
			}
			r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"n":2}`)))
			if r.Outcome != idempotency.Forwarded || forwards.Load() != 2 {
				t.Fatalf("delivery after the DELETE: %s, upstream received %d, want forwarded (2)", r.Outcome, forwards.Load())
			}
		})
	}
}

// Shutting down with a commit still being retried: Close gives it one last
// attempt (the ledger may be back before the retry's next turn), and no
// attempt follows Close.
func TestCloseTriesTheRetriedCommitOnceMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &flakyLedger{Ledger: sqliteLedger(t)}
	e := recommitEngine(t, l, false, 30*time.Second)
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_closed_while_retried"}, Fingerprint: []byte("fp")}
	var forwards atomic.Int64
	if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, []byte(`{"n":1}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	l.down.Store(false) // back before the first retry is due (CommitRetryFirst)
	e.Close()
	if rec, err := l.Lookup(ctx, d.Ref); err != nil || rec.State != idempotency.StateDone {
		t.Fatalf("after Close the ledger holds %+v (%v), want the done record", rec, err)
	}
	n := l.commits.Load()
	time.Sleep(2 * idempotency.CommitRetryFirst)
	if l.commits.Load() != n {
		t.Fatalf("commit attempts after Close returned")
	}
}

// The records held for retries are bounded in what they hold, not only in
// number: with the ledger down, a gateway forwarding large answers must not
// keep every one of them. Two answers of just over half the budget: the
// first is retried and recorded once the ledger is back, the second stays
// as before, recorded only in the screen.
func TestCommitRetriesHoldAtMostTheirByteBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &flakyLedger{Ledger: sqliteLedger(t)}
	e := recommitEngine(t, l, false, 30*time.Second)
	p := *racePolicy
	p.MaxBody = 2 * idempotency.MaxCommitRetryBytes
	var forwards atomic.Int64
	refs := []idempotency.Ref{{Route: "r", Key: "evt_large_1"}, {Route: "r", Key: "evt_large_2"}}
	for _, ref := range refs {
		body := bytes.Repeat([]byte("x"), idempotency.MaxCommitRetryBytes/2+1)
		d := idempotency.Delivery{Ref: ref, Fingerprint: []byte("fp")}
		if r := e.Handle(ctx, &p, d, forwardThenLedgerDown(l, &forwards, body)); r.Outcome != idempotency.Forwarded {
			t.Fatalf("%s: %s (%v), want forwarded", ref.Key, r.Outcome, r.Err)
		}
	}
	l.down.Store(false)
	waitRecord(t, l, refs[0]) // the first large answer, recorded by its retry
	e.Close()                 // the last attempt of any retry under way
	// Its claim's pending row is all the ledger holds of it, as before.
	if rec, err := l.Lookup(ctx, refs[1]); err != nil || rec.State != idempotency.StatePending {
		state := "no row"
		if rec != nil {
			state = string(rec.State)
		}
		t.Fatalf("the second large answer, over the budget: ledger %s (%v), want its pending claim only: it was held for a retry", state, err)
	}
}

// The background retry waits up to CommitRetryMaxDelay between attempts.
// A provider's retry that arrives in that gap, once the ledger is back and
// the first claim's lease is over, makes the retry attempt first, before it
// claims: the record lands and the retry is replayed from it. Without that,
// it took the expired claim over and the upstream booked the event twice.
// Both places a delivery goes to the ledger: a ledger claim (no screen),
// and the confirmation of a Redis claim after Redis forgot the entry.
func TestRetryOfAnUnrecordedDeliveryGoesAfterItsCommit(t *testing.T) {
	t.Parallel()
	for _, screen := range []bool{false, true} {
		name := map[bool]string{false: "ledger claim", true: "redis screen that forgot the entry"}[screen]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pl, rs := productionStores(t)
			l := &flakyLedger{Ledger: pl}
			const lease = time.Second
			o := idempotency.Options{Ledger: l, Lease: lease}
			if screen {
				o.Screen, o.ScreenUnavailable, o.ConfirmByClaim = rs, idempotency.FailStore, true
			}
			e := newEngine(t, o)
			t.Cleanup(e.Close)
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_retry_in_the_gap"}, Fingerprint: []byte("fp")}
			var forwards atomic.Int64
			body := []byte(`{"booked":1}`)
			if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, body)); r.Outcome != idempotency.Forwarded {
				t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
			}
			// The first commit and the retries at 0.25, 0.75, 1.75 and
			// 3.75 s are refused; the next is due 4 s after the last.
			testenv.Eventually(t, 10*time.Second, "5 commits refused", func() bool { return l.refused.Load() >= 5 })
			l.down.Store(false)
			if screen {
				if err := rs.Forget(ctx, d.Ref); err != nil { // Redis lost it (eviction, a flush)
					t.Fatal(err)
				}
			}
			// Sixteen copies at once (the stacked retries of a provider,
			// a consumer and a proxy): one attempt, one copy upstream.
			results := make(chan idempotency.Result, 16)
			for range cap(results) {
				go func() { results <- e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"booked":2}`))) }()
			}
			for range cap(results) {
				wantReplayOf(t, <-results, &forwards, body)
			}
		})
	}
}

// waitRecord waits up to 30s for the ledger to hold ref's done record: a
// 64 MiB retry budget's record takes seconds on a loaded machine.
func waitRecord(t *testing.T, l idempotency.Ledger, ref idempotency.Ref) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the done record of "+ref.Key, func() bool {
		rec, err := l.Lookup(context.Background(), ref)
		return err == nil && rec.State == idempotency.StateDone
	})
}

// A later delivery of a key whose earlier commit is still being retried —
// forwarded because it held the claim (here after a DELETE through another
// replica; a takeover is the other way) — gets a retry of its own when its
// commit fails too. The earlier record can no longer land over the later
// delivery's claim; the later one can. Before, the later failure was not
// retried at all, and once its lease ran out the provider's next retry was
// forwarded a third time. (Found by review.)
func TestALaterFailedCommitReplacesTheEarlierRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &flakyLedger{Ledger: sqliteLedger(t)}
	const lease = time.Second
	e := recommitEngine(t, l, false, lease)
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_later_commit"}, Fingerprint: []byte("fp")}
	var forwards atomic.Int64
	if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, []byte(`{"n":1}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	// The first commit and the retries at 0.25 and 0.75 s.
	testenv.Eventually(t, 10*time.Second, "3 commits refused", func() bool { return l.refused.Load() >= 3 })
	if err := l.Delete(ctx, d.Ref); err != nil { // an operator's DELETE through another replica
		t.Fatal(err)
	}
	l.down.Store(false)
	// Its nudge finds the earlier claim gone; it claims afresh, is
	// forwarded, and its own commit meets the ledger down again.
	if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, []byte(`{"n":2}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("delivery after the DELETE: %s (%v)", r.Outcome, r.Err)
	}
	refused := l.refused.Load()
	testenv.Eventually(t, 10*time.Second, "the later commit's retry to be refused", func() bool { return l.refused.Load() > refused })
	l.down.Store(false)
	waitRecord(t, l, d.Ref)
	time.Sleep(lease) // past the second claim's lease
	r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"n":3}`)))
	if r.Outcome != idempotency.Replayed || forwards.Load() != 2 || r.Replay == nil || string(r.Replay.Body) != `{"n":2}` {
		t.Fatalf("third delivery: %s, upstream received %d copies; want a replay of the second answer, 2 copies", r.Outcome, forwards.Load())
	}
}

// A delivery of a key being retried waits for the retry's attempt only
// briefly: with a ledger that hangs, it goes on to its own claim after at
// most a second (and then waits for the delivery in flight, as any repeat
// does), instead of being held a whole OpTimeout first. Here OpTimeout is
// 10s and the repeat's wait_timeout 1s: the answer comes within ~2s, not
// after 10s more.
func TestANudgeDoesNotHoldADeliveryOnAHungLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &flakyLedger{Ledger: sqliteLedger(t)}
	e := newEngine(t, idempotency.Options{Ledger: l, Lease: 30 * time.Second, OpTimeout: 10 * time.Second})
	t.Cleanup(e.Close)
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_hung_nudge"}, Fingerprint: []byte("fp")}
	var forwards atomic.Int64
	if r := e.Handle(ctx, racePolicy, d, forwardThenLedgerDown(l, &forwards, []byte(`{"n":1}`))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	l.hang.Store(true) // retried commits now hang; claims still answer
	l.down.Store(false)
	start := time.Now()
	r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte(`{"n":2}`)))
	if took := time.Since(start); took > 6*time.Second {
		t.Fatalf("the repeat was answered after %v (%s): its nudge held it for the hung attempt", took, r.Outcome)
	}
	if r.Outcome != idempotency.Conflict || forwards.Load() != 1 {
		t.Fatalf("repeat: %s, upstream received %d copies; want conflict (its first delivery's claim stands), 1 copy", r.Outcome, forwards.Load())
	}
	l.hang.Store(false)
	waitRecord(t, l, d.Ref) // and the retry still lands
}
