package memscreen_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t *testing.T) idempotency.Screen {
	s := memscreen.New(memscreen.Options{MaxCachedBody: idempotencytest.ScreenMaxCachedBody})
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	idempotencytest.RunScreen(t, open)
}

func newFake(t *testing.T, sweep time.Duration) (*memscreen.Screen, *testenv.Clock) {
	t.Helper()
	clk := testenv.NewClock(time.Date(2026, 6, 12, 0, 0, 0, 0, time.UTC))
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64, Now: clk.Now, SweepInterval: sweep})
	t.Cleanup(s.Close)
	return s, clk
}

func claim(t *testing.T, s *memscreen.Screen, key, owner string, lease time.Duration) idempotency.ClaimStatus {
	t.Helper()
	c, err := s.Claim(context.Background(), idempotency.ClaimRequest{
		Ref: idempotency.Ref{Route: "r", Key: key}, Owner: owner, Lease: lease,
	})
	if err != nil {
		t.Fatalf("Claim(%q, %q): %v", key, owner, err)
	}
	return c.Status
}

func TestLeaseWithInjectedClock(t *testing.T) {
	cases := []struct {
		name    string
		advance time.Duration
		want    idempotency.ClaimStatus
	}{
		{"just before the lease ends", 30*time.Second - time.Nanosecond, idempotency.InFlight},
		{"when the lease ends", 30 * time.Second, idempotency.TakenOver},
		{"long after the lease", 24 * time.Hour, idempotency.TakenOver},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newFake(t, time.Hour)
			if got := claim(t, s, "k", "a", 30*time.Second); got != idempotency.Acquired {
				t.Fatalf("first claim = %v", got)
			}
			clk.Advance(c.advance)
			if got := claim(t, s, "k", "b", 30*time.Second); got != c.want {
				t.Fatalf("claim after %v = %v, want %v", c.advance, got, c.want)
			}
		})
	}
}

