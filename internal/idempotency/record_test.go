package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// What is recorded is what repeats get (SPEC §4: exactly the recorded
// status, kept headers and body, byte for byte).

// record.max_body: bodies LARGER than it are recorded without body; a
// body of exactly max_body bytes is recorded and replayed whole.
func TestBodyOfExactlyMaxBodyIsRecorded(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, idempotency.Options{Ledger: sqliteLedger(t)})
	body := []byte(`{"receipt":"exactly max_body"}`)
	p := *racePolicy
	p.MaxBody = len(body)
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_at_max_body"}}
	if r := e.Handle(ctx, &p, d, fwdBody(&forwards, body)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	r := e.Handle(ctx, &p, d, fwdBody(&forwards, body))
	if r.Outcome != idempotency.Replayed || r.Replay == nil {
		t.Fatalf("repeat: %s, want replayed", r.Outcome)
	}
	if r.Replay.BodyOmitted || !bytes.Equal(r.Replay.Body, body) {
		t.Fatalf("replay of a %d-byte body with max_body %d: omitted %v, body %q; want the body whole",
			len(body), p.MaxBody, r.Replay.BodyOmitted, r.Replay.Body)
	}
}

// A kept header the upstream sent several times is recorded with all its
// values (joined as one field value, RFC 9110 §5.3), not just the first.
func TestKeptHeaderKeepsEveryValue(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, idempotency.Options{Ledger: sqliteLedger(t)})
	p := *racePolicy
	p.KeepHeaders = []string{"Content-Type", "Link"}
	fwd := func(context.Context) (*idempotency.Upstream, error) {
		h := http.Header{"Content-Type": {"application/json"}, "Link": {"</a>; rel=a", "</b>; rel=b"}}
		return &idempotency.Upstream{Status: 201, Header: h, Body: []byte(`{}`)}, nil
	}
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_multi_header"}}
	if r := e.Handle(ctx, &p, d, fwd); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	r := e.Handle(ctx, &p, d, fwd)
	if r.Outcome != idempotency.Replayed || r.Replay == nil {
		t.Fatalf("repeat: %s, want replayed", r.Outcome)
	}
	if got, want := r.Replay.Headers["Link"], "</a>; rel=a, </b>; rel=b"; got != want {
		t.Fatalf("replayed Link %q, want %q (every value the upstream sent)", got, want)
	}
	if got := r.Replay.Headers["Content-Type"]; got != "application/json" {
		t.Fatalf("replayed Content-Type %q", got)
	}
}

// The one documented second copy: a claim taken over after its lease
// while the first delivery was still running, and the first delivery
// recorded first. The second copy's commit loses (ErrNotOwner); its
// provider still gets what its upstream said, but every REPEAT must get
// the record that won — the screen and the local cache must not keep the
// losing copy's answer.
func TestLosingCopyAfterTakeoverIsNotReplayed(t *testing.T) {
	for _, cache := range []int{32 << 20, 0} {
		t.Run(fmt.Sprintf("local cache %d", cache), func(t *testing.T) {
			ctx := context.Background()
			l := sqliteLedger(t)
			// As gateway.New builds them for screen.driver: memory.
			s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10, NoDone: cache > 0})
			t.Cleanup(s.Close)
			e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore,
				Cache: idempotency.NewCache(cache, 64<<10, 0)})
			t.Cleanup(e.Close)
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_second_copy"}}
			winner := []byte(`{"copy":"first, recorded"}`)
			var forwards atomic.Int64
			// While this copy is at the upstream, the first delivery (its
			// lease long expired, its process frozen, now awake) records.
			fwd := func(context.Context) (*idempotency.Upstream, error) {
				forwards.Add(1)
				now := time.Now()
				rec := &idempotency.Record{Ref: d.Ref, State: idempotency.StateDone,
					Response:  idempotency.Response{Status: 200, Body: winner},
					CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}
				if err := l.Commit(ctx, rec, "first-owner", now); err != nil {
					return nil, fmt.Errorf("the first delivery's commit: %w", err)
				}
				return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte(`{"copy":"second, lost"}`)}, nil
			}
			r := e.Handle(ctx, racePolicy, d, fwd)
			if r.Outcome != idempotency.Forwarded || r.Upstream == nil || string(r.Upstream.Body) != `{"copy":"second, lost"}` {
				t.Fatalf("second copy: %s (%v), want forwarded with its own upstream's answer", r.Outcome, r.Err)
			}
			for i := range 2 {
				r := e.Handle(ctx, racePolicy, d, fwdBody(&forwards, []byte("third copy")))
				if r.Outcome != idempotency.Replayed || r.Replay == nil || !bytes.Equal(r.Replay.Body, winner) {
					body := ""
					if r.Replay != nil {
						body = string(r.Replay.Body)
					}
					t.Fatalf("repeat %d: %s %q, want a replay of the recorded answer %q", i+1, r.Outcome, body, winner)
				}
			}
			if n := forwards.Load(); n != 1 {
				t.Fatalf("upstream received %d, want 1 through this engine", n)
			}
		})
	}
}

