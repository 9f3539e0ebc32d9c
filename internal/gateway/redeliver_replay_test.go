package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// fixedUpstream answers its first request 400 {"copy":1}, as an
// application with a bug would, and every later one 200 {"copy":n}.
func fixedUpstream(tb testing.TB) *upstream {
	up := newUpstream(tb)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.WriteHeader(http.StatusBadRequest)
		}
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	return up
}

// redeliverFixed delivers evt_fix through a, its repeats through a and b
// replayed with the upstream's 400, redelivers it through a's admin API
// once the upstream is fixed, and checks that b's repeats, then a's, are
// replayed the new 200 and that the upstream got the event twice.
func redeliverFixed(t *testing.T, up *upstream, a, b *Gateway) {
	t.Helper()
	const body = `{"id":"evt_fix"}`
	first := send(t, a, "/hooks", body)
	wantOutcome(t, first, http.StatusBadRequest, "forwarded")
	for _, g := range []*Gateway{b, a, b} {
		r := send(t, g, "/hooks", body)
		wantOutcome(t, r, http.StatusBadRequest, "replayed")
		sameReply(t, r, first)
	}

	if status, out := adminPost(t, a, "/admin/routes/hooks/records/evt_fix/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s, want 202", status, out)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivery's answer recorded", func() bool {
		return string(lookup(t, a, "hooks", "evt_fix").Body) == `{"copy":2}`
	})
	// The replica that settled the redelivery drops the old answer right
	// after the commit, and the other replicas' caches a message later.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := send(t, b, "/hooks", body)
		if r.status == http.StatusOK {
			break
		}
		wantOutcome(t, r, http.StatusBadRequest, "replayed")
		if time.Now().After(deadline) {
			t.Fatalf("repeat after the redelivery still got %d %q %s; the ledger holds %s",
				r.status, r.outcome(), r.body, lookup(t, a, "hooks", "evt_fix").Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, g := range []*Gateway{b, a, b, a} {
		r := send(t, g, "/hooks", body)
		wantOutcome(t, r, http.StatusOK, "replayed")
		if string(r.body) != `{"copy":2}` {
			t.Fatalf("repeat %d after the redelivery got %s, want the new answer", i, r.body)
		}
	}
	if n := up.count("evt_fix"); n != 2 {
		t.Fatalf("upstream got evt_fix %d times, want 2 (the first forward and the redelivery)", n)
	}
}

// After a redelivery replaces a done record's answer, repeats replay the
// new answer, not the one the memory screen or the local cache kept (the
// embedded default: SQLite, memory screen, local cache).
func TestRedeliveredAnswerIsReplayedEmbedded(t *testing.T) {
	up := fixedUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "    record: {request: true}\n", "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	if cfg.Screen.Driver != config.ScreenMemory || cfg.Screen.LocalCache == 0 {
		t.Fatalf("screen %q, local_cache %d: not the embedded default", cfg.Screen.Driver, cfg.Screen.LocalCache)
	}
	g := startGatewayWith(t, cfg, asyncOptions(t))
	redeliverFixed(t, up, g, g)
}

// With a Redis screen shared by two replicas, a repeat sent to the replica
// that did not take the redelivery gets the new answer, with the local
// cache on or off, and the screen holds the new answer again.
func TestRedeliveredAnswerIsReplayedByOtherReplicas(t *testing.T) {
	for _, cache := range []config.Size{0, config.MiB} {
		t.Run(fmt.Sprintf("local_cache %d", cache), func(t *testing.T) {
			c := sharedCluster(t)
			up := fixedUpstream(t)
			start := func() *Gateway {
				cfg := c.replicaConfig(t, up.URL, "store")
				cfg.Routes[0].Record.Request = true
				cfg.Screen.LocalCache = cache
				cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
				return startGatewayWith(t, cfg, asyncOptions(t))
			}
			a, b := start(), start()
			redeliverFixed(t, up, a, b)

			rc := c.redisClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			v, err := rc.HMGet(ctx, c.prefix+"hooks:evt_fix", "s", "e").Result()
			if err != nil {
				t.Fatal(err)
			}
			if s, e := fmt.Sprint(v[0]), fmt.Sprint(v[1]); s != "d" || !strings.HasSuffix(e, `{"copy":2}`) {
				t.Fatalf("screen entry: state %q, entry %q; want done with the new answer", s, e)
			}
		})
	}
}
