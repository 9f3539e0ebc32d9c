package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// The sweeper deletes expired rows in batches while deliveries go on:
// expired rows go, live rows stay, and no delivery is disturbed.
func TestSweeperUnderTraffic(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfg.Store.SweepInterval = 50 * time.Millisecond
	g := startGateway(t, cfg)
	db := rawPostgres(t, c.dsn)

	// Traffic: new events and their repeats, until told to stop.
	delivered := make([]int, 2)
	stop := keepSending(len(delivered), func(w, i int) bool {
		body := fmt.Sprintf(`{"id":"evt_live_%d_%d"}`, w, i)
		if r := send(t, g, "/hooks", body); r.status != 200 || r.outcome() != "forwarded" {
			t.Errorf("%s: %d %q during sweeps, want 200 forwarded", body, r.status, r.outcome())
			return false
		}
		if r := send(t, g, "/hooks", body); r.status != 200 || r.outcome() != "replayed" {
			t.Errorf("repeat of %s: %d %q during sweeps, want 200 replayed", body, r.status, r.outcome())
			return false
		}
		delivered[w] = i + 1
		return true
	})

	// Expired rows (more than one sweep batch) and live ones, seeded
	// through the ledger while the traffic runs.
	const expired, live = 1500, 50
	ctx := context.Background()
	now := time.Now()
	for i := 0; i < expired+live; i++ {
		exp, key := now.Add(-time.Minute), fmt.Sprintf("old_%d", i)
		if i >= expired {
			exp, key = now.Add(time.Hour), fmt.Sprintf("kept_%d", i)
		}
		rec := &idempotency.Record{Ref: idempotency.Ref{Route: "hooks", Key: key}, State: idempotency.StateDone,
			Response: idempotency.Response{Status: 200, Body: []byte("{}")}, CreatedAt: now.Add(-time.Hour),
			CompletedAt: now.Add(-time.Hour), ExpiresAt: exp}
		if err := g.Ledger().Commit(ctx, rec, "seed", now); err != nil {
			t.Fatalf("seed %s: %v", key, err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "the sweeper to delete every expired row", func() bool {
		return countRows(t, db, "expires_at < ?", time.Now()) == 0
	})
	stop()

	if n := countRows(t, db, "key LIKE ?", "kept_%"); n != live {
		t.Fatalf("%d live seeded rows left, want %d", n, live)
	}
	total := delivered[0] + delivered[1]
	if total == 0 {
		t.Fatalf("no delivery completed while the sweeper ran")
	}
	if n := countRows(t, db, "key LIKE ? AND state = ?", "evt_live_%", "done"); n < int64(total) {
		t.Fatalf("%d delivered rows left, want at least %d: the sweeper deleted live records", n, total)
	}
	for w := range delivered {
		for i := 0; i < delivered[w]; i++ {
			if key := fmt.Sprintf("evt_live_%d_%d", w, i); up.count(key) != 1 {
				t.Fatalf("%s forwarded %d times", key, up.count(key))
			}
		}
	}
	t.Logf("%d deliveries (and their repeats) while %d expired rows were swept", total, expired)
}

// rawPostgres opens the test's schema directly, to count rows.
func rawPostgres(tb testing.TB, dsn string) *gorm.DB {
	tb.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatalf("open PostgreSQL: %v", err)
	}
	tb.Cleanup(func() {
		if sdb, err := db.DB(); err == nil {
			_ = sdb.Close()
		}
	})
	return db
}

func countRows(tb testing.TB, db *gorm.DB, where string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := db.Table("hookstamp_records").Where(where, args...).Count(&n).Error; err != nil {
		tb.Fatalf("count rows where %s: %v", where, err)
	}
	return n
}

// A record the screen still remembers without its body (larger than
// screen.max_cached_body) and the sweeper has deleted (record.retention
// shorter than screen.ttl): the ledger is reachable and holds nothing, so
// the delivery is claimed afresh and forwarded, not answered 503 until the
// screen's entry expires. The same holds after an operator's delete.
func TestSweptRecordTheScreenRemembersIsForwardedAgain(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		big := strings.Repeat("b", 2000)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) { fmt.Fprint(w, big) })
		g := startGateway(t, s.config(t, up.URL, "    retention: 1h\n", "screen:\n  max_cached_body: 100\n  local_cache: 0\n"))
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_swept"}`), 200, "forwarded")
		if r := send(t, g, "/hooks", `{"id":"evt_swept"}`); r.outcome() != "replayed" || string(r.body) != big {
			t.Fatalf("repeat before the sweep: %d %q", r.status, r.outcome())
		}
		if n, err := g.Ledger().SweepAll(context.Background(), time.Now().Add(2*time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("sweep: %d rows, %v", n, err)
		}
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_swept"}`), 200, "forwarded")
		if r := send(t, g, "/hooks", `{"id":"evt_swept"}`); r.outcome() != "replayed" || string(r.body) != big {
			t.Fatalf("repeat after the new forward: %d %q", r.status, r.outcome())
		}
		if n := up.count("evt_swept"); n != 2 {
			t.Fatalf("upstream received %d, want 2 (before and after the sweep)", n)
		}
		if rec := lookup(t, g, "hooks", "evt_swept"); rec.State != idempotency.StateDone {
			t.Fatalf("re-forwarded delivery not recorded: %+v", rec)
		}
	})
}
