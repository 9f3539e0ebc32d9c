package redisscreen

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTB makes a Screen that the test closes.
func newTB(tb testing.TB, o Options) *Screen {
	tb.Helper()
	if o.MaxCachedBody == 0 {
		o.MaxCachedBody = idempotencytest.ScreenMaxCachedBody
	}
	s, err := New(o)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func openShared(t *testing.T) idempotency.Screen {
	addr, prefix := testenv.RedisPrefix(t)
	return newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
}

func TestConformance(t *testing.T) {
	idempotencytest.RunScreen(t, openShared)
}

// TestConformancePollOnly runs the suite with notifications off: the
// safety-net poll alone must keep Wait correct.
func TestConformancePollOnly(t *testing.T) {
	idempotencytest.RunScreen(t, func(t *testing.T) idempotency.Screen {
		addr, prefix := testenv.RedisPrefix(t)
		return newTB(t, Options{Addrs: []string{addr}, Prefix: prefix, PollOnly: true})
	})
}

func TestCluster(t *testing.T) {
	addrs, _ := idempotencytest.StartRedisCluster(t)
	t.Run("conformance", func(t *testing.T) {
		idempotencytest.RunScreen(t, func(t *testing.T) idempotency.Screen {
			return newTB(t, Options{Addrs: addrs, Prefix: testenv.Name("hst:") + ":"})
		})
	})
	t.Run("wait is notified across nodes", func(t *testing.T) {
		testClusterWaitAcrossNodes(t, addrs)
	})
	t.Run("one address of a cluster node is not ready", func(t *testing.T) {
		// One address makes a single-node client (SPEC §3: several
		// addresses = Redis Cluster). On a cluster node it answers PING,
		// but claims of keys on the other nodes fail with MOVED: readiness
		// must say so rather than report a screen that mostly fails.
		ctx := context.Background()
		one := newTB(t, Options{Addrs: addrs[:1], Prefix: testenv.Name("hst:") + ":"})
		if err := one.Ping(ctx); !errors.Is(err, ErrClusterNode) {
			t.Fatalf("Ping with one cluster node's address: %v, want ErrClusterNode", err)
		}
		all := newTB(t, Options{Addrs: addrs, Prefix: testenv.Name("hst:") + ":"})
		if err := all.Ping(ctx); err != nil {
			t.Fatalf("Ping with the cluster's addresses: %v", err)
		}
	})
}

// testClusterWaitAcrossNodes: the waiter's replica subscribes on one node;
// completions of keys living on the other nodes must reach it through the
// cluster bus. The poll is an hour, so only a notification can wake it.
func testClusterWaitAcrossNodes(t *testing.T, addrs []string) {
	prefix := testenv.Name("hst:") + ":"
	waiter := newTB(t, Options{Addrs: addrs, Prefix: prefix, WaitPollMin: time.Hour, WaitPollMax: time.Hour})
	writer := newTB(t, Options{Addrs: addrs, Prefix: prefix})
	cc := writer.Client().(*redis.ClusterClient)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	masterOf := func(key string) string {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%q): %v", key, err)
		}
		return c.Options().Addr
	}
	subNode := masterOf(waiter.channel)
	// From here on, only a message can wake a waiter.
	testenv.Eventually(t, 10*time.Second, "the subscription", func() bool { return waiter.hub.subscriptions.Load() > 0 })
	// one key on each node other than the subscription's
	refs := map[string]idempotency.Ref{}
	for i := 0; len(refs) < len(addrs)-1 && i < 1000; i++ {
		ref := idempotency.Ref{Route: "stripe", Key: testenv.Name("evt_")}
		if node := masterOf(writer.key(ref)); node != subNode {
			refs[node] = ref
		}
	}
	if len(refs) != len(addrs)-1 {
		t.Fatalf("found keys on %d other nodes, want %d", len(refs), len(addrs)-1)
	}
	for node, ref := range refs {
		t.Run(node, func(t *testing.T) {
			c, err := writer.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "a", Lease: time.Minute})
			if err != nil || c.Status != idempotency.Acquired {
				t.Fatalf("Claim = %v, %v", c.Status, err)
			}
			before := waiter.helds.Load()
			done := make(chan error, 1)
			go func() { done <- waiter.Wait(ctx, ref, "a") }()
			// The waiter has seen the key in flight and sleeps.
			testenv.Eventually(t, 5*time.Second, "the waiter to be held", func() bool { return waiter.helds.Load() > before })
			if err := writer.Complete(ctx, ref, "a", &idempotency.Entry{Response: idempotency.Response{Status: 200}}, time.Minute); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Wait on a key of %s not notified through the subscription on %s", node, subNode)
			}
		})
	}
}

