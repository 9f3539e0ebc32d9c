package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// productionStores opens a PostgreSQL ledger and a Redis screen of the
// test's own.
func productionStores(t *testing.T) (*sqlledger.Ledger, *redisscreen.Screen) {
	t.Helper()
	l := postgresLedger(t)
	addr, prefix := testenv.RedisPrefix(t)
	s, err := redisscreen.New(redisscreen.Options{Addrs: []string{addr}, Prefix: prefix, MaxCachedBody: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return l, s
}

// sqliteLedger opens an embedded SQLite ledger in a temporary directory.
func sqliteLedger(tb testing.TB) *sqlledger.Ledger {
	tb.Helper()
	return openLedger(tb, sqlledger.DriverSQLite, filepath.Join(tb.TempDir(), "ledger.db"))
}

// postgresLedger opens a PostgreSQL ledger in a schema of the test's own.
func postgresLedger(tb testing.TB) *sqlledger.Ledger {
	tb.Helper()
	return openLedger(tb, sqlledger.DriverPostgres, testenv.Postgres(tb))
}

// openLedger opens and migrates a ledger, closed when the test ends.
func openLedger(tb testing.TB, driver, dsn string) *sqlledger.Ledger {
	tb.Helper()
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: driver, DSN: dsn})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return l
}

// onDoneLedger runs hook when a ledger claim finds the key done.
type onDoneLedger struct {
	*sqlledger.Ledger
	hook func()
}

func (l *onDoneLedger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	c, err := l.Ledger.Claim(ctx, req, now)
	if err == nil && c.Status == idempotency.Done {
		l.hook()
	}
	return c, err
}

// onDoneScreen runs hook when a screen claim finds the key done.
type onDoneScreen struct {
	*redisscreen.Screen
	hook func()
}

func (s *onDoneScreen) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	c, err := s.Screen.Claim(ctx, req)
	if err == nil && c.Status == idempotency.Done {
		s.hook()
	}
	return c, err
}

func fwdCount(n *atomic.Int64) idempotency.ForwardFunc {
	return func(context.Context) (*idempotency.Upstream, error) {
		n.Add(1)
		return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("ok")}, nil
	}
}

var racePolicy = &idempotency.Policy{Route: "r", Final: idempotency.DefaultFinal, MaxBody: 1 << 20,
	Retention: time.Hour, WaitTimeout: time.Second}

// deliveredOnce returns an engine on o through which d was forwarded and
// recorded, and the count of the upstream's deliveries (1 so far).
func deliveredOnce(t *testing.T, o idempotency.Options, d idempotency.Delivery) (*idempotency.Engine, *atomic.Int64) {
	t.Helper()
	e := newEngine(t, o)
	forwards := new(atomic.Int64)
	if r := e.Handle(context.Background(), racePolicy, d, fwdCount(forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s", r.Outcome)
	}
	return e, forwards
}

// raceThenDeliver sends d through racing (whose hook deletes the record
// after it read it: still a replay), then through next, which must
// forward: the delete was not undone. The upstream has seen d once before.
func raceThenDeliver(t *testing.T, racing, next *idempotency.Engine, d idempotency.Delivery, forwards *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	if r := racing.Handle(ctx, racePolicy, d, fwdCount(forwards)); r.Outcome != idempotency.Replayed {
		t.Fatalf("repeat that read before the delete: %s", r.Outcome)
	}
	if r := next.Handle(ctx, racePolicy, d, fwdCount(forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("delivery after the DELETE: %s, want forwarded (a refill brought the deleted record back)", r.Outcome)
	}
	if n := forwards.Load(); n != 2 {
		t.Fatalf("upstream received %d, want 2", n)
	}
}

// An operator's DELETE that lands while a repeat is between reading the
// record and putting it back in the screen or the in-process cache: the
// repeat may still be replayed (it read first), but the next delivery is
// forwarded — the deleted record is not brought back for the screen's TTL
// or the cache's age.
func TestDeleteRacingARefillIsNotUndone(t *testing.T) {
	ctx := context.Background()
	p := racePolicy

	t.Run("screen refill after a ledger confirm", func(t *testing.T) {
		l, s := productionStores(t)
		d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_refill"}}
		base := idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}
		e, forwards := deliveredOnce(t, base, d)
		if err := s.Forget(ctx, d.Ref); err != nil { // the screen lost the key
			t.Fatal(err)
		}
		hooked := base
		hooked.Ledger = &onDoneLedger{Ledger: l, hook: func() {
			if err := l.Delete(ctx, d.Ref); err != nil {
				t.Error(err)
			}
			if err := e.Forget(ctx, d.Ref); err != nil {
				t.Error(err)
			}
		}}
		repeat := newEngine(t, hooked)
		raceThenDeliver(t, repeat, e, d, forwards)
	})

	t.Run("cache put after a screen read", func(t *testing.T) {
		l, s := productionStores(t)
		d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_cache"}}
		_, forwards := deliveredOnce(t, idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}, d)
		var e *idempotency.Engine
		var err error
		var armed atomic.Bool
		armed.Store(true)
		hs := &onDoneScreen{Screen: s, hook: func() {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			if err := l.Delete(ctx, d.Ref); err != nil {
				t.Error(err)
			}
			if err := e.Forget(ctx, d.Ref); err != nil {
				t.Error(err)
			}
		}}
		e, err = idempotency.New(idempotency.Options{Screen: hs, Ledger: l, ConfirmByClaim: true,
			ScreenUnavailable: idempotency.FailStore, Cache: idempotency.NewCache(1<<20, 64<<10, 0)})
		if err != nil {
			t.Fatal(err)
		}
		raceThenDeliver(t, e, e, d, forwards)
	})

	// Another replica's delete that this one missed (its subscription was
	// down: no tombstone), followed by the resubscription's Clear, both
	// between the repeat's screen read and its Put.
	t.Run("cache put across a missed delete and a resubscription", func(t *testing.T) {
		l, s := productionStores(t)
		d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_missed"}}
		first, forwards := deliveredOnce(t, idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}, d)
		cache := idempotency.NewCache(1<<20, 64<<10, 0)
		var doneReads atomic.Int64
		hs := &onDoneScreen{Screen: s, hook: func() {
			if doneReads.Add(1) > 1 {
				return
			}
			if err := l.Delete(ctx, d.Ref); err != nil { // the other replica's delete
				t.Error(err)
			}
			if err := first.Forget(ctx, d.Ref); err != nil {
				t.Error(err)
			}
			cache.Clear() // this replica resubscribed
		}}
		e := newEngine(t, idempotency.Options{Screen: hs, Ledger: l, ConfirmByClaim: true,
			ScreenUnavailable: idempotency.FailStore, Cache: cache})
		raceThenDeliver(t, e, e, d, forwards)
		// What was recorded after the Clear is cached: the next repeat
		// reads nothing from the screen.
		if r := e.Handle(ctx, p, d, fwdCount(forwards)); r.Outcome != idempotency.Replayed || forwards.Load() != 2 {
			t.Fatalf("repeat of the new record: %s, %d forwards", r.Outcome, forwards.Load())
		}
		if n := doneReads.Load(); n != 1 {
			t.Fatalf("the repeat of the new record read the screen: %d done reads, want 1", n)
		}
	})
}

