package redisscreen

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A subscription whose connection hangs — a partition resets nothing, so
// go-redis sees no error and pings only fill the socket's buffer — would
// miss every DELETE for as long as the hang lasts, and the replica replay
// deleted records from its cache until they aged out. With no pong after
// a silent spell, the cache is cleared and the subscription made anew;
// once the network is back, invalidations arrive again.
func TestInvalidationsRecoverFromAHungSubscription(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	proxy := testenv.StartFaultProxy(t, addr)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = direct.Close() })

	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: prefix + "invalidate", silence: 200 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = inv.Close() })

	ref := idempotency.Ref{Route: "hooks", Key: "evt_hung"}
	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	testenv.Eventually(t, 5*time.Second, "subscribed (the subscription's own Clear behind us)", func() bool { return !cache.Suspended() })
	cache.Put(ref, ent, cache.Ticket())
	if _, ok := cache.Get(ref); !ok {
		t.Fatal("the cache did not keep the entry")
	}

	proxy.Blackhole()
	if err := direct.Publish(context.Background(), inv.channel, ref.Route+"\x00"+ref.Key).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the hung subscription noticed and the cache cleared", func() bool {
		_, ok := cache.Get(ref)
		return !ok
	})

	// Back to normal: the cache keeps entries again once resubscribed, and
	// a delete published now reaches it.
	proxy.Restore()
	other := idempotency.Ref{Route: "hooks", Key: "evt_after"}
	testenv.Eventually(t, 5*time.Second, "resubscribed through the restored network, the cache on again", func() bool {
		cache.Put(other, ent, cache.Ticket())
		_, ok := cache.Get(other)
		return ok
	})
	if err := direct.Publish(context.Background(), inv.channel, other.Route+"\x00"+other.Key).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the delete after the recovery applied", func() bool {
		_, ok := cache.Get(other)
		return !ok
	})
}

// A subscription whose connection breaks is made again by go-redis on its
// own; deletes published meanwhile were lost to this replica, so the
// resubscription clears the cache (nothing cached before it can be
// trusted). Here the connection is cut and no delete is published at all:
// only the resubscription can take the entry out.
func TestInvalidationsClearTheCacheOnResubscription(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })

	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "p:invalidate", silence: 200 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = inv.Close() })

	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	testenv.Eventually(t, 5*time.Second, "subscribed", func() bool { return !cache.Suspended() })
	ref := idempotency.Ref{Route: "hooks", Key: "evt_cached"}
	cache.Put(ref, ent, cache.Ticket())
	if err := client.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "the resubscription cleared the cache", func() bool {
		_, ok := cache.Get(ref)
		return !ok
	})
}

// On a Redis Cluster the subscription lives on one node (the channel's
// slot's) while a PUBLISH goes to any node: plain (non-sharded) pub/sub
// carries it over the cluster bus, so a delete published at every node
// reaches the cache.
func TestInvalidationsOnRedisCluster(t *testing.T) {
	addrs, _ := idempotencytest.StartRedisCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "hs:invalidate"}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = inv.Close() })

	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	for _, addr := range addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		ref := idempotency.Ref{Route: "hooks", Key: "evt_via_" + addr}
		cache.Put(ref, ent, cache.Ticket())
		if _, ok := cache.Get(ref); !ok {
			t.Fatal("the cache did not keep the entry")
		}
		err := node.Publish(context.Background(), inv.channel, ref.Route+"\x00"+ref.Key).Err()
		_ = node.Close()
		if err != nil {
			t.Fatalf("PUBLISH at %s: %v", addr, err)
		}
		testenv.Eventually(t, 5*time.Second, "the delete published at "+addr+" applied", func() bool {
			_, ok := cache.Get(ref)
			return !ok
		})
	}
}

// A subscription that is merely quiet (no DELETE for a while) is pinged,
// answers, and keeps the cache on: only a lost subscription turns it off.
func TestQuietSubscriptionKeepsTheCache(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: prefix + "invalidate", silence: 100 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = inv.Close() })

	ref := idempotency.Ref{Route: "hooks", Key: "evt_quiet"}
	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	cache.Put(ref, ent, cache.Ticket())
	time.Sleep(time.Second) // several silent spells, each pinged
	if cache.Suspended() {
		t.Fatal("a quiet subscription turned the cache off")
	}
	if _, ok := cache.Get(ref); !ok {
		t.Fatal("a quiet subscription cleared the cache")
	}
}

// A replica whose Redis is unreachable when it starts has no subscription
// to deletes: its cache stays off (repeats read the screen or the ledger)
// until the subscription is made, then comes on.
func TestCacheOffUntilSubscribed(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	srv.Stop()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "p:invalidate", silence: 200 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler)) // returns after subscribeWait
	t.Cleanup(func() { _ = inv.Close() })

	ref := idempotency.Ref{Route: "hooks", Key: "evt_early"}
	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	cache.Put(ref, ent, cache.Ticket())
	if _, ok := cache.Get(ref); ok {
		t.Fatal("the cache kept an entry while no subscription could carry deletes")
	}
	srv.Start()
	testenv.Eventually(t, 10*time.Second, "subscribed, the cache on", func() bool {
		cache.Put(ref, ent, cache.Ticket())
		_, ok := cache.Get(ref)
		return ok
	})
}

