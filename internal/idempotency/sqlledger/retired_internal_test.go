package sqlledger

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// An index an earlier build made and none reads now is dropped by the
// next Migrate.
func TestMigrateDropsRetiredIndexes(t *testing.T) {
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := filepath.Join(t.TempDir(), "l.db")
			if driver == DriverPostgres {
				dsn = testenv.Postgres(t)
			}
			l, err := Open(ctx, Options{Driver: driver, DSN: dsn})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.w.Exec(`CREATE INDEX idx_hookstamp_records_queue ON hookstamp_records (route, state) WHERE state <> 'done'`).Error; err != nil {
				t.Fatal(err)
			}
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if l.w.Migrator().HasIndex(&recordRow{}, "idx_hookstamp_records_queue") {
				t.Fatal("idx_hookstamp_records_queue is still there after Migrate")
			}
		})
	}
}

// A ledger made before the sweep's index left queued rows out gets the
// partial index under its new name, loses the old one, and a second
// Migrate leaves both as they are.
func TestMigrateReplacesTheSweepIndex(t *testing.T) {
	for name, open := range openers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := open(t)
			oldSweepIndex(t, l)
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			migrated := indexDefs(t, l)
			if def, ok := migrated[oldSweepIndexName]; ok {
				t.Errorf("%s is still there after Migrate: %s", oldSweepIndexName, def)
			}
			if def := migrated[sweepIndex]; !strings.Contains(def, "expires_at") || !strings.Contains(def, "state <> 'queued'") {
				t.Errorf("%s after Migrate: %q, want a partial index on expires_at of the rows not queued", sweepIndex, def)
			}
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if again := indexDefs(t, l); !maps.Equal(again, migrated) {
				t.Errorf("a second Migrate changed the indexes:\n%v\nwas\n%v", again, migrated)
			}
		})
	}
}

// oldSweepIndexName is the sweep's index as releases before it left queued
// rows out made it.
const oldSweepIndexName = "idx_hookstamp_records_expires_at"

// oldSweepIndex gives l the sweep index of those releases instead of its
// own.
func oldSweepIndex(t *testing.T, l *Ledger) {
	t.Helper()
	for _, s := range []string{"DROP INDEX IF EXISTS " + sweepIndex, "CREATE INDEX IF NOT EXISTS " + oldSweepIndexName + " ON hookstamp_records (expires_at)"} {
		if err := l.w.Exec(s).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// indexDefs maps each index of hookstamp_records to its definition; on
// PostgreSQL with its oid, which a rebuild changes.
func indexDefs(t *testing.T, l *Ledger) map[string]string {
	t.Helper()
	query := `SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`
	if l.d.name == DriverPostgres {
		query = `SELECT c.relname, c.oid || ' ' || pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid ` +
			`WHERE i.indrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident(?))`
	}
	rows, err := l.w.Raw(query, TableName).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return defs
}
