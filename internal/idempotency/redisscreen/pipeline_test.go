package redisscreen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A pipelined batch runs each script on its own: claims of distinct keys
// are all acquired, two claims of one key in the same pipeline see each
// other (one acquires, the other finds it in flight), and a complete in the
// batch lands. After Redis lost its script cache (SCRIPT FLUSH), the batch
// sends the scripts themselves.
func TestPipelinedBatchKeepsPerScriptResults(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "pipe:"})
	ctx := context.Background()
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("script cache flushed %v", flush), func(t *testing.T) {
			if flush {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				defer c.Close()
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			p := fmt.Sprint("f", flush, "-")
			claim := func(key, owner string) *scriptCall {
				return &scriptCall{ctx: ctx, script: claimScript, keys: []string{s.key(idempotency.Ref{Route: "r", Key: p + key})},
					args: []any{s.channel, owner, "fp", millis(time.Minute)}, done: make(chan scriptResult, 1)}
			}
			blob := encodeEntry(nil, codecSample(), true)
			complete := &scriptCall{ctx: ctx, script: completeScript, keys: []string{s.key(idempotency.Ref{Route: "r", Key: p + "done"})},
				args: []any{s.channel, millis(time.Hour), "fp", blob, ""}, done: make(chan scriptResult, 1)}
			batch := []*scriptCall{claim("a", "o1"), claim("same", "o2"), complete, claim("same", "o3"), claim("b", "o4")}
			s.pipe.send(batch)
			status := map[string]idempotency.ClaimStatus{}
			for _, c := range batch {
				r := <-c.done
				if r.err != nil {
					t.Fatalf("%s: %v", c.keys[0], r.err)
				}
				if c.script == claimScript {
					cl, err := parseClaim(r.val.([]any))
					if err != nil {
						t.Fatal(err)
					}
					status[c.args[1].(string)] = cl.Status
				}
			}
			want := map[string]idempotency.ClaimStatus{"o1": idempotency.Acquired, "o2": idempotency.Acquired, "o3": idempotency.InFlight, "o4": idempotency.Acquired}
			for o, st := range want {
				if status[o] != st {
					t.Errorf("claim by %s: %v, want %v", o, status[o], st)
				}
			}
			c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: p + "done"}, Owner: "o5", Lease: time.Minute})
			if err != nil || c.Status != idempotency.Done {
				t.Errorf("claim of the completed key: %v %v, want done", c.Status, err)
			}
		})
	}
}

// Calls queued when the screen closes fail as unavailable; none hangs.
func TestPipelineCloseFailsQueuedCalls(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	s, err := New(Options{Addrs: []string{addr}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "k"}, Owner: "o", Lease: time.Second}); err == nil {
		t.Fatal("claim on a closed screen succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("claim on a closed screen hung")
	}
}

// A caller that leaves while its call waits in the queue neither fails the
// live calls batched after it nor claims for nobody: a batch runs under a
// context of its own, and a gone caller's script is not sent.
func TestPipelineBatchOutlivesAGoneCaller(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Prefix: "gone:"})
	// Keep the one pipeline worker busy for 300 ms inside Redis, so that
	// the next calls queue up behind it.
	busy := redis.NewScript(`
local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
repeat
  local n = redis.call('TIME')
  if tonumber(n[1]) * 1000000 + tonumber(n[2]) - start > 300000 then break end
until false
return 1`)
	busyDone := make(chan error, 1)
	go func() { _, err := s.pipe.run(context.Background(), busy, []string{"gone:busy"}); busyDone <- err }()
	time.Sleep(50 * time.Millisecond) // the worker has taken it

	gone, leave := context.WithCancel(context.Background())
	goneRef := idempotency.Ref{Route: "r", Key: "gone"}
	goneErr := make(chan error, 1)
	go func() {
		_, err := s.Claim(gone, idempotency.ClaimRequest{Ref: goneRef, Owner: "o-gone", Lease: time.Minute})
		goneErr <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the gone caller's claim to be queued", func() bool { return len(s.pipe.jobs) > 0 })
	leave()
	if err := <-goneErr; err == nil {
		t.Fatal("the gone caller's claim reported success")
	}
	live, err := s.Claim(context.Background(), idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "live"}, Owner: "o-live", Lease: time.Minute})
	if err != nil || live.Status != idempotency.Acquired {
		t.Fatalf("live claim batched after a gone caller: %v %v, want acquired", live.Status, err)
	}
	if err := <-busyDone; err != nil {
		t.Fatalf("busy script: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if n, err := c.Exists(context.Background(), s.key(goneRef)).Result(); err != nil || n != 0 {
		t.Fatalf("the gone caller's key exists (%d, %v): a claim nobody holds would make repeats wait for the lease", n, err)
	}
}
