package idempotency_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// productionStores opens a PostgreSQL ledger and a Redis screen of the
// test's own.
func productionStores(t *testing.T) (*sqlledger.Ledger, *redisscreen.Screen) {
	t.Helper()
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: testenv.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: filepath.Join(tb.TempDir(), "ledger.db")})
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
		e, err := idempotency.New(base)
		if err != nil {
			t.Fatal(err)
		}
		var forwards atomic.Int64
		if r := e.Handle(ctx, p, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
			t.Fatalf("first delivery: %s", r.Outcome)
		}
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
		repeat, err := idempotency.New(hooked)
		if err != nil {
			t.Fatal(err)
		}
		raceThenDeliver(t, repeat, e, d, &forwards)
	})

	t.Run("cache put after a screen read", func(t *testing.T) {
		l, s := productionStores(t)
		d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_cache"}}
		first, err := idempotency.New(idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore})
		if err != nil {
			t.Fatal(err)
		}
		var forwards atomic.Int64
		if r := first.Handle(ctx, p, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
			t.Fatalf("first delivery: %s", r.Outcome)
		}
		var e *idempotency.Engine
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
		raceThenDeliver(t, e, e, d, &forwards)
	})
}
