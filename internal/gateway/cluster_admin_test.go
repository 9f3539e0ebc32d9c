package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// TestAdminOnRedisCluster: with screen.redis.addrs naming the nodes of a
// Redis Cluster, what the replicas share through Redis besides the screen
// works too: /readyz pings every master, /admin/stats sums both replicas'
// counts (buckets of a route share a slot), and a DELETE through one
// replica reaches the other's local cache (non-sharded pub/sub reaches
// every node).
func TestAdminOnRedisCluster(t *testing.T) {
	addrs, _ := idempotencytest.StartRedisCluster(t)
	dsn := testenv.Postgres(t)
	clusterSetup := func(tb testing.TB) *setup {
		s := newSetup(tb)
		s.store, s.dsn = "postgres", dsn
		s.screen, s.redis, s.pfx = "redis", addrs[0], "hs:"
		s.mutate = func(c *config.Config) { c.Screen.Redis.Addrs = addrs }
		return s
	}
	t.Run("readyz", func(t *testing.T) {
		g := clusterSetup(t).start(t)
		a := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/readyz", "")
		if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != `{"ledger":{"ok":true},"screen":{"ok":true}}` {
			t.Fatalf("/readyz %d %s", a.status, a.body)
		}
	})
	t.Run("stats", func(t *testing.T) {
		s := clusterSetup(t)
		a, b := s.start(t), s.start(t)
		script(t, s.upstream, a, b)
		wantStatsOn(t, normalized(t, scriptStats("cluster")), a, b)
	})
	t.Run("delete reaches other replicas", func(t *testing.T) {
		deleteReachesOtherReplicas(t, clusterSetup(t), "1MiB")
	})
}
