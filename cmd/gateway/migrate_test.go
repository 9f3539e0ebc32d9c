package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// TestMain runs the gateway instead of the tests when asked to, so that a
// test can start this binary as real gateway processes.
func TestMain(m *testing.M) {
	if os.Getenv(runAsGateway) == "1" {
		os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const runAsGateway = "HOOKSTAMP_TEST_RUN_GATEWAY"

// Two processes migrating a fresh SQLite file at once both succeed and
// leave the whole schema: River's migrations commit one by one, so without
// the file lock the second process re-applies one the first has just
// committed. Twenty files, since the race is a matter of timing: without
// the lock, about one pair in four failed (table river_migration already
// exists, or a version's row inserted twice). Both switch the file to WAL
// on opening it, before the lock.
func TestMigrateTogetherOnOneSQLiteFile(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		dir := t.TempDir()
		db := filepath.Join(dir, "ledger.db")
		cfg := filepath.Join(dir, "c.yaml")
		writeFile(t, cfg, `
store: {dsn: "`+db+`", auto_migrate: false}
`+demoRoutes)
		procs := make([]*exec.Cmd, 2)
		outs := make([]*bytes.Buffer, 2)
		for j := range procs {
			// One writer for both: exec then writes from one goroutine.
			outs[j] = &bytes.Buffer{}
			procs[j] = exec.Command(self, "migrate", "-config", cfg)
			procs[j].Env = append(os.Environ(), runAsGateway+"=1")
			procs[j].Stdout, procs[j].Stderr = outs[j], outs[j]
		}
		for _, p := range procs {
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
		}
		for j, p := range procs {
			if err := p.Wait(); err != nil {
				t.Errorf("file %d, process %d: %v\n%s", i, j+1, err, outs[j])
			}
		}
		checkSchema(t, db)
	}
}

// checkSchema fails t unless the ledger's tables answer and every River
// migration is applied.
func checkSchema(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Ready(ctx); err != nil {
		t.Errorf("%s: ledger table: %v", path, err)
	}
	if _, err := l.Attempts(ctx, idempotency.Ref{Route: "demo", Key: "k"}); err != nil {
		t.Errorf("%s: attempts table: %v", path, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Validate(ctx, nil)
	if err != nil || !res.OK {
		t.Errorf("%s: River's schema: %v %v", path, err, res)
	}
	// Switched by whichever process opened the file first, outside the
	// migration lock: SQLite serialises the switch itself.
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("%s: journal_mode %q %v, want wal", path, mode, err)
	}
}
