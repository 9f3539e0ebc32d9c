package idempotencytest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// StartRedisCluster starts a real Redis Cluster of three masters without
// replicas on free loopback ports, waits until every node reports
// cluster_state:ok, and returns the nodes' addresses. The servers are
// stopped when the test ends; any of them may be stopped and started again
// through the returned servers.
func StartRedisCluster(tb testing.TB) ([]string, []*testenv.RedisServer) {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redis-cli not on PATH: %v", err)
	}
	var (
		addrs   []string
		servers []*testenv.RedisServer
	)
	for i := range 3 {
		conf := filepath.Join(tb.TempDir(), "nodes-"+strconv.Itoa(i)+".conf")
		// The bus port is chosen too: port+10000, the default, may be
		// taken or beyond 65535 for an ephemeral port.
		s := testenv.StartRedisServer(tb,
			"--cluster-enabled", "yes",
			"--cluster-config-file", conf,
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(testenv.FreePort(tb)),
		)
		addrs = append(addrs, s.Addr)
		servers = append(servers, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create %v: %v\n%s", addrs, err, out)
	}
	for _, addr := range addrs {
		screenClusterWaitOK(tb, addr, len(addrs))
	}
	return addrs, servers
}

// screenClusterWaitOK polls CLUSTER INFO on addr until the node sees every slot
// assigned, every node known and the cluster ok.
func screenClusterWaitOK(tb testing.TB, addr string, nodes int) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	var info string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, _ = c.ClusterInfo(ctx).Result()
		cancel()
		if strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, "cluster_slots_ok:16384") &&
			strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(nodes)+"\r") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("Redis Cluster node %s not ok after 30s:\n%s", addr, info)
}