var testRef = idempotency.Ref{Route: "stripe", Key: "evt_outage"}

// TestOutageAndRecovery: a dead Redis makes every call fail fast with
// ErrUnavailable; once it is back, the same Screen works again, its
// notifications included.
func TestOutageAndRecovery(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	const opTimeout = 300 * time.Millisecond
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "p:", OpTimeout: opTimeout,
		WaitPollMin: time.Hour, WaitPollMax: time.Hour})
	ctx := context.Background()
	if _, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "a", Lease: time.Minute}); err != nil {
		t.Fatalf("Claim before the outage: %v", err)
	}
	srv.Stop()

	ops := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"claim", func(ctx context.Context) error {
			_, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "b", Lease: time.Minute})
			return err
		}},
		{"complete", func(ctx context.Context) error {
			return s.Complete(ctx, testRef, "a", &idempotency.Entry{}, time.Minute)
		}},
		{"release", func(ctx context.Context) error { return s.Release(ctx, testRef, "a") }},
		{"forget", func(ctx context.Context) error { return s.Forget(ctx, testRef) }},
		{"wait", func(ctx context.Context) error { return s.Wait(ctx, testRef, "a") }},
		{"ping", func(ctx context.Context) error { return s.Ping(ctx) }},
	}
	for _, op := range ops {
		t.Run("down/"+op.name, func(t *testing.T) {
			start := time.Now()
			err := op.call(ctx)
			if el := time.Since(start); el > opTimeout+time.Second {
				t.Errorf("%s took %v with Redis down, OpTimeout %v", op.name, el, opTimeout)
			}
			if !errors.Is(err, idempotency.ErrUnavailable) {
				t.Fatalf("%s with Redis down = %v, want ErrUnavailable", op.name, err)
			}
		})
	}

	subs := s.hub.subscriptions.Load()
	srv.Start()
	var err error
	testenv.Eventually(t, 10*time.Second, "a claim to succeed after the restart", func() bool {
		_, err = s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "a", Lease: time.Minute})
		return err == nil
	})
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after the restart: %v", err)
	}
	// The subscription is back too: with an hour's poll only a
	// notification wakes this waiter.
	testenv.Eventually(t, 10*time.Second, "the resubscription", func() bool { return s.hub.subscriptions.Load() > subs })
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, testRef, "a") }()
	testenv.Eventually(t, 5*time.Second, "one waiter on the key", func() bool { return s.hub.count(s.key(testRef)) == 1 })
	if err := s.Release(ctx, testRef, "a"); err != nil {
		t.Fatalf("Release after the restart: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after the restart: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait not woken after the restart")
	}
}

// TestHungRedis: a server that accepts and never answers costs a call
// OpTimeout, not a hung delivery.
func TestHungRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	const opTimeout = 200 * time.Millisecond
	s := newTB(t, Options{Addrs: []string{l.Addr().String()}, OpTimeout: opTimeout})
	for range 3 {
		start := time.Now()
		_, err := s.Claim(context.Background(), idempotency.ClaimRequest{Ref: testRef, Owner: "a", Lease: time.Minute})
		if el := time.Since(start); el > opTimeout+time.Second {
			t.Errorf("Claim took %v against a hung Redis, OpTimeout %v", el, opTimeout)
		}
		if !errors.Is(err, idempotency.ErrUnavailable) {
			t.Fatalf("Claim against a hung Redis = %v, want ErrUnavailable", err)
		}
	}
}

