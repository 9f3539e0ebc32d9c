package sqlledger

import (
	"context"
	"path/filepath"
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
