package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// redriveBatch is the batch size these tests give the ledger, so that a
// few dozen rows take several batches.
const redriveBatch = 7

// batchJobs keeps the keys of each InsertTx (each redrive transaction)
// that did not fail. With failAt, its failAt-th call fails; with
// dieAgain, the rows of each call are dead again in its transaction, as
// deliveries whose attempts ran out at once. It refuses a key it has
// queued already, ending a redrive that would take it again and again.
type batchJobs struct {
	rebind   func(string) string
	failAt   int
	dieAgain bool

	mu    sync.Mutex
	calls int
	keys  [][]string
}

func (j *batchJobs) InsertTx(ctx context.Context, tx *sql.Tx, ds []Delivery) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls++
	if j.calls == j.failAt {
		return errors.New("the job table refused the batch")
	}
	if j.dieAgain {
		if _, err := tx.ExecContext(ctx, j.rebind(`UPDATE hookstamp_records SET state = 'dead' WHERE route = ? AND state = 'queued'`), ds[0].Route); err != nil {
			return err
		}
	}
	keys := make([]string, len(ds))
	for i, d := range ds {
		keys[i] = d.Key
		for _, call := range j.keys {
			if slices.Contains(call, d.Key) {
				return fmt.Errorf("%s queued twice", d.Key)
			}
		}
	}
	j.keys = append(j.keys, keys)
	return nil
}

func (*batchJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) {
	return false, nil
}

// queuedOnce fails t unless the jobs name each of keys exactly once and
// nothing else, no call holding more than a batch.
func (j *batchJobs) queuedOnce(t *testing.T, keys []string) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	seen := map[string]int{}
	for i, call := range j.keys {
		if len(call) > redriveBatch {
			t.Errorf("transaction %d queued %d rows, want at most %d", i+1, len(call), redriveBatch)
		}
		for _, k := range call {
			seen[k]++
		}
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("%s queued %d times, want once", k, seen[k])
		}
		delete(seen, k)
	}
	if len(seen) > 0 {
		t.Errorf("rows queued that were not dead: %v", seen)
	}
}

// onBothWithBatches runs fn on a PostgreSQL and a SQLite ledger whose
// redrive goes redriveBatch rows a transaction, each inserting its jobs
// into jobs (rebind set by it).
func onBothWithBatches(t *testing.T, jobs func() *batchJobs, fn func(t *testing.T, l *Ledger, jobs *batchJobs)) {
	for name, open := range map[string]func(t *testing.T) *Ledger{
		"postgres": func(t *testing.T) *Ledger { return openPGWith(t, Options{RedriveBatch: redriveBatch}) },
		"sqlite": func(t *testing.T) *Ledger {
			return openMigrated(t, Options{Driver: DriverSQLite, DSN: t.TempDir() + "/l.db", RedriveBatch: redriveBatch})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, j := open(t), jobs()
			j.rebind = l.d.rebind
			l.UseJobs(j)
			fn(t, l, j)
		})
	}
}

// deadRows writes n dead rows of route, as async deliveries whose attempts
// ran out, in a few statements. Their created_at goes by threes, so that
// batches end between rows of one time, and has nanoseconds, which SQLite
// keeps (rows another writer made).
func deadRows(t *testing.T, l *Ledger, route string, n int) []string {
	t.Helper()
	start := dbTime(time.Now().Add(-time.Hour)).Add(789 * time.Nanosecond)
	method, path, headers, acked := "POST", "/hooks", "{}", true
	rows := make([]recordRow, n)
	keys := make([]string, n)
	for i := range rows {
		keys[i] = fmt.Sprintf("dead-%04d", n-i) // not in created_at order
		created := start.Add(time.Duration(i/3) * time.Millisecond)
		rows[i] = recordRow{Route: route, Key: keys[i], State: string(idempotency.StateDead), Headers: "{}", CreatedAt: created,
			CompletedAt: &created, ExpiresAt: created.Add(2 * time.Hour), RequestMethod: &method, RequestPath: &path,
			RequestHeaders: &headers, RequestBody: []byte(keys[i]), Acked: &acked}
	}
	if err := l.w.CreateInBatches(rows, 500).Error; err != nil {
		t.Fatalf("insert dead rows: %v", err)
	}
	return keys
}

