package idempotency

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A commit that could not reach the ledger after the upstream answered is
// retried in the background until it lands, so that the record outlives
// the screen's copy (docs/exactly-once.md, "A commit that fails"). The
// retry is the same commit, same owner and clock reading, so it lands
// only where the first would have.

// Commit retry schedule: the first retry after CommitRetryFirst, then
// doubling up to CommitRetryMaxDelay, for Options.CommitRetryFor.
const (
	CommitRetryFirst    = 250 * time.Millisecond
	CommitRetryMaxDelay = 5 * time.Second
	// DefaultCommitRetryFor is Options.CommitRetryFor's default.
	DefaultCommitRetryFor = 10 * time.Minute
	// MaxCommitRetries and MaxCommitRetryBytes bound the records held for
	// retries: a ledger that stays down must not make the process hold
	// every answer it forwards. Beyond them a failure is only logged.
	MaxCommitRetries    = 1024
	MaxCommitRetryBytes = 64 << 20
)

// Recommitter is implemented by ledgers that run a retried commit as a
// statement of its own, never batched, so that a retry cancelled by an
// operator's DELETE cannot land after it. With claimed set, the record
// only replaces owner's pending row: if that row is gone, a DELETE or a
// release removed it. Other ledgers get Ledger.Commit.
type Recommitter interface {
	Recommit(ctx context.Context, rec *Record, owner string, now time.Time, claimed bool) error
}

// commitRetry is one failed commit being retried, by its loop and by
// deliveries of its key, one attempt at a time.
type commitRetry struct {
	ctx    context.Context // cancelled by CancelCommitRetry
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has ended
	size   int           // what the record holds, charged to retryBytes
	commit func(context.Context) error
	rec    *Record
	ticket Ticket

	mu       sync.Mutex
	running  chan struct{} // closed when the attempt under way ends; nil if none
	settled  bool          // recorded, or settled without it: no more attempts
	attempts int
	lastErr  error
}

// retrySize is what a retry keeps of rec alive.
func retrySize(rec *Record) int {
	n := len(rec.Body) + len(rec.Key) + len(rec.Route) + len(rec.Fingerprint)
	for k, v := range rec.Headers {
		n += len(k) + len(v)
	}
	return n
}

// retryCommit starts retrying the commit of rec that failed with err.
// claimed: the claim was a pending ledger row, the only place the record
// may land.
func (e *Engine) retryCommit(ctx context.Context, rec *Record, owner string, now time.Time, claimed bool, ticket Ticket, err error) {
	if e.o.CommitRetryFor < 0 || !errors.Is(err, ErrUnavailable) {
		return // a statement the database refused would be refused again
	}
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	if e.retryClosed {
		return
	}
	if old, ok := e.retrying[rec.Ref]; ok {
		// This delivery held the claim after the earlier one's: only its
		// record can still land.
		e.dropRetry(rec.Ref, old)
		old.cancel()
	}
	size := retrySize(rec)
	if len(e.retrying) >= MaxCommitRetries || e.retryBytes+size > MaxCommitRetryBytes {
		e.o.Logger.ErrorContext(ctx, "too many unrecorded deliveries to retry their commits; this one stays unrecorded",
			"route", rec.Route, "key", rec.Key, "retrying", len(e.retrying), "retrying_bytes", e.retryBytes)
		return
	}
	r := &commitRetry{done: make(chan struct{}), size: size, rec: rec, ticket: ticket}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.commit = func(ctx context.Context) error { return e.o.Ledger.Commit(ctx, rec, owner, now) }
	if rc, ok := e.o.Ledger.(Recommitter); ok {
		r.commit = func(ctx context.Context) error { return rc.Recommit(ctx, rec, owner, now, claimed) }
	}
	if e.retrying == nil {
		e.retrying = make(map[Ref]*commitRetry)
	}
	e.retrying[rec.Ref] = r
	e.retryCount.Add(1)
	e.retryBytes += size
	e.retries.Go(func() {
		defer close(r.done)
		defer r.cancel()
		defer e.endRetry(rec.Ref, r)
		e.runRetry(r)
	})
}

