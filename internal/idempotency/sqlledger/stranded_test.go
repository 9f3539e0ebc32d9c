package sqlledger_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/faultproxy"
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
	u, err := url.Parse(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New("postgres", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	const op = time.Second
	l := openLedger(t, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: u.String(), OpTimeout: op, MaxOpenConns: 2})
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
	p.Restore()
	testenv.Eventually(t, 6*op, "the ledger to answer once the database does", func() bool {
		return l.Ping(context.Background()) == nil
	})
}