// states counts route's rows by state.
func states(t *testing.T, l *Ledger, route string) map[idempotency.State]int {
	t.Helper()
	rows, err := l.r.Raw(`SELECT state, COUNT(*) FROM hookstamp_records WHERE route = ? GROUP BY state`, route).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[idempotency.State]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[idempotency.State(st)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A redrive of a whole route queues its dead rows a batch at a time, so
// that no number of them makes one transaction outlast the operation
// timeout; it queues each once, and none of another route.
func TestRedriveOfARouteGoesInBatches(t *testing.T) {
	onBothWithBatches(t, func() *batchJobs { return &batchJobs{} }, func(t *testing.T, l *Ledger, jobs *batchJobs) {
		ctx := context.Background()
		keys := deadRows(t, l, "r", 50)
		deadRows(t, l, "other", 3)
		n, err := l.Redrive(ctx, "r", nil, time.Now().Add(time.Hour))
		if err != nil || n != len(keys) {
			t.Fatalf("redrive = %d, %v; want %d", n, err, len(keys))
		}
		jobs.queuedOnce(t, keys)
		if got := states(t, l, "r"); got[idempotency.StateQueued] != len(keys) || got[idempotency.StateDead] != 0 {
			t.Errorf("route r after the redrive: %v, want every row queued", got)
		}
		if got := states(t, l, "other"); got[idempotency.StateDead] != 3 {
			t.Errorf("route other after the redrive: %v, want its 3 rows dead still", got)
		}
	})
}

// Rows that die again while the redrive runs (the upstream still refusing
// them, with attempts to spare for none) are not taken again by its later
// batches: each row is queued once, and the redrive ends.
func TestRedriveTakesEachDeadRowOnce(t *testing.T) {
	onBothWithBatches(t, func() *batchJobs { return &batchJobs{dieAgain: true} }, func(t *testing.T, l *Ledger, jobs *batchJobs) {
		keys := deadRows(t, l, "r", 50)
		n, err := l.Redrive(context.Background(), "r", nil, time.Now().Add(time.Hour))
		if err != nil || n != len(keys) {
			t.Fatalf("redrive = %d, %v; want %d", n, err, len(keys))
		}
		jobs.queuedOnce(t, keys)
		if got := states(t, l, "r"); got[idempotency.StateDead] != len(keys) {
			t.Errorf("route r after the redrive: %v, want every row dead again", got)
		}
	})
}

// A batch that fails ends the redrive, which returns the count of the
// batches committed before it with the error; those stay queued, and a
// redrive again queues the rest, each row once in all.
func TestRedriveStoppedMidwayKeepsItsBatches(t *testing.T) {
	onBothWithBatches(t, func() *batchJobs { return &batchJobs{failAt: 3} }, func(t *testing.T, l *Ledger, jobs *batchJobs) {
		ctx := context.Background()
		keys := deadRows(t, l, "r", 50)
		n, err := l.Redrive(ctx, "r", nil, time.Now().Add(time.Hour))
		if err == nil || n != 2*redriveBatch {
			t.Fatalf("redrive with its third batch failing = %d, %v; want %d and the error", n, err, 2*redriveBatch)
		}
		if got := states(t, l, "r"); got[idempotency.StateQueued] != n || got[idempotency.StateDead] != len(keys)-n {
			t.Fatalf("route r after the failed redrive: %v, want %d queued, the rest dead", got, n)
		}
		rest, err := l.Redrive(ctx, "r", nil, time.Now().Add(time.Hour))
		if err != nil || rest != len(keys)-n {
			t.Fatalf("redrive again = %d, %v; want %d", rest, err, len(keys)-n)
		}
		jobs.queuedOnce(t, keys)
	})
}
