package idempotency

import (
	"context"
	"sync"
	"time"
)

// inFlight answers a repeat whose key another delivery holds (SPEC §3
// inflight): 409 at once with reject; with wait, it waits until the
// holder may have finished (false: the caller claims again) or the wait's
// deadline passes (409). Before a 409 the ledger is asked whether the
// holder settled after all.
func (e *Engine) inFlight(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, c *claim, deadline *time.Time, attempt int) (Result, bool) {
	detail := "a delivery of this event is in flight"
	if !p.RejectInflight {
		if deadline.IsZero() {
			*deadline = time.Now().Add(p.WaitTimeout)
		}
		if e.wait(ctx, c, *deadline, attempt) {
			return Result{}, false
		}
		detail = "a delivery of this event is still in flight"
	}
	if r, ok := e.settledInLedger(ctx, p, d, fwd, c); ok {
		return r, true
	}
	return e.conflict(detail), true
}

// wait holds an in-flight repeat until the holder of c may have finished,
// or the deadline passes (false).
func (e *Engine) wait(ctx context.Context, c *claim, deadline time.Time, attempt int) bool {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if c.local != nil {
		select {
		case <-c.local.done:
		case <-wctx.Done():
		}
		return ctx.Err() == nil && time.Now().Before(deadline)
	}
	var err error
	if c.screen {
		err = e.o.Screen.Wait(wctx, c.ref, c.Owner)
	}
	if !c.screen || (err != nil && wctx.Err() == nil) {
		// Ledger claims have no notifications, and a failing screen must
		// not be spun on: back off, then claim again.
		backoff := min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
		}
	}
	return ctx.Err() == nil && time.Now().Before(deadline)
}

// flights are the deliveries this process is forwarding now: a repeat that
// finds its first delivery here waits for it in-process, sparing the
// screen three calls. Only a shortcut: the screen's path is correct alone.
type flights struct {
	m sync.Map // Ref → *flight
}

type flight struct {
	fingerprint []byte
	done        chan struct{} // closed once the claim is settled
}

// start registers the delivery of ref that holds its claim now.
func (fs *flights) start(ref Ref, fingerprint []byte) *flight {
	f := &flight{fingerprint: fingerprint, done: make(chan struct{})}
	fs.m.Store(ref, f)
	return f
}

// finish ends f once its claim is settled: its waiters look again.
func (fs *flights) finish(ref Ref, f *flight) {
	fs.m.CompareAndDelete(ref, f) // a takeover may have registered another
	close(f.done)
}

// get returns the delivery of ref in flight here, or nil. A nil *flights
// (no screen) has none.
func (fs *flights) get(ref Ref) *flight {
	if fs == nil {
		return nil
	}
	if v, ok := fs.m.Load(ref); ok {
		return v.(*flight)
	}
	return nil
}
