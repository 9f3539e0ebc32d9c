package sqlledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// A ledger's deployment identity is written by its first migration and
// kept by every later one, whichever replica runs it: replicas starting
// together on an empty database agree on it, another database has its
// own, and a ledger migrated before hookstamp_meta existed says it has
// none (without calling the database unreachable) until it is migrated.
func TestDeploymentIdentity(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			o := d.options(t)
			ledgers := make([]*sqlledger.Ledger, 3)
			for i := range ledgers {
				l, err := sqlledger.Open(ctx, o)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = l.Close() })
				ledgers[i] = l
			}
			if _, err := ledgers[0].Deployment(ctx); !errors.Is(err, sqlledger.ErrNoDeployment) || errors.Is(err, idempotency.ErrUnavailable) {
				t.Fatalf("Deployment before any migration: %v, want ErrNoDeployment", err)
			}
			var wg sync.WaitGroup
			errs := make([]error, len(ledgers))
			for i, l := range ledgers {
				wg.Go(func() { errs[i] = l.Migrate(context.Background()) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			id := deployment(t, ledgers[0])
			if len(id) != 32 {
				t.Fatalf("deployment id %q, want 32 hex digits", id)
			}
			for i, l := range ledgers[1:] {
				if got := deployment(t, l); got != id {
					t.Fatalf("replica %d reads deployment %q, replica 0 %q", i+1, got, id)
				}
			}
			if err := ledgers[1].Migrate(ctx); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			if got := deployment(t, ledgers[2]); got != id {
				t.Fatalf("deployment after a second migration %q, was %q", got, id)
			}
			if other := deployment(t, openLedger(t, d.options(t))); other == id {
				t.Fatalf("two databases share deployment id %q", id)
			}

			// A ledger of an earlier release: no hookstamp_meta.
			w, err := ledgers[0].Writer()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.ExecContext(ctx, "DROP TABLE "+sqlledger.MetaTable); err != nil {
				t.Fatal(err)
			}
			if _, err := ledgers[0].Deployment(ctx); !errors.Is(err, sqlledger.ErrNoDeployment) || errors.Is(err, idempotency.ErrUnavailable) {
				t.Fatalf("Deployment without %s: %v, want ErrNoDeployment", sqlledger.MetaTable, err)
			}
			if err := ledgers[0].Migrate(ctx); err != nil {
				t.Fatalf("Migrate of the earlier schema: %v", err)
			}
			if got := deployment(t, ledgers[1]); got == "" || got == id {
				t.Fatalf("deployment after the upgrade %q (dropped one %q)", got, id)
			}
		})
	}
}

func deployment(tb testing.TB, l *sqlledger.Ledger) string {
	tb.Helper()
	id, err := l.Deployment(context.Background())
	if err != nil {
		tb.Fatalf("Deployment: %v", err)
	}
	return id
}