// A repeat with a different fingerprint that arrives while the first
// delivery is in flight is key reuse (422 mismatch), as it is once the
// first is recorded — not a 409 conflict that tells the provider to send
// the same thing again later.
func TestKeyReuseWhileInFlightIsMismatch(t *testing.T) {
	ctx := context.Background()
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: sqliteLedger(t), ScreenUnavailable: idempotency.FailStore})
	t.Cleanup(e.Close)
	p := *racePolicy
	p.RejectInflight = true
	ref := idempotency.Ref{Route: "r", Key: "evt_reused_in_flight"}
	at, release := make(chan struct{}), make(chan struct{})
	var forwards atomic.Int64
	first := make(chan idempotency.Result, 1)
	go func() {
		first <- e.Handle(ctx, &p, idempotency.Delivery{Ref: ref, Fingerprint: []byte("amount=100")},
			func(context.Context) (*idempotency.Upstream, error) {
				forwards.Add(1)
				close(at)
				<-release
				return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("ok")}, nil
			})
	}()
	<-at
	r := e.Handle(ctx, &p, idempotency.Delivery{Ref: ref, Fingerprint: []byte("amount=999")}, fwdBody(&forwards, []byte("no")))
	close(release)
	if r.Outcome != idempotency.Mismatch || r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("different content under the key of an in-flight delivery: %s %d, want mismatch 422", r.Outcome, r.Status)
	}
	if f := <-first; f.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s", f.Outcome)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}

// The same for a held key (record.ambiguous: hold): a delivery with a
// different fingerprint under the key of a held one is key reuse (422
// mismatch), not a repeat of the held delivery to be answered 409 and
// sent again and again until an operator resolves a different event.
func TestKeyReuseOfAHeldKeyIsMismatch(t *testing.T) {
	ctx := context.Background()
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: sqliteLedger(t), ScreenUnavailable: idempotency.FailStore,
		Classify: func(error) (int, bool) { return http.StatusGatewayTimeout, true }})
	t.Cleanup(e.Close)
	p := *racePolicy
	p.HoldAmbiguous = true
	ref := idempotency.Ref{Route: "r", Key: "evt_reused_held"}
	var forwards atomic.Int64
	lost := func(context.Context) (*idempotency.Upstream, error) {
		forwards.Add(1)
		return nil, context.DeadlineExceeded
	}
	if r := e.Handle(ctx, &p, idempotency.Delivery{Ref: ref, Fingerprint: []byte("amount=100")}, lost); r.Outcome != idempotency.HeldKey {
		t.Fatalf("delivery without an answer: %s (%v), want held", r.Outcome, r.Err)
	}
	if r := e.Handle(ctx, &p, idempotency.Delivery{Ref: ref, Fingerprint: []byte("amount=100")}, lost); r.Outcome != idempotency.HeldKey {
		t.Fatalf("repeat of the held delivery: %s, want held", r.Outcome)
	}
	r := e.Handle(ctx, &p, idempotency.Delivery{Ref: ref, Fingerprint: []byte("amount=999")}, fwdBody(&forwards, []byte("no")))
	if r.Outcome != idempotency.Mismatch || r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("different content under the key of a held delivery: %s %d, want mismatch 422", r.Outcome, r.Status)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}
