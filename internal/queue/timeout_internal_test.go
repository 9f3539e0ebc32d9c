package queue

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// River's leader never rescues a job whose timeout is negative: the job
// of a route this replica does not know, its replica dead, gets the
// longest timeout of the routes it knows, former ones included, which the
// runner's rescue covers too.
func TestTimeoutIsFiniteForEveryJob(t *testing.T) {
	l, err := sqlledger.Open(context.Background(), sqlledger.Options{Driver: DriverSQLite, DSN: t.TempDir() + "/ledger.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	q, err := New(Options{Driver: DriverSQLite, Ledger: l, RescueMargin: 10 * time.Second,
		Routes: []Route{{Name: "hooks", Timeout: 30 * time.Second, Concurrency: 1}},
		Former: []Route{{Name: "old", Timeout: 60 * time.Second, Concurrency: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{q: q}
	for route, want := range map[string]time.Duration{"hooks": 35 * time.Second, "old": 65 * time.Second, "gone": 65 * time.Second} {
		if got := w.Timeout(&river.Job[Args]{JobRow: &rivertype.JobRow{}, Args: Args{Route: route}}); got != want {
			t.Errorf("Timeout of a job of %q = %v, want %v", route, got, want)
		}
	}
	if got := q.cfg.RescueStuckJobsAfter; got != 70*time.Second {
		t.Errorf("RescueStuckJobsAfter = %v, want 70s", got)
	}
}
