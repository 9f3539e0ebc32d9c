package idempotency_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// store.on_unavailable: pass forwards without deduplication while the
// ledger cannot be reached (SPEC §6). A ledger that answers with a logic
// error — here its table is missing: auto_migrate is off and `gateway
// migrate` was not run; a revoked privilege is another — is not an outage:
// the ledger keeps such errors apart from ErrUnavailable precisely so that
// pass does not hide them (sqlledger.TestSchemaErrorIsNotUnavailable). The
// engine must fail closed on them (503, nothing forwarded), not forward
// every delivery, repeats included, without dedup.
func TestLedgerLogicErrorIsNotPassedThrough(t *testing.T) {
	for _, tc := range []struct {
		name   string
		screen func(t *testing.T) idempotency.Screen
	}{
		{"screen none", func(*testing.T) idempotency.Screen { return nil }},
		{"memory screen", func(t *testing.T) idempotency.Screen {
			s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
			t.Cleanup(s.Close)
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// Opened, never migrated.
			l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: filepath.Join(t.TempDir(), "ledger.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			if _, err := l.Lookup(ctx, idempotency.Ref{Route: "r", Key: "k"}); err == nil || errors.Is(err, idempotency.ErrUnavailable) {
				t.Fatalf("lookup without a table: %v, want a logic error", err)
			}
			o := idempotency.Options{Ledger: l, LedgerUnavailable: idempotency.FailPass, ScreenUnavailable: idempotency.FailStore}
			if s := tc.screen(t); s != nil {
				o.Screen = s
			}
			e := newEngine(t, o)
			t.Cleanup(e.Close)
			var forwards atomic.Int64
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_no_table"}, Fingerprint: []byte("fp")}
			for i := range 2 {
				r := e.Handle(ctx, racePolicy, d, fwdCount(&forwards))
				if r.Outcome != idempotency.Unavailable || r.Status != 503 {
					t.Errorf("delivery %d with a ledger that has no table: %s %d, want unavailable 503", i+1, r.Outcome, r.Status)
				}
			}
			if n := forwards.Load(); n != 0 {
				t.Fatalf("upstream received %d copies of one event while the ledger had no table, want 0", n)
			}
		})
	}
}
