package sqlledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// The database's host dies with connections open and being opened: none
// of them ever hears back or is reset. Once the database answers again
// (new connections pass), the ledger answers within a few of its
// timeouts: a connection stranded in its start-up does not keep the pool
// from opening others.
func TestPoolRecoversFromConnectionsStrandedInStartUp(t *testing.T) {
	t.Parallel()
	dsn, p := testenv.PostgresBehindProxy(t)
	const op = time.Second
	l := openLedger(t, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn, OpTimeout: op, MaxOpenConns: 2})
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping before: %v", err)
	}
	p.Strand()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 3 {
				_ = l.Ping(context.Background())
			}
		})
	}
	wg.Wait()
	p.Proxy.Restore() // stranded connections stay stranded
	testenv.Eventually(t, 6*op, "the ledger to answer once the database does", func() bool {
		return l.Ping(context.Background()) == nil
	})
}
