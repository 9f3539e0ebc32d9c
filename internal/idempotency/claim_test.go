package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// stores are the stores of one combination, as the engine under test and
// another replica sharing them use them.
type stores struct {
	engine, replica idempotency.Options
	screen          idempotency.Screen // nil without one
	ledger          idempotency.Ledger
}

// storeCombinations are the ways a claim can be held, each with the real
// drivers: what holds the claim the engine under test acquires, and the
// state of the key's ledger row while it is held.
var storeCombinations = []struct {
	name, held string
	row        idempotency.State
	open       func(t *testing.T) stores
}{
	{"memory screen, SQLite ledger", "screen", "", func(t *testing.T) stores {
		l := sqliteLedger(t)
		s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
		t.Cleanup(s.Close)
		o := idempotency.Options{Screen: s, Ledger: l}
		return stores{o, o, s, l}
	}},
	{"Redis screen, PostgreSQL ledger", "screen", "", func(t *testing.T) stores {
		l, s := productionStores(t)
		o := idempotency.Options{Screen: s, Ledger: l}
		return stores{o, o, s, l}
	}},
	{"SQLite ledger alone", "ledger", idempotency.StatePending, func(t *testing.T) stores {
		l := sqliteLedger(t)
		o := idempotency.Options{Ledger: l}
		return stores{o, o, nil, l}
	}},
	{"PostgreSQL ledger alone", "ledger", idempotency.StatePending, func(t *testing.T) stores {
		l := postgresLedger(t)
		o := idempotency.Options{Ledger: l}
		return stores{o, o, nil, l}
	}},
	{"Redis screen confirmed by a PostgreSQL claim", "screen+ledger", idempotency.StatePending, func(t *testing.T) stores {
		l, s := productionStores(t)
		o := idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true}
		return stores{o, o, s, l}
	}},
	{"Redis screen claim lost, PostgreSQL claim instead", "ledger+lost screen", idempotency.StatePending, func(t *testing.T) stores {
		l, s := productionStores(t)
		lost := idempotency.Options{Screen: lostAnswerScreen{s}, Ledger: l, ConfirmByClaim: true,
			ScreenUnavailable: idempotency.FailStore, BreakerFailures: 100}
		return stores{lost, idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true}, s, l}
	}},
}

var errNoAnswer = errors.New("the upstream did not answer in time")

// handleEngine is an engine on o whose forwards failing with errNoAnswer
// are ambiguous.
func handleEngine(t *testing.T, o idempotency.Options) *idempotency.Engine {
	t.Helper()
	o.Classify = ambiguousNoAnswer
	e := newEngine(t, o)
	t.Cleanup(e.Close)
	return e
}

var (
	handlePolicy = &idempotency.Policy{Route: "r", Final: idempotency.DefaultFinal, MaxBody: 1 << 20,
		Retention: time.Hour, RejectInflight: true}
	handleDelivery = idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_handle"}, Fingerprint: []byte("fp")}
)

// claimed opens a combination's stores, an engine and another replica on
// them, and claims handleDelivery's key through the engine's handle.
func claimed(t *testing.T, open func(*testing.T) stores, held string) (st stores, replica *idempotency.Engine, h *idempotency.ClaimHandle, forwards *atomic.Int64) {
	t.Helper()
	st = open(t)
	e := handleEngine(t, st.engine)
	forwards = new(atomic.Int64)
	return st, handleEngine(t, st.replica), acquired(t, e, held, forwards), forwards
}

// acquired claims handleDelivery's key through the handle and checks which
// stores hold it.
func acquired(t *testing.T, e *idempotency.Engine, held string, forwards *atomic.Int64) *idempotency.ClaimHandle {
	t.Helper()
	h, stop := e.Acquire(context.Background(), handlePolicy, handleDelivery, fwdCount(forwards))
	if stop != nil {
		t.Fatalf("acquire ended the delivery: %s %v", stop.Outcome, stop.Err)
	}
	if h.Status() != idempotency.Acquired || h.Stores() != held {
		t.Fatalf("claim %s held by %q, want acquired held by %q", h.Status(), h.Stores(), held)
	}
	return h
}

