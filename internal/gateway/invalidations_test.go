package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/freeport"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
)

// Start-up waits for the subscription to deletes (so that its first
// cache clear comes before the first delivery), but not for ever: a
// replica whose Redis is unreachable when it starts still starts within
// the bound and serves from the ledger (screen.on_unavailable: store).
func TestStartsWithoutRedisWithinTheSubscriptionBound(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfg.Screen.LocalCache = 1 << 20
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Screen.Redis.Addrs = []string{fmt.Sprintf("127.0.0.1:%d", port)} // nothing listens
	start := time.Now()
	g := startGateway(t, cfg)
	if took := time.Since(start); took > redisscreen.SubscribeWait+3*time.Second {
		t.Fatalf("start-up took %v with Redis unreachable, want about %v", took, redisscreen.SubscribeWait)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_no_redis"}`), 200, "forwarded")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_no_redis"}`), 200, "replayed")
	if n := up.count("evt_no_redis"); n != 1 {
		t.Fatalf("upstream received evt_no_redis %d times, want 1", n)
	}
}
