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
				args: []any{s.channel, millis(time.Hour), "fp", blob}, done: make(chan scriptResult, 1)}
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