// ledgerState is the state of handleDelivery's ledger row, "" for none.
func ledgerState(t *testing.T, l idempotency.Ledger) idempotency.State {
	t.Helper()
	rec, err := l.Lookup(context.Background(), handleDelivery.Ref)
	if errors.Is(err, idempotency.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

// A claim acquired through the handle is held in its combination's stores:
// another replica's repeat gets 409 and is not forwarded, and the ledger
// holds a pending row exactly when the claim is (also) a ledger claim.
func TestClaimHandleHoldsTheKey(t *testing.T) {
	for _, sc := range storeCombinations {
		t.Run(sc.name, func(t *testing.T) {
			st, replica, h, forwards := claimed(t, sc.open, sc.held)
			defer h.Release(context.Background())

			r := replica.Handle(context.Background(), handlePolicy, handleDelivery, fwdCount(forwards))
			if r.Outcome != idempotency.Conflict || r.Status != http.StatusConflict {
				t.Fatalf("repeat at another replica: %s %d, want conflict 409", r.Outcome, r.Status)
			}
			if n := forwards.Load(); n != 0 {
				t.Fatalf("upstream received %d, want 0", n)
			}
			if got := ledgerState(t, st.ledger); got != sc.row {
				t.Fatalf("ledger row %q, want %q", got, sc.row)
			}
		})
	}
}

// A released claim frees the key in every store that held it (a lost
// screen claim in the background): the next delivery, at another replica,
// is forwarded, and nothing of the released claim is recorded.
func TestClaimHandleRelease(t *testing.T) {
	for _, sc := range storeCombinations {
		t.Run(sc.name, func(t *testing.T) {
			st, replica, h, forwards := claimed(t, sc.open, sc.held)
			h.Release(context.Background())
			if got := ledgerState(t, st.ledger); got != "" {
				t.Fatalf("ledger row %q after the release, want none", got)
			}
			var last idempotency.Result
			testenv.Eventually(t, 5*time.Second, "the next delivery to be forwarded", func() bool {
				last = replica.Handle(context.Background(), handlePolicy, handleDelivery, fwdCount(forwards))
				return last.Outcome != idempotency.Conflict
			})
			if last.Outcome != idempotency.Forwarded || forwards.Load() != 1 {
				t.Fatalf("next delivery: %s, upstream received %d; want forwarded once", last.Outcome, forwards.Load())
			}
		})
	}
}

// A final answer forwarded through the handle is committed: the ledger
// holds it done, the screen (if any) answers it done, and a repeat at
// another replica is replayed without reaching the upstream.
func TestClaimHandleCommit(t *testing.T) {
	for _, sc := range storeCombinations {
		t.Run(sc.name, func(t *testing.T) {
			st, replica, h, forwards := claimed(t, sc.open, sc.held)
			ctx := context.Background()
			if r := h.Forward(ctx, handlePolicy, handleDelivery, fwdCount(forwards)); r.Outcome != idempotency.Forwarded {
				t.Fatalf("forward: %s %v", r.Outcome, r.Err)
			}
			if got := ledgerState(t, st.ledger); got != idempotency.StateDone {
				t.Fatalf("ledger row %q, want done", got)
			}
			if st.screen != nil {
				testenv.Eventually(t, 5*time.Second, "the screen's entry to be done", func() bool {
					c, err := st.screen.Claim(ctx, idempotency.ClaimRequest{Ref: handleDelivery.Ref, Owner: "probe", Lease: time.Second})
					return err == nil && c.Status == idempotency.Done
				})
			}
			r := replica.Handle(ctx, handlePolicy, handleDelivery, fwdCount(forwards))
			if r.Outcome != idempotency.Replayed || string(r.Replay.Body) != "ok" {
				t.Fatalf("repeat at another replica: %s, want the recorded answer replayed", r.Outcome)
			}
			if n := forwards.Load(); n != 1 {
				t.Fatalf("upstream received %d, want 1", n)
			}
		})
	}
}

// An ambiguous failure on a hold route holds the key in the ledger
// through the handle, whichever stores held the claim: a repeat at
// another replica gets 409 held and is not forwarded.
func TestClaimHandleHold(t *testing.T) {
	p := *handlePolicy
	p.HoldAmbiguous = true
	for _, sc := range storeCombinations {
		t.Run(sc.name, func(t *testing.T) {
			st, replica, h, forwards := claimed(t, sc.open, sc.held)
			ctx := context.Background()
			noAnswer := func(context.Context) (*idempotency.Upstream, error) {
				forwards.Add(1)
				return nil, errNoAnswer
			}
			if r := h.Forward(ctx, &p, handleDelivery, noAnswer); r.Outcome != idempotency.HeldKey {
				t.Fatalf("forward without an answer: %s %v, want held", r.Outcome, r.Err)
			}
			if got := ledgerState(t, st.ledger); got != idempotency.StateHeld {
				t.Fatalf("ledger row %q, want held", got)
			}
			r := replica.Handle(ctx, &p, handleDelivery, fwdCount(forwards))
			if r.Outcome != idempotency.HeldKey || r.Status != http.StatusConflict {
				t.Fatalf("repeat at another replica: %s %d, want held 409", r.Outcome, r.Status)
			}
			if n := forwards.Load(); n != 1 {
				t.Fatalf("upstream received %d, want 1", n)
			}
		})
	}
}

// A repeat in the process that is forwarding the first delivery finds it
// in flight there (no store asked), waits for it and is replayed.
func TestClaimHandleInFlightHere(t *testing.T) {
	st := storeCombinations[0].open(t)
	e := handleEngine(t, st.engine)
	forwards := new(atomic.Int64)
	h := acquired(t, e, "screen", forwards)
	release := make(chan struct{})
	blocked := func(ctx context.Context) (*idempotency.Upstream, error) {
		<-release
		return fwdCount(forwards)(ctx)
	}
	ctx := context.Background()
	first := make(chan idempotency.Result, 1)
	go func() { first <- h.Forward(ctx, handlePolicy, handleDelivery, blocked) }()
	testenv.Eventually(t, 5*time.Second, "the repeat to find the delivery in flight here", func() bool {
		r, stop := e.Acquire(ctx, handlePolicy, handleDelivery, fwdCount(forwards))
		return stop == nil && r.Status() == idempotency.InFlight && r.Stores() == "local"
	})
	wait := *handlePolicy
	wait.RejectInflight, wait.WaitTimeout = false, 5*time.Second
	repeat := make(chan idempotency.Result, 1)
	go func() { repeat <- e.Handle(ctx, &wait, handleDelivery, fwdCount(forwards)) }()
	close(release)
	if r := <-first; r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s %v", r.Outcome, r.Err)
	}
	if r := <-repeat; r.Outcome != idempotency.Replayed {
		t.Fatalf("repeat: %s %v, want replayed", r.Outcome, r.Err)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}
