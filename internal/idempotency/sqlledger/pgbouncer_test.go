package sqlledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// pgBouncerDSNOption is what docs/production.md tells operators to add to
// store.dsn behind a PgBouncer in transaction pooling mode.
const pgBouncerDSNOption = "default_query_exec_mode=cache_describe"

// Behind PgBouncer in transaction pooling mode, consecutive statements of
// one client connection run on different server connections, so pgx's
// default named prepared statements fail at random ("prepared statement
// stmtcache_… does not exist / already exists": 503s for deliveries). With
// the DSN option docs/production.md gives, every ledger call works through
// the pooler under concurrency (group commit, batched claims and lookups,
// the clock, migrations, admin reads and the sweeper), with fewer server
// connections than the ledger's pool.
func TestPgBouncerTransactionPoolingWithDocumentedDSN(t *testing.T) {
	b := testenv.StartPgBouncer(t, testenv.Postgres(t), 2)
	l := openLedger(t, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: b.DSN + "&" + pgBouncerDSNOption, MaxOpenConns: 8})
	ctx := context.Background()
	if err := l.Ready(ctx); err != nil {
		t.Fatalf("Ready through PgBouncer: %v", err)
	}
	const workers, keys = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*keys*5)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				rf := ref(fmt.Sprintf("pgb-%d-%d", w, k))
				owner := rf.Key
				now := time.Now()
				c, err := l.Claim(ctx, claimReq(rf, owner, time.Hour), now)
				if err != nil || c.Status != idempotency.Acquired {
					errs <- fmt.Errorf("claim %s: %v %v", rf.Key, c.Status, err)
					continue
				}
				if err := l.Commit(ctx, doneRecord(rf, now, now.Add(time.Hour)), owner, now); err != nil {
					errs <- fmt.Errorf("commit %s: %w", rf.Key, err)
				}
				if rec, err := l.Lookup(ctx, rf); err != nil || rec.State != idempotency.StateDone {
					errs <- fmt.Errorf("lookup %s: %+v %v", rf.Key, rec, err)
				}
				if _, err := l.CountHeld(ctx, rf.Route); err != nil {
					errs <- fmt.Errorf("count held: %w", err)
				}
				if _, err := l.SweepAll(ctx, now, 100); err != nil {
					errs <- fmt.Errorf("sweep: %w", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 10 {
		t.Errorf("… and %d more errors", n-10)
	}
}
