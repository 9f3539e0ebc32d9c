package gateway

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A queued delivery was acknowledged to its provider, which will not send
// it again: the admin API refuses to delete it, and the queue still
// delivers it. Deleted with ?discard=true, it is gone for good: its job
// ends without sending it.
func TestDeleteOfAQueuedDeliveryIsRefusedUnlessDiscarded(t *testing.T) {
	up := newUpstream(t)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	took := map[string]int{}
	up.setReply(func(w http.ResponseWriter, r *http.Request, _ int) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		took[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	})
	cfg := gwConfig(t, up.URL, dbPath(t), `    delivery: async
    async:
      max_attempts: 1000
      backoff: {initial: 100ms, max: 100ms}
`, "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	for _, key := range []string{"q_1", "q_2"} {
		wantOutcome(t, send(t, g, "/hooks", `{"id":"`+key+`"}`), http.StatusAccepted, "accepted")
		testenv.Eventually(t, 10*time.Second, "a failed attempt of "+key, func() bool { return up.count(key) > 0 })
	}

	if status, body := adminCall(t, g, http.MethodDelete, "/admin/routes/hooks/records/q_1", ""); status != http.StatusConflict {
		t.Fatalf("DELETE of a queued delivery = %d %s, want 409", status, body)
	}
	if rec := lookup(t, g, "hooks", "q_1"); rec == nil || rec.State != idempotency.StateQueued {
		t.Fatalf("after the refused DELETE q_1 is %+v, want queued", rec)
	}
	if status, body := adminCall(t, g, http.MethodDelete, "/admin/routes/hooks/records/q_2?discard=true", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE ?discard=true = %d %s, want 204", status, body)
	}
	if _, err := g.Ledger().Lookup(t0ctx, idempotency.Ref{Route: "hooks", Key: "q_2"}); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("after the discard q_2's record: %v, want none", err)
	}

	down.Store(false)
	waitState(t, g, "q_1", idempotency.StateDone)
	db, _ := g.Ledger().DB()
	testenv.Eventually(t, 10*time.Second, "every delivery job to end", func() bool {
		var n int
		err := db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&n)
		return err == nil && n == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if took["q_1"] != 1 || took["q_2"] != 0 {
		t.Fatalf("the upstream took q_1 %d times and q_2 %d times, want once and never", took["q_1"], took["q_2"])
	}
}
