package gateway

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A migration that waits for another process's says so after a second,
// then goes on once the other is done: a replica starting meanwhile is
// otherwise silent, its admin listener not yet open.
func TestMigrationSaysItWaitsForAnother(t *testing.T) {
	dsn := testenv.Postgres(t)
	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookstamp_records'))"); err != nil {
		t.Fatal(err)
	}

	logs := &testenv.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn, MaxOpenConns: 2,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() { done <- MigrateStore(ctx, l) }()
	testenv.Eventually(t, 10*time.Second, "the wait logged", func() bool {
		return strings.Contains(logs.String(), "waits for another process migrating")
	})
	select {
	case err := <-done:
		t.Fatalf("migrated while another held the lock: %v", err)
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("migrate after the other's end: %v", err)
	}
}
