package gateway

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// The queue gauges count what waits from when it was last queued: a dead
// delivery redriven days after its intake is not a backlog of days, and
// a done record's redelivery waiting on its upstream is a delivery
// queued, though its record stays done (its repeats replay its answer).
func TestQueueGaugesDateARedriveAndCountARedelivery(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			queueGaugesDateARedrive(t, driver)
		})
	}
}

func queueGaugesDateARedrive(t *testing.T, driver string) {
	up := newUpstream(t)
	var mode atomic.Int32 // 0: 503, 1: 200, 2: no answer until the test ends
	gone := make(chan struct{})
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		switch mode.Load() {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			fmt.Fprint(w, "ok")
		default:
			<-gone
		}
	})
	cfg := gwConfig(t, up.URL, dbPath(t), `    delivery: async
    async:
      max_attempts: 1
`, "")
	cfg.Routes[0].Upstream.Timeout = time.Minute
	update := `UPDATE hookstamp_records SET created_at = ? WHERE route = 'hooks'`
	if driver == "postgres" {
		cfg.Store.Driver, cfg.Store.DSN = driver, testenv.Postgres(t)
		update = `UPDATE hookstamp_records SET created_at = $1 WHERE route = 'hooks'`
	}
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	t.Cleanup(func() { close(gone) }) // before the gateway's shutdown

	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_dead", idempotency.StateDead)
	mode.Store(1)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_done"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_done", idempotency.StateDone)

	// Both were acknowledged three days ago.
	db, err := g.Ledger().DB()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t0ctx, update, time.Now().Add(-72*time.Hour).UTC()); err != nil {
		t.Fatal(err)
	}
	mode.Store(2)
	if status, body := adminPost(t, g, "/admin/routes/hooks/dead/redrive", ""); status != http.StatusOK {
		t.Fatalf("redrive = %d %s", status, body)
	}
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_done/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s", status, body)
	}
	testenv.Eventually(t, 10*time.Second, "both attempts sent", func() bool { return up.count("evt_dead") == 2 && up.count("evt_done") == 2 })
	waitMetrics(t, g,
		`hookstamp_queue_depth{route="hooks",state="queued"} 2`,
		`hookstamp_queue_depth{route="hooks",state="dead"} 0`,
	)
	m := regexp.MustCompile(`(?m)^hookstamp_queue_oldest_seconds\{route="hooks"\} (\S+)$`).FindStringSubmatch(scrape(t, g))
	if m == nil {
		t.Fatal("no hookstamp_queue_oldest_seconds for the route")
	}
	if age, _ := strconv.ParseFloat(m[1], 64); age > 60 {
		t.Errorf("hookstamp_queue_oldest_seconds = %v s, want under a minute: both were queued again just now", age)
	}
}
