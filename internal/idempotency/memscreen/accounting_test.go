package memscreen

import (
	"context"
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
	if len(sh.m) != 0 || sh.unrecorded.bytes != 0 || sh.done.bytes != 0 {
		t.Fatalf("after the claims ended the shard holds %d entries, %d unrecorded and %d done bytes, want none",
			len(sh.m), sh.unrecorded.bytes, sh.done.bytes)
	}
}
