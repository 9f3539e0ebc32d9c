package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// cutLedger makes the ledger claim land and then cuts the delivery, as
// when shutdown abandons a delivery while its claim's batch commits.
type cutLedger struct {
	*sqlledger.Ledger
	cut func()
}

func (l *cutLedger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	if _, err := l.Ledger.Claim(context.WithoutCancel(ctx), req, now); err != nil {
		return idempotency.Claim{}, err
	}
	l.cut()
	return idempotency.Claim{}, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, ctx.Err())
}

// A delivery cut while its claims were being made leaves neither behind:
// the screen's claim and the ledger row that landed after it left are
// released, so the provider's retry is forwarded at once instead of
// getting 409 for the whole lease. Production stores: Redis screen,
// PostgreSQL ledger, ledger claims as confirmation.
func TestCutDeliveryReleasesItsClaims(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t)

	dctx, cut := context.WithCancel(ctx)
	opts := idempotency.Options{Screen: s, Ledger: &cutLedger{Ledger: l, cut: cut}, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second}
	e, err := idempotency.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var forwards atomic.Int64
	fwd := func(context.Context) (*idempotency.Upstream, error) {
		forwards.Add(1)
		return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("ok")}, nil
	}
	p := &idempotency.Policy{Route: "r", Final: idempotency.DefaultFinal, MaxBody: 1 << 20,
		Retention: time.Hour, WaitTimeout: time.Second}
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_cut"}}

	if r := e.Handle(dctx, p, d, fwd); r.Outcome != idempotency.Unavailable {
		t.Fatalf("cut delivery: %s, want unavailable", r.Outcome)
	}
	if _, err := l.Lookup(ctx, d.Ref); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("the cut delivery's ledger row is still there (%v): retries would wait for its lease", err)
	}
	opts.Ledger = l
	retry, err := idempotency.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if r := retry.Handle(ctx, p, d, fwd); r.Outcome != idempotency.Forwarded {
		t.Fatalf("the provider's retry: %s (%v), want forwarded: a claim of the cut delivery was left behind", r.Outcome, r.Err)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d forwards, want 1", n)
	}
}
