package idempotency

import (
	"context"
	"errors"
	"time"
)

// A ledger can answer reads and refuse writes: a full disk, a read-only
// file, a PostgreSQL hot standby or default_transaction_read_only. A
// delivery that is forwarded after only a ledger lookup (the screen's
// claim confirmed by a lookup) cannot see that before its commit fails,
// and every first delivery would be forwarded with nothing recorded. So a
// commit that could not reach the ledger marks its writes failing, and
// while they are marked such a delivery claims in the ledger before it is
// forwarded, as confirmByClaim does: refused, it is answered as for an
// unreachable ledger (store.on_unavailable); granted, the ledger takes
// writes again. Any ledger write that succeeds clears the mark. Unmarked,
// a delivery pays one atomic load.

// writesFailed marks the ledger's writes failing after a write failed with
// err, if the ledger could not be reached.
func (e *Engine) writesFailed(ctx context.Context, err error) {
	if !errors.Is(err, ErrUnavailable) || e.writesFailing.Load() || !e.writesFailing.CompareAndSwap(false, true) {
		return
	}
	// A timeout or lock conflict also marks it, and the next claim clears
	// it: logged once a minute, not at every turn.
	now := time.Now().UnixNano()
	last := e.writesWarned.Load()
	if now-last < int64(time.Minute) || !e.writesWarned.CompareAndSwap(last, now) {
		e.writesLogged.Store(false)
		return
	}
	e.writesLogged.Store(true)
	e.o.Logger.WarnContext(ctx, "the ledger refused a write: until one succeeds, a delivery not yet recorded claims in the ledger before it is forwarded, and store.on_unavailable applies when the claim is refused",
		"err", err)
}

// writesWork clears the mark of writesFailed after a ledger write
// succeeded.
func (e *Engine) writesWork(ctx context.Context) {
	if e.writesFailing.Load() && e.writesFailing.CompareAndSwap(true, false) && e.writesLogged.Swap(false) {
		e.o.Logger.InfoContext(ctx, "the ledger takes writes again: deliveries are confirmed as configured")
	}
}

// claimWrote clears the mark after a ledger claim that wrote its row. One
// that found the key held or recorded may have written nothing: SQLite on
// a full disk skips an insert that conflicts without touching the disk.
func (e *Engine) claimWrote(ctx context.Context, s ClaimStatus) {
	if s == Acquired || s == TakenOver {
		e.writesWork(ctx)
	}
}

// WriteProber is a ledger that can be asked to take a write that records
// no delivery (sqlledger).
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// WritesFailing reports that the ledger's last write failed to reach it,
// and none has succeeded since.
func (e *Engine) WritesFailing() bool { return e.writesFailing.Load() }

// ProbeWrites asks the ledger to take a write, if it can be asked, and
// marks its writes failing when it refuses: at start, before the first
// delivery is forwarded and fails to commit. A probe taken does not clear
// the mark; the next delivery's claim does, the write that counts: room
// for a probe row need not be room for a record. Readiness probes while
// the mark is set, since a replica out of its balancer's rotation gets no
// delivery to tell it the ledger takes writes again.
func (e *Engine) ProbeWrites(ctx context.Context) error {
	p, ok := e.o.Ledger.(WriteProber)
	if !ok {
		return nil
	}
	err := p.ProbeWrite(ctx)
	if err != nil {
		e.writesFailed(ctx, err)
	}
	return err
}
