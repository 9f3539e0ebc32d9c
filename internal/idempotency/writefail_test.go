package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// readOnlyLedger is one ledger database through two connections: while
// readOnly is set, every call goes through the one that refuses writes
// (PostgreSQL's default_transaction_read_only, 25006; SQLite's
// query_only, SQLITE_READONLY), as a hot standby or a full disk does:
// lookups answer, claims and commits fail with ErrUnavailable. claims
// counts the ledger claims asked for.
type readOnlyLedger struct {
	rw, ro   *sqlledger.Ledger
	readOnly atomic.Bool
	claims   atomic.Int64
}

func (l *readOnlyLedger) db() *sqlledger.Ledger {
	if l.readOnly.Load() {
		return l.ro
	}
	return l.rw
}

func (l *readOnlyLedger) Lookup(ctx context.Context, ref idempotency.Ref) (*idempotency.Record, error) {
	return l.db().Lookup(ctx, ref)
}

func (l *readOnlyLedger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	l.claims.Add(1)
	return l.db().Claim(ctx, req, now)
}

func (l *readOnlyLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	return l.db().Commit(ctx, rec, owner, now)
}

func (l *readOnlyLedger) Release(ctx context.Context, ref idempotency.Ref, owner string) error {
	return l.db().Release(ctx, ref, owner)
}

func (l *readOnlyLedger) Recommit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time, claimed bool) error {
	return l.db().Recommit(ctx, rec, owner, now, claimed)
}

func (l *readOnlyLedger) ProbeWrite(ctx context.Context) error { return l.db().ProbeWrite(ctx) }

// openReadOnlyLedger opens a migrated ledger and a second, read-only
// connection to its database.
func openReadOnlyLedger(t *testing.T, driver string) *readOnlyLedger {
	t.Helper()
	dsn, ro := testenv.Postgres(t), "&default_transaction_read_only=on"
	if driver == sqlledger.DriverSQLite {
		dsn, ro = filepath.Join(t.TempDir(), "ledger.db"), "?_pragma=query_only(1)"
	}
	l := &readOnlyLedger{rw: openLedger(t, driver, dsn)}
	var err error
	if l.ro, err = sqlledger.Open(context.Background(), sqlledger.Options{Driver: driver, DSN: dsn + ro}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.ro.Close() })
	return l
}

// writeFailEngine is the embedded default's engine (a memory screen whose
// claims are confirmed by a ledger lookup) on l.
func writeFailEngine(t *testing.T, l idempotency.Ledger, mode idempotency.FailMode, retryFor time.Duration, commitFailures, claimErrors *atomic.Int64) (*idempotency.Engine, *memscreen.Screen) {
	t.Helper()
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore,
		LedgerUnavailable: mode, CommitRetryFor: retryFor, Hooks: idempotency.Hooks{
			CommitFailure: func(string) { commitFailures.Add(1) },
			DependencyError: func(dep, op string) {
				if dep == "ledger" && op == "claim" {
					claimErrors.Add(1)
				}
			},
		}})
	t.Cleanup(e.Close)
	return e, s
}

func deliveryOf(key string) idempotency.Delivery {
	return idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: key}, Fingerprint: []byte(key)}
}

// SPEC §6: a ledger that answers reads but refuses writes (a full disk,
// a read-only database) is unreachable from its first failed commit until
// a write succeeds. With the memory screen the ledger is only read before
// a forward: before, every first delivery was forwarded, its commit
// failed, and the provider got 200 for an event recorded nowhere but the
// screen (forwarded again after a restart). Now only the delivery whose
// commit failed is; the next is refused with 503 (store.on_unavailable:
// reject) or passed through (pass) before it is forwarded; recorded
// deliveries are still replayed; and once writes succeed, deliveries are
// forwarded and recorded again. The commit's background retry is off: the
// delivery's own ledger claim ends the outage.
func TestALedgerRefusingWritesIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{sqlledger.DriverSQLite, sqlledger.DriverPostgres} {
		for _, mode := range []idempotency.FailMode{idempotency.FailReject, idempotency.FailPass} {
			name := driver + map[idempotency.FailMode]string{idempotency.FailReject: "/reject", idempotency.FailPass: "/pass"}[mode]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				refusingWrites(t, driver, mode)
			})
		}
	}
}

