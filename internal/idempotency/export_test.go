package idempotency

import "context"

// ClaimHandle gives the tests of package idempotency_test, which use the
// real drivers (a test inside the package cannot import them), the claim
// handle that Handle works with.
type ClaimHandle struct{ c claim }

// Acquire claims d's key as Handle's first attempt does.
func (e *Engine) Acquire(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) (*ClaimHandle, *Result) {
	d.ticket = e.o.Cache.Ticket()
	c, stop := e.acquire(ctx, p, d, fwd, newOwner())
	return &ClaimHandle{c}, stop
}

// Status is what the claim found.
func (h *ClaimHandle) Status() ClaimStatus { return h.c.Status }

// Stores names the stores holding the claim.
func (h *ClaimHandle) Stores() string {
	switch c := &h.c; {
	case c.local != nil:
		return "local"
	case c.lostScreen:
		return "ledger+lost screen"
	case c.screen && c.ledger:
		return "screen+ledger"
	case c.screen:
		return "screen"
	case c.ledger:
		return "ledger"
	}
	return "none"
}

// Forward forwards and settles the claim as Handle does.
func (h *ClaimHandle) Forward(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) Result {
	d.ticket = h.c.e.o.Cache.Ticket()
	return h.c.forward(ctx, p, d, fwd)
}

// Release releases the claim.
func (h *ClaimHandle) Release(ctx context.Context) { h.c.release(ctx) }
