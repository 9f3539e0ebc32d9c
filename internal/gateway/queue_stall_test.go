package gateway

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// stalledQueueStart starts a gateway on a migrated PostgreSQL whose
// answers to River's start-up ping never come back (pgbouncer holding the
// query while PostgreSQL is down, a partitioned connection), so that its
// delivery queue cannot start, and has it accept events, which intake
// stores without that statement: their keys.
func stalledQueueStart(t *testing.T, up *upstream, logs *testenv.Buffer) (*Gateway, *testenv.FaultProxy, []string) {
	t.Helper()
	dsn, pg := postgresBehindProxy(t)
	migrateAs(t, dsn)
	cfg := gwConfig(t, up.URL, "unused", asyncRoute, "")
	cfg.Store.Driver, cfg.Store.DSN, cfg.Store.AutoMigrate = config.StorePostgres, dsn, false
	cfg.Server.ShutdownTimeout = 2 * time.Second
	pg.MuteAfter([]byte("SELECT 1\x00")) // the ping's statement, whole
	o := asyncOptions(t)
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g, err := New(t0ctx, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !g.draining.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = g.Shutdown(ctx)
		}
	})
	var keys []string
	for i := range 5 {
		key := fmt.Sprintf("evt_stall_%d", i)
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, key)), http.StatusAccepted, "accepted")
		keys = append(keys, key)
	}
	time.Sleep(time.Second)
	if n := up.total.Load(); n != 0 {
		t.Fatalf("upstream got %d deliveries, want none: the queue started", n)
	}
	return g, pg, keys
}

// A delivery queue whose start the database stalls holds no lock that
// SIGTERM needs: Shutdown returns within shutdown_timeout while the
// database still does not answer.
func TestShutdownWhileTheQueueStartStalls(t *testing.T) {
	t.Parallel()
	g, _, _ := stalledQueueStart(t, newUpstream(t), &testenv.Buffer{})
	timeout := g.cfg.Server.ShutdownTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d > timeout+2*time.Second {
			t.Fatalf("Shutdown took %v, shutdown_timeout is %v", d, timeout)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Shutdown still running 30s after it began (shutdown_timeout %v)", timeout)
	}
}

// A stalled start fails after a while and says so, and the queue starts
// once the database answers again: what was accepted meanwhile reaches
// the upstream, once.
func TestQueueStartsOnceTheStalledDatabaseAnswers(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	logs := &testenv.Buffer{}
	g, pg, keys := stalledQueueStart(t, up, logs)
	testenv.Eventually(t, 30*time.Second, "the stalled start logged", func() bool {
		return strings.Contains(logs.String(), "delivery queue not started; trying again")
	})
	if n := up.total.Load(); n != 0 {
		t.Fatalf("upstream got %d deliveries while the queue was not started", n)
	}
	pg.Restore()
	for _, key := range keys {
		waitState(t, g, key, idempotency.StateDone)
		if n := up.count(key); n != 1 {
			t.Errorf("upstream got %s %d times, want once", key, n)
		}
	}
	if n := up.total.Load(); n != int64(len(keys)) {
		t.Errorf("upstream got %d deliveries, want %d", n, len(keys))
	}
}

// A queue whose start ends after SIGTERM began stops there: the drain
// found nothing to stop, and a queue working on would go on taking jobs
// from a replica that is closing its stores.
func TestQueueStartedAfterItsStopStops(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migrateAs(t, dsn)
	// River's start creates each route's row in river_queue: it waits for
	// this lock, after its ping.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("LOCK TABLE river_queue IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, "unused", asyncRoute, "")
	cfg.Store.Driver, cfg.Store.DSN, cfg.Store.AutoMigrate = config.StorePostgres, dsn, false
	logs := &testenv.Buffer{}
	o := asyncOptions(t)
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})) // River says it stopped at DEBUG
	g := startGatewayWith(t, cfg, o)
	testenv.Eventually(t, 5*time.Second, "the queue's start to wait for the lock", func() bool {
		var n int
		err := db.QueryRow("SELECT count(*) FROM pg_locks WHERE relation = 'river_queue'::regclass AND NOT granted").Scan(&n)
		return err == nil && n > 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	g.stopQueue(ctx)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("stopQueue took %v while the queue was starting", d)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "River stopped once started", func() bool {
		return strings.Contains(logs.String(), "River client stopped")
	})
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_stopped"}`), http.StatusAccepted, "accepted")
	time.Sleep(time.Second)
	if n := up.total.Load(); n != 0 {
		t.Fatalf("upstream got %d deliveries from a queue stopped before its start ended", n)
	}
}
