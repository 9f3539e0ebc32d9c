package memscreen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// With NoDone, a Complete that ends the claim on a key holding an
// Unrecorded entry drops the entry and its bytes: the budget must not
// shrink with every such key.
func TestNoDoneEndClaimReleasesUnrecordedBytes(t *testing.T) {
	s := New(Options{MaxCachedBody: 1 << 10, NoDone: true})
	t.Cleanup(s.Close)
	ctx := context.Background()
	ref := idempotency.Ref{Route: "r", Key: "evt"}
	for range 3 {
		e := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, Unrecorded: true}
		if err := s.Complete(ctx, ref, "o", e, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, ref, "o", &idempotency.Entry{Response: idempotency.Response{Status: 200}}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) != 0 || sh.unrecorded.bytes != 0 || sh.done.bytes != 0 || s.unrecorded.Load() != 0 {
		t.Fatalf("after the claims ended the shard holds %d entries, %d unrecorded (%d in all) and %d done bytes, want none",
			len(sh.m), sh.unrecorded.bytes, s.unrecorded.Load(), sh.done.bytes)
	}
}

// The budget of Unrecorded entries is the screen's, not an even share of
// it for each shard: answers of a few hundred KiB whose keys meet in one
// shard are all kept while the screen holds far less than the budget.
func TestUnrecordedBudgetIsTheScreens(t *testing.T) {
	s := New(Options{MaxCachedBody: 1 << 10, NoDone: true})
	t.Cleanup(s.Close)
	ctx := context.Background()
	var refs []idempotency.Ref
	want := s.shard(idempotency.Ref{Route: "r", Key: "k0"})
	for i := 0; len(refs) < 4; i++ {
		if ref := (idempotency.Ref{Route: "r", Key: fmt.Sprint("k", i)}); s.shard(ref) == want {
			refs = append(refs, ref)
		}
	}
	body := make([]byte, 400<<10)
	for _, ref := range refs {
		e := &idempotency.Entry{Response: idempotency.Response{Status: 200, Body: body}, Unrecorded: true}
		if err := s.Complete(ctx, ref, "o", e, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range refs {
		if c, ok, err := s.Peek(ctx, ref); err != nil || !ok || c.Status != idempotency.Done {
			t.Errorf("%s after %d unrecorded answers of 400 KiB in its shard: %v %v %v, want done", ref.Key, len(refs), c.Status, ok, err)
		}
	}
}
