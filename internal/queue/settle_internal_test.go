package queue

import (
	"context"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Settling gives up at its run's horizon, a ledger call in flight
// included: a run still settling when River rescues its job would meet
// the rescued run delivering it again. Against a hung PostgreSQL one
// ledger call alone would last its whole operation timeout.
func TestSettleStopsAtTheRunsHorizon(t *testing.T) {
	dsn, p := testenv.PostgresBehindProxy(t)
	l, err := sqlledger.Open(context.Background(), sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	q := &Queue{o: Options{Ledger: l, Now: time.Now}}
	ref := idempotency.Ref{Route: "r", Key: "evt_hung"}
	s := &sqlledger.Settlement{Ref: ref, Attempt: idempotency.Attempt{Ref: ref, StartedAt: time.Now(), Status: 503}}

	p.Hang()
	start := time.Now()
	_, err = q.settle(context.Background(), s, start.Add(300*time.Millisecond), nil)
	if took := time.Since(start); err == nil || took > sqlledger.DefaultOpTimeout/2 {
		t.Fatalf("settle against a hung ledger: %v after %v; want an error by its horizon, not after a ledger timeout (%v)", err, took, sqlledger.DefaultOpTimeout)
	}
}
