package redisscreen

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// scriptRuns is how many scripts Redis has run (INFO commandstats).
func scriptRuns(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd+"calls="); ok {
				var k int
				_, _ = fmt.Sscanf(rest, "%d", &k)
				n += k
			}
		}
	}
	return n
}

func claimCall(s *Screen, key, owner string) *scriptCall {
	return &scriptCall{ctx: context.Background(), script: claimScript, keys: []string{s.key(idempotency.Ref{Route: "r", Key: key})},
		args: []any{s.channel, owner, "fp", millis(time.Minute)}, done: make(chan scriptResult, 1)}
}

// A batch's claims cost Redis one script run, not one each, and each
// caller still gets its own key's answer; a key whose script fails (it
// holds a string, not a hash) fails its own caller only.
func TestBatchedClaimsRunAsOneBundle(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "bundle:"})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	// Once, for Redis to cache the bundle's script (NOSCRIPT, then EVAL).
	warm := []*scriptCall{claimCall(s, "w1", "w"), claimCall(s, "w2", "w")}
	s.pipe.send(warm)
	for _, w := range warm {
		if r := <-w.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	var batch []*scriptCall
	for i := range 8 {
		batch = append(batch, claimCall(s, fmt.Sprint("k", i), fmt.Sprint("o", i)))
	}
	before := scriptRuns(t, c)
	s.pipe.send(batch)
	if runs := scriptRuns(t, c) - before; runs != 1 {
		t.Fatalf("8 batched claims ran %d scripts, want 1 bundle", runs)
	}
	for i, call := range batch {
		r := <-call.done
		cl, err := parseClaim(r.val.([]any))
		if r.err != nil || err != nil || cl.Status != idempotency.Acquired {
			t.Fatalf("claim %d: %v %v %v", i, cl.Status, r.err, err)
		}
		if o, _ := c.HGet(context.Background(), call.keys[0], "o").Result(); o != fmt.Sprint("o", i) {
			t.Fatalf("key %s holds owner %q, want o%d", call.keys[0], o, i)
		}
	}

	if err := c.Set(context.Background(), s.key(idempotency.Ref{Route: "r", Key: "str"}), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad, good := claimCall(s, "str", "ob"), claimCall(s, "fresh", "og")
	s.pipe.send([]*scriptCall{bad, good})
	if r := <-bad.done; r.err == nil {
		t.Fatalf("claim of a string key: %v, want an error", r.val)
	}
	r := <-good.done
	if r.err != nil {
		t.Fatalf("claim bundled with a failing key: %v", r.err)
	}
	if cl, err := parseClaim(r.val.([]any)); err != nil || cl.Status != idempotency.Acquired {
		t.Fatalf("claim bundled with a failing key: %v %v, want acquired", cl.Status, err)
	}
}

// A Cluster's keys lie in many slots, which one script may not touch: its
// batches are not bundled.
func TestClusterBatchesAreNotBundled(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	p := newPipeliner(cc, 1, 4, time.Second)
	defer p.close()
	if p.bundling {
		t.Fatal("a cluster client's pipeliner bundles")
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	q := newPipeliner(single, 1, 4, time.Second)
	defer q.close()
	if !q.bundling {
		t.Fatal("a single node's pipeliner does not bundle")
	}
}

// Peeks batched with each other run as one bundle, and each caller gets
// its own key's answer: nothing, a claim, or a record.
func TestBatchedPeeksRunAsOneBundle(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "bundle:"})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
	if _, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref("claimed"), Owner: "o1", Fingerprint: []byte("fp"), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, ref("done"), "o2", &idempotency.Entry{Response: idempotency.Response{Status: 201}, BodyCached: true, Fingerprint: []byte("fd")}, time.Minute); err != nil {
		t.Fatal(err)
	}
	peek := func(k string) *scriptCall {
		return &scriptCall{ctx: ctx, script: peekScript, keys: []string{s.key(ref(k))}, done: make(chan scriptResult, 1)}
	}
	s.pipe.send([]*scriptCall{peek("w1"), peek("w2")}) // Redis caches the bundle's script
	batch := []*scriptCall{peek("absent"), peek("claimed"), peek("done")}
	before := scriptRuns(t, c)
	s.pipe.send(batch)
	if runs := scriptRuns(t, c) - before; runs != 1 {
		t.Fatalf("3 batched peeks ran %d scripts, want 1 bundle", runs)
	}
	got := make([]string, len(batch))
	for i, call := range batch {
		r := <-call.done
		res, _ := r.val.([]any)
		if r.err != nil {
			t.Fatalf("peek %d: %v", i, r.err)
		}
		if len(res) == 0 {
			got[i] = "none"
			continue
		}
		cl, err := parseClaim(res)
		if err != nil {
			t.Fatalf("peek %d: %v", i, err)
		}
		got[i] = fmt.Sprintf("%v %s %s", cl.Status, cl.Owner, cl.Fingerprint)
	}
	want := []string{"none", fmt.Sprintf("%v o1 fp", idempotency.InFlight), fmt.Sprintf("%v  fd", idempotency.Done)}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("peeks = %q, want %q", got, want)
	}
}
