package forward_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hookstamp/hookstamp/internal/forward"
)

// A forward whose context has already ended (the gateway abandoned the
// delivery at shutdown, the caller gave up) sends nothing, also when a
// pooled connection is ready: it is ErrUnreachable, never a delivery
// written on its way out and reported as ambiguous.
func TestDoWithEndedContextSendsNothing(t *testing.T) {
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	if _, err := f.Do(context.Background(), post(u.URL, "warm")); err != nil {
		t.Fatal(err) // leaves a connection in the pool
	}
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.Do(ctx, post(u.URL, "ended"))
		if !errors.Is(err, forward.ErrUnreachable) || !errors.Is(err, context.Canceled) || forward.Ambiguous(err) {
			t.Fatalf("Do %d with an ended context = %v (ambiguous %v), want ErrUnreachable", i, err, forward.Ambiguous(err))
		}
		if _, err := f.Do(context.Background(), post(u.URL, "warm")); err != nil {
			t.Fatal(err)
		}
	}
	if n := u.count("ended"); n != 0 {
		t.Errorf("upstream got %d deliveries whose context had ended, want 0", n)
	}
}