// TestStoreLosesEntries: the screen is forgetful by design (FLUSHALL,
// restart, script cache flush); what is gone is simply claimable again.
func TestStoreLosesEntries(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	cases := []struct {
		name string
		lose func(ctx context.Context) error
		want idempotency.ClaimStatus
	}{
		{"flushall", func(ctx context.Context) error { return admin.FlushAll(ctx).Err() }, idempotency.Acquired},
		{"script flush", func(ctx context.Context) error { return admin.ScriptFlush(ctx).Err() }, idempotency.Done},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: testenv.Name("p") + ":"})
			e := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}}
			if err := s.Complete(ctx, testRef, "a", e, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := c.lose(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "b", Lease: time.Minute})
			if err != nil || got.Status != c.want {
				t.Fatalf("Claim after %s = %v, %v; want %v", c.name, got.Status, err, c.want)
			}
		})
	}
}

// TestEntryLayout pins what operators see with redis-cli, and the expiry
// windows: two leases for a claim, ttl for a done entry.
func TestEntryLayout(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx := context.Background()
	ref := idempotency.Ref{Route: "stripe", Key: "evt_1"}
	key := prefix + "stripe:evt_1"
	if _, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "own", Fingerprint: []byte{1, 2}, Lease: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	h, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["s"] != "f" || h["o"] != "own" || h["f"] != "\x01\x02" || h["u"] == "" {
		t.Fatalf("in-flight hash = %q", h)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 10*time.Second || ttl > 20*time.Second {
		t.Fatalf("in-flight PTTL = %v, want (10s, 20s]", ttl)
	}
	if err := s.Complete(ctx, ref, "own", &idempotency.Entry{Response: idempotency.Response{Status: 200}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	h = c.HGetAll(ctx, key).Val()
	if h["s"] != "d" || h["o"] != "" || h["e"] == "" {
		t.Fatalf("done hash = %q", h)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("done PTTL = %v, want about 1h", ttl)
	}
}

// TestCorruptEntry: an entry the screen cannot read is no answer at all:
// ErrUnavailable, so the state machine asks the ledger.
func TestCorruptEntry(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx := context.Background()
	if err := s.Client().HSet(ctx, prefix+"stripe:evt_1", "s", "d", "f", "", "e", "\x09garbage").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "stripe", Key: "evt_1"}, Owner: "a", Lease: time.Second})
	if !errors.Is(err, idempotency.ErrUnavailable) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Claim of a corrupt entry = %v, want ErrUnavailable (corrupt)", err)
	}
}

func TestNewRejects(t *testing.T) {
	cases := []struct {
		name string
		o    Options
	}{
		{"no address", Options{}},
		{"cluster with db", Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, DB: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if s, err := New(c.o); err == nil {
				s.Close()
				t.Fatal("no error")
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
	}{
		{"zero lease", func() error {
			_, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "a"})
			return err
		}},
		{"zero ttl", func() error { return s.Complete(ctx, testRef, "a", &idempotency.Entry{}, 0) }},
		{"nil entry", func() error { return s.Complete(ctx, testRef, "a", nil, time.Minute) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil || errors.Is(err, idempotency.ErrUnavailable) {
				t.Fatalf("error = %v, want a non-unavailable error", err)
			}
		})
	}
}

func TestNewWithClientLeavesClientOpen(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s := NewWithClient(c, Options{Prefix: prefix})
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("client closed by Screen.Close: %v", err)
	}
}