// A Redis user without the invalidation channel (Redis 7 gives a new user
// none) has its subscription refused: the replica's cache stays off for as
// long as it runs (README, Redis ACL users). The operator is told why, once:
// the refusal was swallowed, and start-up said only "serving anyway", so a
// configured screen.local_cache was off with nothing in the log saying so.
func TestRefusedSubscriptionIsLogged(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Do(context.Background(), "ACL", "SETUSER", "default", "resetchannels").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	logs := &testenv.Buffer{}
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "p:invalidate", silence: 100 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { _ = inv.Close() })

	time.Sleep(time.Second) // several silent spells, each pinged
	if !cache.Suspended() {
		t.Fatal("the cache is on without a subscription to deletes")
	}
	var refused int
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "NOPERM") {
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("the refused subscription was logged %d times, want once with its cause; logs:\n%s", refused, logs.String())
	}
}

// A subscription Redis refuses (an ACL user without the channel) is not
// sent again by go-redis while its connection stays up. Once the operator
// grants the channel the cache must come back: it stayed off for as long
// as the connection lasted, every repeat a Redis round trip, with nothing
// in the log after the first refusal.
func TestCacheOnOnceARefusedSubscriptionIsAllowed(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Do(context.Background(), "ACL", "SETUSER", "default", "resetchannels").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	logs := &testenv.Buffer{}
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "p:invalidate", silence: 100 * time.Millisecond, pongWait: 300 * time.Millisecond}
	inv.Subscribe(cache, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { _ = inv.Close() })
	testenv.Eventually(t, 5*time.Second, "the subscription refused", func() bool { return strings.Contains(logs.String(), "NOPERM") })
	if !cache.Suspended() {
		t.Fatal("the cache is on without a subscription to deletes")
	}

	// The operator grants the channel (README, Redis ACL users).
	if err := client.Do(context.Background(), "ACL", "SETUSER", "default", "allchannels").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	ref := idempotency.Ref{Route: "hooks", Key: "evt_granted"}
	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	testenv.Eventually(t, 5*time.Second, "subscribed once allowed, the cache on", func() bool {
		cache.Put(ref, ent, cache.Ticket())
		return cache.Len() == 1
	})
	// And a delete published now reaches it.
	if err := client.Publish(context.Background(), inv.channel, ref.Route+"\x00"+ref.Key).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the delete applied", func() bool { return cache.Len() == 0 })
}

// The master holding the subscription dies and its replica takes over: the
// subscription must follow to the new master, and the cache come back on,
// as soon as the cluster is whole again. go-redis redialled the dead node
// until its periodic reload of the cluster's layout (a minute): the cache
// stayed off all that time, every repeat a Redis round trip.
func TestSubscriptionFollowsAClusterFailover(t *testing.T) {
	var (
		addrs   []string
		servers []*testenv.RedisServer
	)
	for i := range 6 {
		conf := filepath.Join(t.TempDir(), "nodes-"+strconv.Itoa(i)+".conf")
		s := testenv.StartRedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", conf,
			"--cluster-node-timeout", "1000", "--cluster-port", strconv.Itoa(testenv.FreePort(t)))
		addrs, servers = append(addrs, s.Addr), append(servers, s)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.Command("redis-cli", append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, a := range addrs {
		testenv.Eventually(t, 20*time.Second, "cluster ok at "+a, func() bool {
			info, _ := node(a).ClusterInfo(context.Background()).Result()
			return strings.Contains(info, "cluster_state:ok")
		})
	}
	// As the gateway makes it (its statistics and invalidations client).
	client, err := NewClient(Options{Addrs: addrs, OpTimeout: 2 * time.Second, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cache := idempotency.NewCache(1<<20, 1<<16, time.Hour)
	inv := &Invalidations{client: client, channel: "hs:invalidate"}
	inv.Subscribe(cache, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = inv.Close() })
	if cache.Suspended() {
		t.Fatal("not subscribed at start")
	}

	holder := -1
	for i, a := range addrs {
		if n, _ := node(a).PubSubNumSub(context.Background(), inv.channel).Result(); n[inv.channel] == 1 {
			holder = i
		}
	}
	if holder < 0 {
		t.Fatal("no node holds the subscription")
	}
	servers[holder].Stop()
	for i, a := range addrs { // its replica takes over
		role, _ := node(a).Do(context.Background(), "ROLE").Slice()
		if i != holder && len(role) > 2 && role[0] == "slave" && fmt.Sprint(role[2]) == strconv.Itoa(servers[holder].Port) {
			if err := node(a).Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
				t.Fatalf("CLUSTER FAILOVER TAKEOVER: %v", err)
			}
		}
	}
	testenv.Eventually(t, 5*time.Second, "the cache off", cache.Suspended)
	ref := idempotency.Ref{Route: "hooks", Key: "evt_failover"}
	ent := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	testenv.Eventually(t, 15*time.Second, "subscribed at the new master, the cache on", func() bool {
		cache.Put(ref, ent, cache.Ticket())
		return cache.Len() == 1
	})
	if err := client.Publish(context.Background(), inv.channel, ref.Route+"\x00"+ref.Key).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the delete applied", func() bool { return cache.Len() == 0 })
}
