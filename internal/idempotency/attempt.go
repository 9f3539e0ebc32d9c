package idempotency

import (
	"context"
	"time"
)

// AttemptRecorder is a Ledger that keeps the attempts of routes storing
// requests (SPEC §11). A forward that settles its record is written by
// Commit (Record.Attempt); this records the others: released claims, and
// a second copy whose record another delivery settled.
type AttemptRecorder interface {
	AddAttempt(ctx context.Context, a Attempt) error
}

// attemptOf is the forward's attempt, or nil when the delivery stores no
// request. Its expiry lets the sweeper remove it if no record comes.
func (e *Engine) attemptOf(p *Policy, d Delivery, started time.Time, took time.Duration, up *Upstream, ferr error) *Attempt {
	if d.Request == nil {
		return nil
	}
	a := &Attempt{Ref: d.Ref, StartedAt: started, Duration: took, Replica: e.o.Replica, ExpiresAt: started.Add(p.Retention)}
	if ferr != nil {
		a.Error = ferr.Error()
	} else {
		a.Status = up.Status
	}
	return a
}

// addAttempt records an attempt that no commit carried. A failure costs
// the event log one row, never the delivery.
func (e *Engine) addAttempt(ctx context.Context, a *Attempt) {
	if a == nil || e.attempts == nil {
		return
	}
	if err := e.attempts.AddAttempt(ctx, *a); err != nil {
		e.depError("ledger", "attempt", err)
		e.o.Logger.WarnContext(ctx, "attempt not recorded", "route", a.Route, "key", a.Key, "err", err)
	}
}