// TestPublishesOnlyWhenWaitedFor: ending an in-flight entry nobody waits
// for sends no message (a message per delivery would cost every replica a
// wake-up for nobody); once a waiter has looked at the entry, completing
// or releasing it is published, and the waiter wakes from the message
// alone (its poll is an hour).
func TestPublishesOnlyWhenWaitedFor(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix, WaitPollMin: time.Hour, WaitPollMax: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := s.Client().Subscribe(ctx, s.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	msgs := sub.Channel()
	testenv.Eventually(t, 10*time.Second, "the subscription", func() bool { return s.hub.subscriptions.Load() > 0 })
	entry := &idempotency.Entry{Response: idempotency.Response{Status: 200}}
	claim := func(ref idempotency.Ref) {
		t.Helper()
		if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "a", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("Claim(%s) = %v, %v", ref.Key, c.Status, err)
		}
	}

	// Nobody waits: complete and release publish nothing.
	quiet := []idempotency.Ref{{Route: "r", Key: "quiet-complete"}, {Route: "r", Key: "quiet-release"}}
	claim(quiet[0])
	claim(quiet[1])
	if err := s.Complete(ctx, quiet[0], "a", entry, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, quiet[1], "a"); err != nil {
		t.Fatal(err)
	}
	// A published marker proves the subscription delivers: anything
	// published before it would arrive first.
	marker := prefix + "marker"
	if err := s.Client().Publish(ctx, s.channel, marker).Err(); err != nil {
		t.Fatal(err)
	}
	if m := <-msgs; m.Payload != marker {
		t.Fatalf("message %q for an entry nobody waited for", m.Payload)
	}

	// A waiter is there: each end of the entry is published and wakes it.
	for _, end := range []string{"complete", "release"} {
		ref := idempotency.Ref{Route: "r", Key: "waited-" + end}
		claim(ref)
		before := s.helds.Load()
		done := make(chan error, 1)
		go func() { done <- s.Wait(ctx, ref, "a") }()
		testenv.Eventually(t, 5*time.Second, "the waiter to be held", func() bool { return s.helds.Load() > before })
		var err error
		if end == "complete" {
			err = s.Complete(ctx, ref, "a", entry, time.Minute)
		} else {
			err = s.Release(ctx, ref, "a")
		}
		if err != nil {
			t.Fatal(err)
		}
		if m := <-msgs; m.Payload != s.key(ref) {
			t.Fatalf("%s: message %q, want %q", end, m.Payload, s.key(ref))
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: Wait: %v", end, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waiter not woken by the message", end)
		}
	}
}

// A release can overtake its own claim (the claim's reply was lost and the
// delivery was settled through the ledger while the claim was still on its
// way). The claim landing afterwards must not hold the key: repeats at
// every replica would wait or get 409 for its whole lease. The release
// leaves a tombstone that refuses that owner's claim and no other, and
// expires.
func TestReleaseOvertakenByItsClaim(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx := context.Background()
	ref := idempotency.Ref{Route: "stripe", Key: "evt_overtaken"}
	claim := func(owner string) (idempotency.Claim, error) {
		return s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: owner, Lease: time.Minute})
	}
	if err := s.Release(ctx, ref, "lost"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("release of a claim that has not landed: %v, want ErrNotOwner", err)
	}
	if c, err := claim("lost"); err == nil {
		t.Fatalf("the released owner's late claim = %v, want refused", c.Status)
	}
	if c, err := claim("next"); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("the next delivery's claim = %v, %v; want acquired (the late claim must hold nothing)", c.Status, err)
	}
	if err := s.Complete(ctx, ref, "next", &idempotency.Entry{Response: idempotency.Response{Status: 200}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, err := claim("lost"); err != nil || c.Status != idempotency.Done {
		t.Fatalf("claim after the record = %v, %v; want done", c.Status, err)
	}

	// The tombstone is short-lived and refuses nobody else.
	other := idempotency.Ref{Route: "stripe", Key: "evt_tomb"}
	if err := s.Release(ctx, other, "lost"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatal(err)
	}
	if ttl := s.Client().PTTL(ctx, prefix+"stripe:evt_tomb").Val(); ttl <= 0 || ttl > releaseTombstone {
		t.Fatalf("tombstone PTTL = %v, want (0, %v]", ttl, releaseTombstone)
	}
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: other, Owner: "someone", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("another owner's claim on a tombstone = %v, %v; want acquired", c.Status, err)
	}
}

// TestClaimRetriedByItsOwnerIsAcquired: a claim whose reply was lost may
// be sent again with the same owner (go-redis resends a command on a
// broken connection); the owner's own in-flight entry is its claim, not
// another delivery's, or the delivery would wait on itself and every
// repeat after it would wait out the lease.
func TestClaimRetriedByItsOwnerIsAcquired(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "retried"}, Owner: "a", Lease: time.Minute}
	for i := range 2 {
		if c, err := s.Claim(ctx, req); err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("Claim #%d by its owner = %v, %v; want Acquired", i+1, c.Status, err)
		}
	}
	other := req
	other.Owner = "b"
	if c, err := s.Claim(ctx, other); err != nil || c.Status != idempotency.InFlight || c.Owner != "a" {
		t.Fatalf("Claim by another owner = %v (owner %q), %v; want InFlight held by a", c.Status, c.Owner, err)
	}
}