// lostClaimScreen loses the answer to its first Claim (as a timeout
// would) and holds every Complete until gate is closed.
type lostClaimScreen struct {
	idempotency.Screen
	lost atomic.Bool
	gate chan struct{}
}

func (s *lostClaimScreen) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	if s.lost.CompareAndSwap(false, true) {
		return idempotency.Claim{}, fmt.Errorf("claim: %w: i/o timeout", idempotency.ErrUnavailable)
	}
	return s.Screen.Claim(ctx, req)
}

func (s *lostClaimScreen) Complete(ctx context.Context, ref idempotency.Ref, owner string, e *idempotency.Entry, ttl time.Duration) error {
	<-s.gate
	return s.Screen.Complete(ctx, ref, owner, e, ttl)
}

// A refill never ends a new delivery's claim (Entry.Refill), also the one
// made in the background after a screen claim whose answer was lost
// (afterLostScreenClaim → tidyScreen with the ledger's done entry): if an
// operator deleted the record and a new delivery claimed the key before
// it ran, it overwrote that claim.
func TestLostClaimRefillKeepsANewClaim(t *testing.T) {
	ctx := context.Background()
	l := sqliteLedger(t)
	for _, noDone := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoDone=%v", noDone), func(t *testing.T) {
			ref := idempotency.Ref{Route: "r", Key: fmt.Sprintf("evt_lost_refill_%v", noDone)}
			// The record exists in the ledger.
			now := time.Now()
			if c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "first", Lease: time.Minute, Retention: time.Hour}, now); err != nil || c.Status != idempotency.Acquired {
				t.Fatalf("seed claim: %v %v", c.Status, err)
			}
			rec := &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200, Body: []byte("old")},
				CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}
			if err := l.Commit(ctx, rec, "first", now); err != nil {
				t.Fatal(err)
			}
			ms := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10, NoDone: noDone})
			t.Cleanup(ms.Close)
			s := &lostClaimScreen{Screen: ms, gate: make(chan struct{})}
			e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore})
			// A repeat whose screen claim is lost: the ledger answers done, the
			// screen is refilled in the background (held at the gate).
			var n atomic.Int64
			if r := e.Handle(ctx, racePolicy, idempotency.Delivery{Ref: ref}, fwdCount(&n)); r.Outcome != idempotency.Replayed {
				t.Fatalf("repeat: %s", r.Outcome)
			}
			// The operator deletes the record (only the first subtest: the row is gone after).
			if err := l.Delete(ctx, ref); err != nil {
				t.Fatal(err)
			}
			if err := e.Forget(ctx, ref); err != nil {
				t.Fatal(err)
			}
			// A new delivery claims the key and is in flight.
			c, err := ms.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "new", Lease: time.Minute})
			if err != nil || c.Status != idempotency.Acquired {
				t.Fatalf("new claim: %v %v", c.Status, err)
			}
			close(s.gate)
			e.Close() // waits for the background refill
			c, err = ms.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "repeat", Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if c.Status != idempotency.InFlight || c.Owner != "new" {
				t.Fatalf("after the stale refill a repeat finds %s (owner %q), want in flight for the new delivery", c.Status, c.Owner)
			}
		})
	}
}

// newEngine is idempotency.New(o), failing the test on an error.
func newEngine(tb testing.TB, o idempotency.Options) *idempotency.Engine {
	tb.Helper()
	e, err := idempotency.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