func refusingWrites(t *testing.T, driver string, mode idempotency.FailMode) {
	ctx := context.Background()
	l := openReadOnlyLedger(t, driver)
	var failures, claimErrors, forwards atomic.Int64
	e, s := writeFailEngine(t, l, mode, -1, &failures, &claimErrors)
	deliver := func(key string) idempotency.Result {
		return e.Handle(ctx, racePolicy, deliveryOf(key), fwdBody(&forwards, []byte(`{"for":"`+key+`"}`)))
	}
	wantForwarded := func(key string, o idempotency.Outcome, n int64) {
		t.Helper()
		if r := deliver(key); r.Outcome != o || forwards.Load() != n {
			t.Fatalf("%s: %s (%v), upstream received %d in all; want %s, %d", key, r.Outcome, r.Err, forwards.Load(), o, n)
		}
	}
	wantReplayed := func(key string) {
		t.Helper()
		n := forwards.Load()
		r := deliver(key)
		if r.Outcome != idempotency.Replayed || r.Replay == nil || string(r.Replay.Body) != `{"for":"`+key+`"}` || forwards.Load() != n {
			t.Fatalf("repeat of %s: %s (%v), upstream received %d more; want a replay of its answer, none", key, r.Outcome, r.Err, forwards.Load()-n)
		}
	}
	wantRecorded := func(key string) {
		t.Helper()
		if rec, err := l.rw.Lookup(ctx, deliveryOf(key).Ref); err != nil || rec.State != idempotency.StateDone {
			t.Fatalf("%s in the ledger: %+v (%v), want done", key, rec, err)
		}
	}

	wantForwarded("evt_recorded", idempotency.Forwarded, 1)
	l.readOnly.Store(true)
	// The first delivery cannot know: it is forwarded, its commit fails.
	wantForwarded("evt_unrecorded", idempotency.Forwarded, 2)
	if failures.Load() != 1 {
		t.Fatalf("commit failures: %d, want 1", failures.Load())
	}
	if _, err := l.rw.Lookup(ctx, deliveryOf("evt_unrecorded").Ref); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("the ledger recorded a commit while read-only (%v): this test proves nothing", err)
	}

	for i := range 2 { // and again: the mark stays while writes are refused
		key := fmt.Sprintf("evt_while_read_only_%d", i)
		if mode == idempotency.FailPass {
			wantForwarded(key, idempotency.Passthrough, 3+int64(i))
			continue
		}
		r := deliver(key)
		if r.Outcome != idempotency.Unavailable || r.Status != 503 || r.RetryAfter <= 0 || forwards.Load() != 2 {
			t.Fatalf("delivery after a refused commit: %s (status %d, Retry-After %v), upstream received %d in all; want unavailable, 503 with Retry-After, 2 (SPEC §6: nothing forwarded)",
				r.Outcome, r.Status, r.RetryAfter, forwards.Load())
		}
	}
	if failures.Load() != 1 || claimErrors.Load() != 2 {
		t.Fatalf("commit failures %d, ledger claim errors %d; want 1 (the first delivery's), 2 (one a delivery)", failures.Load(), claimErrors.Load())
	}
	// Reads still work: a recorded delivery the screen forgot is replayed
	// from the ledger, the unrecorded one from the screen.
	if err := s.ForgetDone(ctx, deliveryOf("evt_recorded").Ref); err != nil {
		t.Fatal(err)
	}
	wantReplayed("evt_recorded")
	wantReplayed("evt_unrecorded")

	// Writes work again: the next delivery's claim shows it, and clears
	// the mark; the one after is confirmed by a lookup alone again.
	l.readOnly.Store(false)
	n := forwards.Load()
	wantForwarded("evt_after", idempotency.Forwarded, n+1)
	wantRecorded("evt_after")
	claims := l.claims.Load()
	wantForwarded("evt_after_2", idempotency.Forwarded, n+2)
	wantRecorded("evt_after_2")
	if l.claims.Load() != claims {
		t.Fatalf("a delivery after a successful write claimed in the ledger: the mark was not cleared")
	}
}