func TestDoneExpiresWithTTL(t *testing.T) {
	s, clk := newFake(t, time.Hour)
	ref := idempotency.Ref{Route: "r", Key: "k"}
	e := &idempotency.Entry{Response: idempotency.Response{Status: 200}}
	if err := s.Complete(context.Background(), ref, "a", e, time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	if got := claim(t, s, "k", "b", time.Second); got != idempotency.Done {
		t.Fatalf("claim before ttl = %v, want done", got)
	}
	clk.Advance(time.Nanosecond)
	if got := claim(t, s, "k", "b", time.Second); got != idempotency.Acquired {
		t.Fatalf("claim after ttl = %v, want acquired", got)
	}
}

func TestJanitorReclaimsExpiredEntries(t *testing.T) {
	s, clk := newFake(t, 5*time.Millisecond)
	for i := range 100 {
		claim(t, s, fmt.Sprintf("flight-%d", i), "a", time.Second)
		ref := idempotency.Ref{Route: "r", Key: fmt.Sprintf("done-%d", i)}
		if err := s.Complete(context.Background(), ref, "a", &idempotency.Entry{}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 200 {
		t.Fatalf("Len = %d, want 200", n)
	}
	// In-flight entries outlive their lease by one lease (takeover
	// window); done entries live for their ttl.
	clk.Advance(2 * time.Second)
	waitLen(t, s, 100)
	clk.Advance(time.Minute)
	waitLen(t, s, 0)
}

func waitLen(t *testing.T, s *memscreen.Screen, want int) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("Len %d", want), func() bool { return s.Len() == want })
}

func TestInvalidArguments(t *testing.T) {
	s, _ := newFake(t, time.Hour)
	ref := idempotency.Ref{Route: "r", Key: "k"}
	cases := []struct {
		name string
		call func() error
	}{
		{"zero lease", func() error {
			_, err := s.Claim(context.Background(), idempotency.ClaimRequest{Ref: ref, Owner: "a"})
			return err
		}},
		{"zero ttl", func() error { return s.Complete(context.Background(), ref, "a", &idempotency.Entry{}, 0) }},
		{"nil entry", func() error { return s.Complete(context.Background(), ref, "a", nil, time.Minute) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := memscreen.New(memscreen.Options{})
	s.Close()
	s.Close()
}

func BenchmarkClaim(b *testing.B) {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	defer s.Close()
	ctx := context.Background()
	b.Run("acquire", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, err := s.Claim(ctx, idempotency.ClaimRequest{
				Ref: idempotency.Ref{Route: "r", Key: fmt.Sprintf("acq-%d", i)}, Owner: "a", Lease: time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("done-hit", func(b *testing.B) {
		ref := idempotency.Ref{Route: "r", Key: "done"}
		e := &idempotency.Entry{Response: idempotency.Response{
			Status: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: make([]byte, 512),
		}}
		if err := s.Complete(ctx, ref, "a", e, time.Hour); err != nil {
			b.Fatal(err)
		}
		req := idempotency.ClaimRequest{Ref: ref, Owner: "b", Lease: time.Second}
		b.ReportAllocs()
		for b.Loop() {
			if c, err := s.Claim(ctx, req); err != nil || c.Status != idempotency.Done {
				b.Fatal(c.Status, err)
			}
		}
	})
}

// BenchmarkClaimParallel is why the map is sharded: claims of distinct
// keys from many goroutines.
func BenchmarkClaimParallel(b *testing.B) {
	s := memscreen.New(memscreen.Options{})
	defer s.Close()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, err := s.Claim(context.Background(), idempotency.ClaimRequest{
				Ref: idempotency.Ref{Route: "r", Key: fmt.Sprint(n.Add(1))}, Owner: "a", Lease: time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Done entries beyond MaxDoneBytes are forgotten oldest first, however
// many deliveries a day brings; claims in flight are never forgotten (they
// are what keeps a second copy from being forwarded), and the most recent
// done entries are kept.
func TestDoneEntriesStayWithinTheirBudget(t *testing.T) {
	const budget = 256 << 10
	s := memscreen.New(memscreen.Options{MaxCachedBody: 1 << 10, MaxDoneBytes: budget})
	t.Cleanup(s.Close)
	ctx := context.Background()
	claim := func(key, owner string) idempotency.Claim {
		t.Helper()
		c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: key}, Owner: owner, Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for i := range 100 {
		if c := claim(fmt.Sprint("inflight-", i), "first"); c.Status != idempotency.Acquired {
			t.Fatalf("claim: %v", c.Status)
		}
	}
	body := make([]byte, 512)
	const n = 20000 // ~20 MB of done entries through a 256 KiB budget
	for i := range n {
		ref := idempotency.Ref{Route: "r", Key: fmt.Sprint("done-", i)}
		if err := s.Complete(ctx, ref, "o", &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: body}}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got, most := s.Len(), 100+budget/512; got > most {
		t.Errorf("screen holds %d entries after %d deliveries, want at most %d within %d bytes", got, n, most, budget)
	}
	for i := range 100 {
		if c := claim(fmt.Sprint("inflight-", i), "second"); c.Status != idempotency.InFlight || c.Owner != "first" {
			t.Fatalf("in-flight claim %d was forgotten: %v", i, c.Status)
		}
	}
	if c := claim(fmt.Sprint("done-", n-1), "x"); c.Status != idempotency.Done {
		t.Errorf("the latest done entry was forgotten: %v", c.Status)
	}
	if c := claim("done-0", "x"); c.Status != idempotency.Acquired {
		t.Errorf("the oldest done entry is still there: %v", c.Status)
	}
}

// With NoDone the screen holds claims only: Complete ends the claim, wakes
// the repeats waiting on it, and leaves nothing behind, so the next claim
// is granted and the ledger confirms it (the gateway keeps done records
// in the engine's local cache instead, once).
func TestNoDoneKeepsClaimsOnly(t *testing.T) {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 1 << 10, NoDone: true})
	t.Cleanup(s.Close)
	ctx := context.Background()
	ref := idempotency.Ref{Route: "r", Key: "evt_1"}
	c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "first", Lease: time.Hour})
	if err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("first claim: %v %v", c.Status, err)
	}
	c, err = s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "repeat", Lease: time.Hour})
	if err != nil || c.Status != idempotency.InFlight || c.Owner != "first" {
		t.Fatalf("claim while in flight: %v %q %v, want in flight for first", c.Status, c.Owner, err)
	}
	woke := make(chan error, 1)
	go func() { woke <- s.Wait(ctx, ref, "first") }()
	time.Sleep(20 * time.Millisecond) // let the waiter block (it returns at once if it is late)
	if err := s.Complete(ctx, ref, "first", &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by Complete")
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("screen holds %d entries after the claim was completed, want 0", n)
	}
	c, err = s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "later", Lease: time.Hour})
	if err != nil || c.Status != idempotency.Acquired || c.Entry != nil {
		t.Fatalf("claim after complete: %v %v, want acquired (for the ledger to confirm)", c.Status, err)
	}
}

// NoDone leaves done records to the local cache, which may evict them: a
// record whose ledger commit failed has no row behind it, so the screen
// keeps it, body included, and repeats are intercepted (SPEC §1).
func TestNoDoneKeepsUnrecordedEntries(t *testing.T) {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 4, NoDone: true})
	t.Cleanup(s.Close)
	ctx := context.Background()
	ref := idempotency.Ref{Route: "r", Key: "evt_unrecorded"}
	if c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "first", Lease: time.Hour}); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("first claim: %v %v", c.Status, err)
	}
	e := &idempotency.Entry{Response: idempotency.Response{Status: 201, Body: []byte("booked, longer than four bytes")}, Unrecorded: true}
	if err := s.Complete(ctx, ref, "first", e, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "repeat", Lease: time.Hour})
	if err != nil || c.Status != idempotency.Done || c.Entry == nil {
		t.Fatalf("repeat: %v %v, want done", c.Status, err)
	}
	if !c.Entry.BodyCached || c.Entry.Status != 201 || string(c.Entry.Body) != "booked, longer than four bytes" {
		t.Fatalf("repeat's entry: %d %q (body cached %v), want 201 and the whole body", c.Entry.Status, c.Entry.Body, c.Entry.BodyCached)
	}
}

