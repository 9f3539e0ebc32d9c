package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// asyncReplicas starts n gateways on the cluster with the async route
// "hooks".
func (c cluster) asyncReplicas(tb testing.TB, n int, upstreamURL string) []*Gateway {
	tb.Helper()
	gws := make([]*Gateway, n)
	for i := range gws {
		gws[i] = startGatewayWith(tb, c.asyncConfig(tb, upstreamURL, "store"), asyncOptions(tb))
	}
	return gws
}

// asyncConfig is replicaConfig with the route "hooks" async, retrying
// quickly.
func (c cluster) asyncConfig(tb testing.TB, upstreamURL, onScreenDown string) *config.Config {
	tb.Helper()
	cfg := c.replicaConfig(tb, upstreamURL, onScreenDown)
	cfg.Routes[0].Delivery = "async"
	cfg.Routes[0].Async.MaxAttempts = 1000
	cfg.Routes[0].Async.Backoff.Initial = 5 * time.Millisecond
	cfg.Routes[0].Async.Backoff.Max = 100 * time.Millisecond
	cfg.Routes[0].Async.Concurrency = 16
	return cfg
}

func TestAsyncReplicasDeliverEachEventOnceThroughAnOutage(t *testing.T) {
	c := sharedCluster(t)
	up := newUpstream(t)
	var down atomic.Bool
	var mu sync.Mutex
	finals := map[string]int{} // 200s answered per key
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		k := r.Header.Get("Idempotency-Key")
		mu.Lock()
		finals[k]++
		mu.Unlock()
		fmt.Fprintf(w, `{"key":%q}`, k)
	})
	gws := c.asyncReplicas(t, 3, up.URL)
	const events, copies = 1000, 2
	key := func(k int) string { return fmt.Sprintf("evt_%04d", k) }
	down.Store(true)
	replies := race(t, events*copies, func(i int) reply {
		return send(t, gws[i%len(gws)], "/hooks", fmt.Sprintf(`{"id":%q}`, key(i%events)))
	})
	for i, r := range replies {
		// 2 000 copies at once on a loaded machine can outlast the
		// ledger's operation timeout or a repeat's wait_timeout: a 503 or
		// 409 acknowledges nothing, and the test sends that copy again, as
		// a provider would.
		for r.status == http.StatusServiceUnavailable || r.status == http.StatusConflict {
			r = send(t, gws[i%len(gws)], "/hooks", fmt.Sprintf(`{"id":%q}`, key(i%events)))
		}
		if r.status != http.StatusAccepted || (r.outcome() != "accepted" && r.outcome() != "replayed") {
			t.Fatalf("copy %d of %s: %d %q %s", i/events, key(i%events), r.status, r.outcome(), r.body)
		}
	}
	testenv.Eventually(t, 30*time.Second, "attempts to fail while the upstream is down", func() bool { return up.total.Load() > events })
	down.Store(false)
	testenv.Eventually(t, 120*time.Second, "every event delivered", func() bool {
		stats, err := gws[0].Ledger().QueueStats(t0ctx)
		return err == nil && stats["hooks"].Queued == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for k := range events {
		if got := finals[key(k)]; got != 1 {
			t.Errorf("%s reached the upstream with a final answer %d times, want 1", key(k), got)
		}
		rec := lookup(t, gws[k%3], "hooks", key(k))
		if rec.State != idempotency.StateDone || string(rec.Body) != fmt.Sprintf(`{"key":%q}`, key(k)) {
			t.Fatalf("%s: %s %q", key(k), rec.State, rec.Body)
		}
	}
}
