package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// SIGTERM while serve is still starting — here waiting for another
// replica's migration (the advisory lock that serialises them) — stops it
// cleanly: exit 0, as a SIGTERM after start-up does. Exit 1 would mark a
// stopped unit failed (systemd) and log a stop that was asked for as an
// error.
func TestSIGTERMDuringStartupExitsZero(t *testing.T) {
	dsn := testenv.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Another replica is migrating: it holds the migration lock.
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext(current_schema() || '.hookstamp_records'))"); err != nil {
		t.Fatal(err)
	}

	// This process must survive the SIGTERM it sends itself even if serve
	// has not registered for it yet.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg, `
server: {listen: "127.0.0.1:0"}
admin: {listen: ""}
store: {driver: postgres, dsn: "`+dsn+`", auto_migrate: true}
`+demoRoutes)
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run([]string{"serve", "-config", cfg}, nil, &out, &errb)
		done <- result{code, errb.String()}
	}()
	// Wait until serve waits for the lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"+
			// this schema's lock only: other packages' tests run beside this one
			" AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"+
			" AND objid = ((hashtext(current_schema() || '.hookstamp_records')::bigint) & 4294967295)::oid").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve never waited for the migration lock; the test proves nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || strings.Contains(r.stderr, `"level":"ERROR"`) {
			t.Fatalf("SIGTERM during start-up: exit %d, stderr %q; want exit 0 and no error", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM during start-up")
	}
}