// runRetry is the retry loop of one commit.
func (e *Engine) runRetry(r *commitRetry) {
	deadline := time.Now().Add(e.o.CommitRetryFor)
	delay := CommitRetryFirst
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		last := false
		select {
		case <-r.ctx.Done():
			// An operator deleted the key: the record must not come back.
			return
		case <-e.retryStop:
			// Shutting down: one last try (the ledger may be back).
			last = true
		case <-t.C:
		}
		settled, attempts, err := e.attempt(r)
		switch {
		case settled || r.ctx.Err() != nil:
			return
		case last || !errors.Is(err, ErrUnavailable) || time.Now().After(deadline):
			e.giveUp(r, attempts, err)
			return
		}
		delay = min(2*delay, CommitRetryMaxDelay)
		t.Reset(delay)
	}
}

// attempt makes one attempt at r's commit, or waits for the one under way
// and reports its result. settled: nothing is left to try.
func (e *Engine) attempt(r *commitRetry) (settled bool, attempts int, err error) {
	r.mu.Lock()
	if ch := r.running; ch != nil {
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.settled, r.attempts, r.lastErr
	}
	if r.settled || r.ctx.Err() != nil {
		defer r.mu.Unlock()
		return true, r.attempts, r.lastErr
	}
	ch := make(chan struct{})
	r.running = ch
	r.attempts++
	attempts = r.attempts
	r.mu.Unlock()

	cctx, cancel := context.WithTimeout(r.ctx, e.o.OpTimeout)
	err = r.commit(cctx)
	cancel()
	log := e.o.Logger.With("route", r.rec.Route, "key", r.rec.Key, "attempts", attempts)
	switch {
	case err == nil:
		e.writesWork(r.ctx)
		log.WarnContext(r.ctx, "ledger record written by a retry after its first commit could not reach the ledger")
		if c := e.o.Cache; c != nil {
			c.Put(r.rec.Ref, EntryOf(r.rec), r.ticket)
		}
		settled = true
	case errors.Is(err, ErrNotOwner):
		// The ledger settled the key without this record.
		log.WarnContext(r.ctx, "retry of an unrecorded delivery stopped: the key was settled meanwhile")
		settled = true
	}

	r.mu.Lock()
	r.running = nil
	close(ch)
	r.settled = r.settled || settled
	r.lastErr = err
	settled = r.settled
	r.mu.Unlock()
	if settled {
		// At once: a later delivery's failed commit must find no retry.
		e.endRetry(r.rec.Ref, r)
	}
	return settled, attempts, err
}

// giveUp ends a retry that did not land.
func (e *Engine) giveUp(r *commitRetry, attempts int, err error) {
	e.depError("ledger", "commit", err)
	e.o.Logger.ErrorContext(r.ctx, "gave up recording a delivery forwarded with a final answer; repeats are intercepted only while the screen remembers",
		"route", r.rec.Route, "key", r.rec.Key, "attempts", attempts, "err", err)
}

// nudgeCommitRetry makes this process's retry of ref's commit, if any,
// attempt now, before a delivery of ref claims: a ledger that is back then
// holds the record before the delivery could take the claim over. It
// waits for the attempt a fifth of OpTimeout at most (a second), so that a
// hung ledger does not hold the delivery; the attempt goes on.
func (e *Engine) nudgeCommitRetry(ctx context.Context, ref Ref) {
	if e.retryCount.Load() == 0 {
		return
	}
	e.retryMu.Lock()
	r := e.retrying[ref]
	e.retryMu.Unlock()
	if r == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.attempt(r) // bounded by OpTimeout, and cancelled with the retry
	}()
	t := time.NewTimer(min(e.o.OpTimeout/5, time.Second))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// endRetry drops r from the retries under way, if it is still the one.
func (e *Engine) endRetry(ref Ref, r *commitRetry) {
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	e.dropRetry(ref, r)
}

// dropRetry is endRetry with retryMu held.
func (e *Engine) dropRetry(ref Ref, r *commitRetry) {
	if e.retrying[ref] == r {
		delete(e.retrying, ref)
		e.retryCount.Add(-1)
		e.retryBytes -= r.size
	}
}

// CancelCommitRetry stops this process's retry of ref's commit, if any,
// and waits for an attempt under way. The admin API calls it before
// deleting a key's ledger row, which a later retry would write back.
func (e *Engine) CancelCommitRetry(ref Ref) {
	e.retryMu.Lock()
	r := e.retrying[ref]
	e.retryMu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	// A nudge may still be attempting: wait for it; none starts after.
	r.mu.Lock()
	ch := r.running
	r.settled = true
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// closeRetries makes each retry try once more and waits for them.
func (e *Engine) closeRetries() {
	e.retryMu.Lock()
	if !e.retryClosed {
		e.retryClosed = true
		close(e.retryStop)
	}
	e.retryMu.Unlock()
	e.retries.Wait()
}
