package sqlledger_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// openLedger opens o, migrates it, and closes it when the test ends.
func openLedger(tb testing.TB, o sqlledger.Options) *sqlledger.Ledger {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := sqlledger.Open(ctx, o)
	if err != nil {
		tb.Fatalf("Open(%s): %v", o.Driver, err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	if err := l.Migrate(ctx); err != nil {
		tb.Fatalf("Migrate(%s): %v", o.Driver, err)
	}
	return l
}

// sqliteOptions points at a file in a directory that does not exist yet
// (Open creates it, as it does for the default data/hookstamp.db).
func sqliteOptions(tb testing.TB) sqlledger.Options {
	tb.Helper()
	return sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: filepath.Join(tb.TempDir(), "data", "hookstamp.db")}
}

func postgresOptions(tb testing.TB) sqlledger.Options {
	tb.Helper()
	return sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: testenv.Postgres(tb), MaxOpenConns: 8}
}

// drivers lists the backends every driver-independent test runs against.
var drivers = []struct {
	name    string
	options func(testing.TB) sqlledger.Options
}{
	{sqlledger.DriverSQLite, sqliteOptions},
	{sqlledger.DriverPostgres, postgresOptions},
}

func TestConformance(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			idempotencytest.RunLedger(t, func(t *testing.T) idempotency.Ledger {
				return openLedger(t, d.options(t))
			})
		})
	}
}