// With NoDone a Complete ends the claim on the key, whoever holds it — but
// a refill (a record read from the ledger, perhaps deleted since) ends
// only its caller's: ending a new delivery's claim would let its repeat
// claim and be forwarded beside it.
func TestNoDoneRefillEndsOnlyItsOwnClaim(t *testing.T) {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 1 << 10, NoDone: true})
	t.Cleanup(s.Close)
	ctx := context.Background()
	ref := idempotency.Ref{Route: "r", Key: "evt_deleted"}
	claim := func(owner string) idempotency.Claim {
		c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: owner, Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := claim("reader"); c.Status != idempotency.Acquired {
		t.Fatalf("reader's claim: %v", c.Status)
	}
	if err := s.Forget(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if c := claim("new"); c.Status != idempotency.Acquired {
		t.Fatalf("new delivery's claim: %v", c.Status)
	}
	stale := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("deleted")}, BodyCached: true, Refill: true}
	if err := s.Complete(ctx, ref, "reader", stale, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c := claim("repeat"); c.Status != idempotency.InFlight || c.Owner != "new" {
		t.Fatalf("repeat after the stale refill: %v owned by %q, want in flight for the new delivery", c.Status, c.Owner)
	}
}

// An Unrecorded entry is the only copy of its answer: done entries of
// recorded deliveries, however many, never push one out, and Unrecorded
// entries are bounded by their own budget, within which the newest is
// kept even when it alone is larger than the budget's share.
func TestUnrecordedEntriesHaveTheirOwnBudget(t *testing.T) {
	const budget = 256 << 10
	s := memscreen.New(memscreen.Options{MaxCachedBody: 1 << 10, MaxDoneBytes: budget, MaxUnrecordedBytes: budget})
	t.Cleanup(s.Close)
	ctx := context.Background()
	complete := func(key string, body []byte, unrecorded bool) {
		t.Helper()
		e := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: body}, Unrecorded: unrecorded}
		if err := s.Complete(ctx, idempotency.Ref{Route: "r", Key: key}, "o", e, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	status := func(key string) idempotency.ClaimStatus {
		t.Helper()
		c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: key}, Owner: "x", Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return c.Status
	}
	huge := make([]byte, 2*budget)
	complete("unrecorded-huge", huge, true)
	complete("unrecorded-small", make([]byte, 512), true)
	for i := range 20000 { // ~20 MB of recorded answers through a 256 KiB budget
		complete(fmt.Sprint("done-", i), make([]byte, 512), false)
	}
	for _, key := range []string{"unrecorded-huge", "unrecorded-small"} {
		if st := status(key); st != idempotency.Done {
			t.Errorf("%s after a flood of recorded answers: %v, want done (its repeats have no ledger row to meet)", key, st)
		}
	}
	for i := range 20000 {
		complete(fmt.Sprint("unrecorded-", i), make([]byte, 512), true)
	}
	if got, most := s.Len(), 2*(budget/512)+2; got > most {
		t.Errorf("screen holds %d entries, want at most %d: unrecorded entries are bounded too", got, most)
	}
	if st := status("unrecorded-19999"); st != idempotency.Done {
		t.Errorf("the newest unrecorded entry: %v, want done", st)
	}
	if st := status("unrecorded-0"); st != idempotency.Acquired {
		t.Errorf("the oldest unrecorded entry past the budget: %v, want dropped", st)
	}
}
