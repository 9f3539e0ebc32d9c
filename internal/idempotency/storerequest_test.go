package idempotency_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Only a delivery that is forwarded or stored copies its request. Repeats
// of one key, waiting for their first delivery or replayed, used to copy
// it too: each pinned a second copy of its body for as long as it waited,
// so a sender repeating one key on many connections held twice the
// memory its bodies take.
func TestOnlyTheStoredDeliveryCopiesItsRequest(t *testing.T) {
	for _, async := range []bool{false, true} {
		name := "sync-record-request"
		if async {
			name = "async"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := sqliteLedger(t)
			l.UseJobs(&countedJobs{})
			p := *racePolicy
			p.WaitTimeout = 30 * time.Second
			if async {
				p.Ack = &idempotency.Response{Status: 202, Body: []byte("accepted")}
			}
			screen := memScreen(t)
			e := newEngine(t, idempotency.Options{Screen: screen, Ledger: l, Queue: l})
			t.Cleanup(e.Close)

			var copies atomic.Int64
			body := []byte(`{"id":"evt_1"}`)
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: p.Route, Key: "evt_1"}, Fingerprint: []byte("fp"),
				StoreRequest: func() *idempotency.Request {
					copies.Add(1)
					return &idempotency.Request{Method: "POST", Path: "/hooks", Headers: http.Header{}, Body: append([]byte(nil), body...)}
				}}
			var forwards atomic.Int64
			entered, release := make(chan struct{}), make(chan struct{})
			first := make(chan idempotency.Result, 1)
			go func() {
				first <- e.Handle(ctx, &p, d, func(context.Context) (*idempotency.Upstream, error) {
					forwards.Add(1)
					close(entered)
					<-release
					return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("booked")}, nil
				})
			}()
			if async {
				if r := <-first; r.Outcome != idempotency.Accepted {
					t.Fatalf("first delivery: %s (%v), want accepted", r.Outcome, r.Err)
				}
				// The screen learns of it in the background; a repeat
				// before that finds it by trying to store it.
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, found, _ := screen.Peek(ctx, d.Ref); found {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the screen never held the stored delivery")
					}
				}
			} else {
				<-entered
			}

			const repeats = 20
			var wg sync.WaitGroup
			results := make([]idempotency.Result, repeats)
			for i := range repeats {
				wg.Go(func() { results[i] = e.Handle(ctx, &p, d, fwdCount(&forwards)) })
			}
			if !async {
				time.Sleep(100 * time.Millisecond) // most repeats are waiting by now
				close(release)
				if r := <-first; r.Outcome != idempotency.Forwarded {
					t.Fatalf("first delivery: %s (%v), want forwarded", r.Outcome, r.Err)
				}
			}
			wg.Wait()

			for i, r := range results {
				if r.Outcome != idempotency.Replayed {
					t.Fatalf("repeat %d: %s (%v), want replayed", i, r.Outcome, r.Err)
				}
			}
			if n := copies.Load(); n != 1 {
				t.Errorf("the request was copied %d times for one stored delivery and %d repeats, want once", n, repeats)
			}
			if n := forwards.Load(); !async && n != 1 {
				t.Errorf("the upstream got %d copies, want 1", n)
			}
			stored, err := l.Request(ctx, d.Ref)
			if err != nil || stored == nil || string(stored.Body) != string(body) {
				t.Fatalf("stored request %+v (%v), want the delivery's body", stored, err)
			}
		})
	}
}
