package idempotency

import (
	"context"
	"errors"
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

// commitRetry is one failed commit being retried.
type commitRetry struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the retry has ended
	size   int           // what the record holds, charged to retryBytes
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
	if _, ok := e.retrying[rec.Ref]; ok {
		// An earlier copy's record is being retried (this one came after
		// a takeover): whichever lands first is the record.
		return
	}
	size := retrySize(rec)
	if len(e.retrying) >= MaxCommitRetries || e.retryBytes+size > MaxCommitRetryBytes {
		e.o.Logger.ErrorContext(ctx, "too many unrecorded deliveries to retry their commits; this one stays unrecorded",
			"route", rec.Route, "key", rec.Key, "retrying", len(e.retrying), "retrying_bytes", e.retryBytes)
		return
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &commitRetry{cancel: cancel, done: make(chan struct{}), size: size}
	e.retryBytes += size
	if e.retrying == nil {
		e.retrying = make(map[Ref]*commitRetry)
	}
	e.retrying[rec.Ref] = r
	e.retries.Go(func() {
		defer close(r.done)
		defer cancel()
		defer e.endRetry(rec.Ref, r)
		e.runRetry(rctx, rec, owner, now, claimed, ticket)
	})
}

// runRetry is the retry loop of one commit.
func (e *Engine) runRetry(ctx context.Context, rec *Record, owner string, now time.Time, claimed bool, ticket Ticket) {
	commit := func(ctx context.Context) error { return e.o.Ledger.Commit(ctx, rec, owner, now) }
	if rc, ok := e.o.Ledger.(Recommitter); ok {
		commit = func(ctx context.Context) error { return rc.Recommit(ctx, rec, owner, now, claimed) }
	}
	log := e.o.Logger.With("route", rec.Route, "key", rec.Key)
	deadline := time.Now().Add(e.o.CommitRetryFor)
	delay := CommitRetryFirst
	t := time.NewTimer(delay)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		last := false
		select {
		case <-ctx.Done():
			// An operator deleted the key: the record must not come back.
			return
		case <-e.retryStop:
			// Shutting down: one last try (the ledger may be back).
			last = true
		case <-t.C:
		}
		cctx, ccancel := context.WithTimeout(ctx, e.o.OpTimeout)
		err := commit(cctx)
		ccancel()
		switch {
		case err == nil:
			log.WarnContext(ctx, "ledger record written by a retry after its first commit could not reach the ledger",
				"attempts", attempt)
			if c := e.o.Cache; c != nil {
				c.Put(rec.Ref, EntryOf(rec), ticket)
			}
			return
		case errors.Is(err, ErrNotOwner):
			// Recorded by a commit that did land after all, taken over,
			// or deleted: the ledger has settled the key without us.
			log.WarnContext(ctx, "retry of an unrecorded delivery stopped: the key was settled meanwhile",
				"attempts", attempt)
			return
		case ctx.Err() != nil:
			return
		case last || !errors.Is(err, ErrUnavailable) || time.Now().After(deadline):
			e.depError("ledger", "commit", err)
			log.ErrorContext(ctx, "gave up recording a delivery forwarded with a final answer; repeats are intercepted only while the screen remembers",
				"attempts", attempt, "err", err)
			return
		}
		delay = min(2*delay, CommitRetryMaxDelay)
		t.Reset(delay)
	}
}

// endRetry drops r from the retries under way.
func (e *Engine) endRetry(ref Ref, r *commitRetry) {
	e.retryMu.Lock()
	defer e.retryMu.Unlock()
	if e.retrying[ref] == r {
		delete(e.retrying, ref)
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
