package idempotency

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A commit that fails after the upstream answered (SPEC §1 "Commit
// failure") leaves the delivery processed upstream and unrecorded in the
// ledger. The provider has its answer and the screen keeps the entry, but
// the screen forgets (TTL, eviction, a flush), a replica whose Redis is
// down claims in the ledger, and without a screen there is no copy at all:
// once the claim's lease ran out, the provider's next retry was forwarded
// a second time. So the engine keeps the record and retries the commit in
// the background until it lands: a ledger that was down for seconds (a
// failover, a restart, a connection cut mid-commit) ends up holding the
// record, and repeats are replayed from it.
//
// The retry is the same commit, with the same owner and the same clock
// reading, so it lands only where the first one would have: over this
// delivery's own pending row, or (when the claim was the screen's alone)
// where the key has no row. A takeover, another delivery's record, or an
// operator's DELETE in between wins (Recommitter, CancelCommitRetry).
//
// The retry waits up to CommitRetryMaxDelay between attempts, and a
// provider's retry arriving in that time after the claim's lease would
// take the expired claim over and be forwarded again. So a delivery of a
// key whose commit this process is retrying makes the retry attempt at
// once, before it claims in the ledger (nudgeCommitRetry): where the
// ledger is back, the record lands first and the delivery is replayed
// from it. A delivery is never answered from the record held for the
// retry itself: until the ledger has it, an operator's DELETE through
// another replica could not reach it.

// Commit retry schedule: the first retry after CommitRetryFirst, then
// doubling up to CommitRetryMaxDelay, for Options.CommitRetryFor.
const (
	CommitRetryFirst    = 250 * time.Millisecond
	CommitRetryMaxDelay = 5 * time.Second
	// DefaultCommitRetryFor is Options.CommitRetryFor's default.
	DefaultCommitRetryFor = 10 * time.Minute
	// MaxCommitRetries and MaxCommitRetryBytes bound the records held for
	// retries at once, in number and in what their responses hold (an
	// answer may be up to record.max_body): a ledger that stays down must
	// not make the process hold every answer it forwards. A failure beyond
	// either is logged and left as before: recorded only in the screen.
	MaxCommitRetries    = 1024
	MaxCommitRetryBytes = 64 << 20
)

// Recommitter is implemented by ledgers that can run a retried commit as a
// statement of its own, never queued in a batch: a retry cancelled by an
// operator's DELETE must not land after it. With claimed set, the record
// is written only over the pending row its owner claimed, never inserted:
// if that row is gone, a DELETE (or a release) removed it, and writing the
// record back would undo it. A ledger without it gets Ledger.Commit.
type Recommitter interface {
	Recommit(ctx context.Context, rec *Record, owner string, now time.Time, claimed bool) error
}

// commitRetry is one failed commit being retried: by its loop (runRetry)
// and by deliveries of its key (nudgeCommitRetry), one attempt at a time.
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

// retrySize is what rec holds that a retry keeps alive: its body, key and
// headers.
func retrySize(rec *Record) int {
	n := len(rec.Body) + len(rec.Key) + len(rec.Route) + len(rec.Fingerprint)
	for k, v := range rec.Headers {
		n += len(k) + len(v)
	}
	return n
}

// retryCommit starts retrying, in the background, the commit of rec that
// just failed with err. claimed says whether the claim was a pending ledger
// row (then only that row may be turned into the record). ticket is the
// delivery's, for putting the record in the local cache once it lands.
func (e *Engine) retryCommit(ctx context.Context, rec *Record, owner string, now time.Time, claimed bool, ticket Ticket, err error) {
	if e.o.CommitRetryFor < 0 || !errors.Is(err, ErrUnavailable) {
		// A statement the database refused (not one that could not reach
		// it) would be refused again.
		return
	}
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	if e.retryClosed {
		return
	}
	if old, ok := e.retrying[rec.Ref]; ok {
		// An earlier delivery's commit is being retried, yet this one
		// held the claim and was forwarded (a takeover, a DELETE in
		// between): the earlier record can no longer land over this
		// delivery's claim, while this one can. It replaces the earlier.
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

// attempt makes one attempt at r's commit, or, when one is under way
// already, waits for it and reports its result. settled: nothing is left
// to try (recorded, settled without this record, or cancelled).
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
		log.WarnContext(r.ctx, "ledger record written by a retry after its first commit could not reach the ledger")
		if c := e.o.Cache; c != nil {
			c.Put(r.rec.Ref, EntryOf(r.rec), r.ticket)
		}
		settled = true
	case errors.Is(err, ErrNotOwner):
		// Recorded by a commit that did land after all, taken over, or
		// deleted: the ledger has settled the key without us.
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
		// Out of the map at once, not when the loop next wakes: a later
		// delivery's failed commit must find no retry of the key.
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

// nudgeCommitRetry makes this process's retry of ref's commit, if there is
// one, attempt now (or joins its attempt under way): called before a
// delivery of ref claims in the ledger, so that a ledger that is back
// holds the record before the delivery could take its claim over. The
// delivery waits for the attempt at most nudgeWait, or until ctx ends: a
// ledger that answers does so well within it, and one that hangs must not
// hold the delivery (and its screen claim) for a whole OpTimeout before
// its own claim waits as long again; the attempt goes on as the retry's.
// Without retries under way it costs an atomic load.
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

// CancelCommitRetry stops this process's background retry of a failed
// commit of ref, if any, and waits for an attempt under way to end. The
// admin API calls it before deleting a key's ledger row: a retry landing
// after the DELETE would write the record back (where the claim was the
// screen's alone, so that there is no pending row to lose).
func (e *Engine) CancelCommitRetry(ref Ref) {
	e.retryMu.Lock()
	r := e.retrying[ref]
	e.retryMu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	// A delivery's nudge may still be attempting: wait for it, and let
	// none start after (attempt checks the cancelled context).
	r.mu.Lock()
	ch := r.running
	r.settled = true
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// closeRetries makes each retry under way try once more, then waits for
// them: called by Close, before the ledger is closed.
func (e *Engine) closeRetries() {
	e.retryMu.Lock()
	if !e.retryClosed {
		e.retryClosed = true
		close(e.retryStop)
	}
	e.retryMu.Unlock()
	e.retries.Wait()
}
