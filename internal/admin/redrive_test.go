package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A redrive of every dead record of a route queues them a batch a
// transaction, however many there are, and answers how many it queued in
// all: every one, each with one delivery job.
func TestRedriveOfEveryDeadRecordGoesInBatches(t *testing.T) {
	const dead, batch = 30, 4
	ctx := context.Background()
	pg, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: testenv.Postgres(t), RedriveBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := queue.Migrate(ctx, pg); err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(queue.Options{Driver: queue.DriverPostgres, Ledger: pg, Replica: "a"}) // never started: its jobs wait
	if err != nil {
		t.Fatal(err)
	}
	pg.UseJobs(q)
	db, err := pg.DB()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO hookstamp_records (route, "key", state, status, headers, body_omitted, trace_id, span_id, source, `+
		`created_at, completed_at, expires_at, request_method, request_path, request_headers, request_body, acked) `+
		`SELECT 'pay', 'dead-' || g, 'dead', 0, '{}', false, '', '', '', now() - interval '1 hour' + (g / 3) * interval '1 ms', now(), `+
		`now() + interval '1 hour', 'POST', '/pay', '{}', '{}', true FROM generate_series(1, $1::int) g`, dead); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Redeliver, o.Stores = pg, map[string]time.Duration{"pay": time.Hour} })

	r := e.do(t, http.MethodPost, "/admin/routes/pay/dead/redrive", token, "")
	if want := fmt.Sprintf(`{"requeued":%d}`, dead); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != want {
		t.Fatalf("redrive all = %d %s, want 200 %s", r.status, r.body, want)
	}
	var keys, jobs, queued, most int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT args->>'key'), COUNT(*) FROM river_job`).Scan(&keys, &jobs); err != nil {
		t.Fatal(err)
	}
	if keys != dead || jobs != dead {
		t.Errorf("%d jobs for %d keys, want one for each of %d", jobs, keys, dead)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM hookstamp_records WHERE route = 'pay' AND state = 'queued'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != dead {
		t.Errorf("%d records queued, want %d", queued, dead)
	}
	// Rows a transaction inserts share its id (xmin).
	if err := db.QueryRowContext(ctx, `SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM river_job GROUP BY xmin::text) t`).Scan(&most); err != nil {
		t.Fatal(err)
	}
	if most > batch {
		t.Errorf("one transaction queued %d jobs, want at most %d", most, batch)
	}
}

// partlyRedriven is a ledger whose redrive fails after queuing some, as
// one whose later batch timed out; it notes the deadline it was given.
type partlyRedriven struct {
	Redeliverer
	queued   int
	deadline time.Time
}

func (p *partlyRedriven) Redrive(ctx context.Context, _ string, _ []string, _ time.Time) (int, error) {
	p.deadline, _ = ctx.Deadline()
	return p.queued, fmt.Errorf("redrive %q: %w: %w", "pay", idempotency.ErrUnavailable, context.DeadlineExceeded)
}

// A redrive that fails midway says how many it queued before, which stay
// queued, and that a retry queues the rest; one that failed before
// queuing any says only that the ledger did not answer. Either is
// bounded, so that its answer is written before the listener's write
// timeout cuts it.
func TestRedriveFailedMidwaySaysHowManyItQueued(t *testing.T) {
	for _, c := range []struct {
		queued int
		want   string
	}{
		{8, "8 dead deliveries were queued again before it failed, and stay queued; a retry queues the rest"},
		{0, "the ledger did not answer; retry later"},
	} {
		t.Run(fmt.Sprint(c.queued), func(t *testing.T) {
			p := &partlyRedriven{queued: c.queued}
			e := newEnv(t, func(o *Options) { o.Redeliver, o.Stores = p, map[string]time.Duration{"pay": time.Hour} })
			start := time.Now()
			r := e.do(t, http.MethodPost, "/admin/routes/pay/dead/redrive", token, "")
			wantProblem(t, r, http.StatusServiceUnavailable)
			if doc := decode[problemDoc](t, r); !strings.HasSuffix(doc.Detail, c.want) {
				t.Errorf("detail %q, want it to end %q", doc.Detail, c.want)
			}
			if r.header.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			switch {
			case p.deadline.IsZero():
				t.Errorf("the redrive has no deadline, want one within the write timeout (%v)", writeTimeout)
			case p.deadline.After(start.Add(writeTimeout)):
				t.Errorf("the redrive's deadline is %v from its start, want one within the write timeout (%v)", p.deadline.Sub(start), writeTimeout)
			}
		})
	}
}