// A retried commit that lands clears the mark too: the provider's next
// first delivery is confirmed by a lookup alone and forwarded.
func TestARetriedCommitEndsTheWriteOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openReadOnlyLedger(t, sqlledger.DriverSQLite)
	var failures, claimErrors, forwards atomic.Int64
	e, _ := writeFailEngine(t, l, idempotency.FailReject, time.Minute, &failures, &claimErrors)
	l.readOnly.Store(true)
	if r := e.Handle(ctx, racePolicy, deliveryOf("evt_retried"), fwdBody(&forwards, []byte("1"))); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	if r := e.Handle(ctx, racePolicy, deliveryOf("evt_refused"), fwdBody(&forwards, []byte("2"))); r.Outcome != idempotency.Unavailable || forwards.Load() != 1 {
		t.Fatalf("delivery after a refused commit: %s, upstream received %d; want unavailable, 1", r.Outcome, forwards.Load())
	}
	l.readOnly.Store(false)
	waitRecord(t, l.rw, deliveryOf("evt_retried").Ref)
	claims := l.claims.Load()
	if r := e.Handle(ctx, racePolicy, deliveryOf("evt_refused"), fwdBody(&forwards, []byte("2"))); r.Outcome != idempotency.Forwarded || forwards.Load() != 2 {
		t.Fatalf("delivery after the retry landed: %s (%v), upstream received %d; want forwarded, 2", r.Outcome, r.Err, forwards.Load())
	}
	if l.claims.Load() != claims {
		t.Fatalf("the delivery after the retry landed claimed in the ledger: the retry did not clear the mark")
	}
	waitRecord(t, l.rw, deliveryOf("evt_refused").Ref)
}

// A write probe marks a ledger refusing writes before any delivery has
// failed to commit, on both drivers: readiness and the start of a gateway
// rely on it (SPEC §6). Once the ledger takes writes again the probe
// succeeds, and the next delivery's claim clears the mark.
func TestAWriteProbeMarks(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{sqlledger.DriverSQLite, sqlledger.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := openReadOnlyLedger(t, driver)
			var failures, claimErrors, forwards atomic.Int64
			e, _ := writeFailEngine(t, l, idempotency.FailReject, -1, &failures, &claimErrors)
			if err := e.ProbeWrites(ctx); err != nil || e.WritesFailing() {
				t.Fatalf("probe of a writable ledger: %v, marked %v; want nil, unmarked", err, e.WritesFailing())
			}
			l.readOnly.Store(true)
			if err := e.ProbeWrites(ctx); !errors.Is(err, idempotency.ErrUnavailable) || !e.WritesFailing() {
				t.Fatalf("probe of a ledger refusing writes: %v, marked %v; want ErrUnavailable, marked", err, e.WritesFailing())
			}
			if r := e.Handle(ctx, racePolicy, deliveryOf("evt_after_probe"), fwdBody(&forwards, []byte("1"))); r.Outcome != idempotency.Unavailable || forwards.Load() != 0 {
				t.Fatalf("first delivery after a failed probe: %s, upstream received %d; want unavailable, 0", r.Outcome, forwards.Load())
			}
			l.readOnly.Store(false)
			if err := e.ProbeWrites(ctx); err != nil {
				t.Fatalf("probe once writes work: %v", err)
			}
			claims := l.claims.Load()
			if r := e.Handle(ctx, racePolicy, deliveryOf("evt_after_probe"), fwdBody(&forwards, []byte("1"))); r.Outcome != idempotency.Forwarded || forwards.Load() != 1 {
				t.Fatalf("delivery once writes work: %s (%v), upstream received %d; want forwarded, 1", r.Outcome, r.Err, forwards.Load())
			}
			if l.claims.Load() != claims+1 || e.WritesFailing() {
				t.Fatalf("ledger claims %d, marked %v; want the delivery's claim, and the mark cleared by it", l.claims.Load()-claims, e.WritesFailing())
			}
		})
	}
}