// TestForgetWakesAWaiter: an operator's delete of an in-flight key is
// published, so a repeat waiting on it claims again at once rather than
// at its next poll (an hour here).
func TestForgetWakesAWaiter(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix, WaitPollMin: time.Hour, WaitPollMax: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Eventually(t, 10*time.Second, "the subscription", func() bool { return s.hub.subscriptions.Load() > 0 })
	ref := idempotency.Ref{Route: "r", Key: "forgotten"}
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "a", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("Claim = %v, %v", c.Status, err)
	}
	before := s.helds.Load()
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, ref, "a") }()
	testenv.Eventually(t, 5*time.Second, "the waiter to be held", func() bool { return s.helds.Load() > before })
	if err := s.Forget(ctx, ref); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the forget")
	}
}

// TestResubscriptionWakesWaiters: what is published while the
// subscription is down is lost, so a (re)subscription makes every waiter
// look again. Here the entry vanishes without a message (as one lost to a
// broken subscription would), then the subscription is cut: with an
// hour's poll only the resubscription can wake the waiter.
func TestResubscriptionWakesWaiters(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "p:", WaitPollMin: time.Hour, WaitPollMax: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Eventually(t, 10*time.Second, "the subscription", func() bool { return s.hub.subscriptions.Load() > 0 })
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: "a", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("Claim = %v, %v", c.Status, err)
	}
	before := s.helds.Load()
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, testRef, "a") }()
	testenv.Eventually(t, 5*time.Second, "the waiter to be held", func() bool { return s.helds.Load() > before })
	if err := s.Client().Del(ctx, s.key(testRef)).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	subs := s.hub.subscriptions.Load()
	if err := s.Client().ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the resubscription", func() bool { return s.hub.subscriptions.Load() > subs })
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the resubscription")
	}
}

// TestForgetTombstoneOutlivesALateRefill: an operator's delete refuses
// Completes for ForgetTombstone, not just for the next instant: a refill
// that read the record before the delete may reach Redis a while later
// (an operation timeout), and must not put the deleted record back.
func TestForgetTombstoneOutlivesALateRefill(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := idempotency.Ref{Route: "r", Key: "deleted"}
	entry := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("before the delete")}}
	if err := s.Complete(ctx, ref, "a", entry, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, ref); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if ttl := s.Client().PTTL(ctx, s.key(ref)).Val(); ttl < idempotency.ForgetTombstone-5*time.Second {
		t.Errorf("tombstone PTTL %v, want about %v", ttl, idempotency.ForgetTombstone)
	}
	time.Sleep(200 * time.Millisecond) // the refill is late
	refill := *entry
	refill.Refill = true
	if err := s.Complete(ctx, ref, "stale", &refill, time.Minute); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "b", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("Claim after a late refill of a deleted record = %v, %v; want Acquired", c.Status, err)
	}
}

// TestReleaseTombstoneOutlivesALateClaim: a claim overtaken by its own
// release may land a good while after it (a command on a connection the
// client gave up on); it is refused then too, or it would hold the key
// for a lease that nobody ends.
func TestReleaseTombstoneOutlivesALateClaim(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s := newTB(t, Options{Addrs: []string{addr}, Prefix: prefix})
	ctx := context.Background()
	ref := idempotency.Ref{Route: "stripe", Key: "evt_late"}
	if err := s.Release(ctx, ref, "lost"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("release of a claim that has not landed: %v, want ErrNotOwner", err)
	}
	time.Sleep(200 * time.Millisecond) // the claim is late
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "lost", Lease: time.Minute}); err == nil {
		t.Fatalf("the released owner's claim 200ms later = %v, want refused", c.Status)
	}
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "next", Lease: time.Minute}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("the next delivery's claim = %v, %v; want acquired", c.Status, err)
	}
}
