package queue_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// startWithin calls q.Start(ctx) and fails the test unless it returns
// within d.
func startWithin(t *testing.T, q *queue.Queue, ctx context.Context, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- q.Start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Start still running after %v", d)
		return nil
	}
}

// River's start-up ping has no deadline: a database that hears it and
// never answers (pgbouncer holding the query, a partitioned connection)
// fails Start after StartTimeout, or once its context ends; and a queue
// that started works its jobs after that context ends.
func TestStartGivesUpOnAStalledDatabase(t *testing.T) {
	ctx := context.Background()
	dsn, pg := testenv.PostgresBehindProxy(t)
	l := migratedLedger(t, queue.DriverPostgres, dsn)
	up := newHeldUpstream()
	const timeout = 2 * time.Second
	q := newQueue(t, queue.Options{Driver: queue.DriverPostgres, Ledger: l, Forwarder: up, Replica: "replica-a",
		Logger: slog.New(slog.DiscardHandler), StartTimeout: timeout,
		Routes: []queue.Route{slowRetryRoute()},
	})

	pg.MuteAfter([]byte("SELECT 1\x00")) // River's ping, whole
	if err := startWithin(t, q, ctx, timeout+5*time.Second); err == nil || !strings.Contains(err.Error(), "did not answer within 2s") {
		t.Fatalf("Start on a stalled database: %v, want it to give up after %v", err, timeout)
	}
	cut, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	if err := startWithin(t, q, cut, timeout+5*time.Second); err == nil || time.Since(start) > timeout/2 {
		t.Fatalf("Start on a stalled database, its context ended: %v after %v, want an error at once", err, time.Since(start))
	}

	pg.Restore()
	run, cancel := context.WithCancel(ctx)
	// The restore reset the pool's connections: the first start can fail.
	testenv.Eventually(t, 10*time.Second, "the queue started", func() bool { return startWithin(t, q, run, 2*timeout) == nil })
	cancel()
	time.Sleep(timeout + 500*time.Millisecond)
	enqueue(t, l, idempotency.Ref{Route: "hooks", Key: "evt_after_start"})
	if n := up.attempt(t); n != 1 {
		t.Fatalf("attempt %d, want 1", n)
	}
	up.answers <- http.StatusOK
}
