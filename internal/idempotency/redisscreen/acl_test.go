package redisscreen

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// TestACLUserWithoutChannels: an ACL user granted the screen's keys but no
// pub/sub channel (Redis 7 gives new users none: acl-pubsub-default
// resetchannels) still takes over, completes for a waiter, releases for a
// waiter and forgets: the events channel only wakes waiters early, and its
// refusal must not fail the operation around it (waiters poll).
func TestACLUserWithoutChannels(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.Do(ctx, "ACL", "SETUSER", "hs", "on", ">pw", "resetchannels", "~p:*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	s := newTB(t, Options{Addrs: []string{srv.Addr}, Username: "hs", Password: "pw", Prefix: "p:",
		WaitPollMin: 20 * time.Millisecond, WaitPollMax: 50 * time.Millisecond})
	claim := func(owner string, lease time.Duration) idempotency.Claim {
		t.Helper()
		c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: testRef, Owner: owner, Lease: lease})
		if err != nil {
			t.Fatalf("Claim(%s): %v", owner, err)
		}
		return c
	}
	if c := claim("a", 300*time.Millisecond); c.Status != idempotency.Acquired {
		t.Fatalf("first claim %v", c.Status)
	}
	time.Sleep(400 * time.Millisecond) // past the lease, within the key's expiry
	if c := claim("b", time.Minute); c.Status != idempotency.TakenOver {
		t.Fatalf("claim after the lease %v, want TakenOver", c.Status)
	}

	// A waiter marks the claim; its completion publishes.
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(ctx, testRef, "b") }()
	testenv.Eventually(t, 5*time.Second, "the waiter to mark the key waited for", func() bool { return admin.HGet(ctx, "p:"+testRef.Route+":"+testRef.Key, "w").Val() == "1" })
	e := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}}
	if err := s.Complete(ctx, testRef, "b", e, time.Minute); err != nil {
		t.Fatalf("Complete for a waiter: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if err := s.Forget(ctx, testRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}

	if c := claim("c", time.Minute); c.Status != idempotency.Acquired {
		t.Fatalf("claim after forget %v", c.Status)
	}
	go func() { waited <- s.Wait(ctx, testRef, "c") }()
	testenv.Eventually(t, 5*time.Second, "the waiter to mark the key waited for", func() bool { return admin.HGet(ctx, "p:"+testRef.Route+":"+testRef.Key, "w").Val() == "1" })
	if err := s.Release(ctx, testRef, "c"); err != nil {
		t.Fatalf("Release for a waiter: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
}
