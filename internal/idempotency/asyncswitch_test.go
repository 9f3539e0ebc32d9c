package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// A route switched from sync to delivery: async (a configuration edit and
// a restart) keeps answering the records it made while synchronous as it
// did: the provider got the upstream's answer then, not an
// acknowledgement. A recorded 422 acknowledged as 202 would tell the
// provider the application took an event it refused, and a held key
// acknowledged would stop the retries an operator's release waits for,
// with nothing queued to deliver it. New deliveries are acknowledged.
func TestAsyncRouteKeepsTheAnswersOfSyncRecords(t *testing.T) {
	setups := []struct {
		name           string
		stores         func(t *testing.T) (l *sqlledger.Ledger, before, after idempotency.Screen)
		confirmByClaim bool
	}{
		{name: "sqlite-ledger-claims", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen, idempotency.Screen) {
			return sqliteLedger(t), nil, nil
		}},
		{name: "sqlite-memory", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen, idempotency.Screen) {
			return sqliteLedger(t), memScreen(t), memScreen(t) // a restart empties the memory screen
		}},
		{name: "postgres-redis", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen, idempotency.Screen) {
			l, s := productionStores(t) // Redis outlives the restart
			return l, s, s
		}},
		{name: "postgres-redis-confirm-by-claim", confirmByClaim: true, stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen, idempotency.Screen) {
			l, s := productionStores(t)
			return l, s, s
		}},
	}
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, before, after := su.stores(t)
			jobs := &countedJobs{}
			l.UseJobs(jobs)
			delivery := func(key string) idempotency.Delivery {
				return idempotency.Delivery{Ref: idempotency.Ref{Route: racePolicy.Route, Key: key}, Fingerprint: []byte("fp-" + key),
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Headers: http.Header{}, Body: []byte(`{"id":"` + key + `"}`)}}
			}
			var forwards atomic.Int64
			answer := func(status int, body string) idempotency.ForwardFunc {
				return func(context.Context) (*idempotency.Upstream, error) {
					forwards.Add(1)
					return &idempotency.Upstream{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}, nil
				}
			}
			noAnswer := func(context.Context) (*idempotency.Upstream, error) {
				forwards.Add(1)
				return nil, errNoAnswer
			}

			syncPolicy := *racePolicy
			syncPolicy.HoldAmbiguous = true
			sync := newEngine(t, idempotency.Options{Screen: before, Ledger: l, ConfirmByClaim: su.confirmByClaim,
				Cache: idempotency.NewCache(1<<20, 64<<10, 0), Classify: ambiguousNoAnswer})
			t.Cleanup(sync.Close)
			if r := sync.Handle(ctx, &syncPolicy, delivery("evt_refused"), answer(422, `{"error":"refused"}`)); r.Outcome != idempotency.Forwarded {
				t.Fatalf("sync delivery answered 422: %s (%v)", r.Outcome, r.Err)
			}
			if r := sync.Handle(ctx, &syncPolicy, delivery("evt_taken"), answer(200, `{"taken":true}`)); r.Outcome != idempotency.Forwarded {
				t.Fatalf("sync delivery answered 200: %s (%v)", r.Outcome, r.Err)
			}
			if r := sync.Handle(ctx, &syncPolicy, delivery("evt_held"), noAnswer); r.Outcome != idempotency.HeldKey {
				t.Fatalf("sync delivery without an answer: %s (%v), want held", r.Outcome, r.Err)
			}
			sync.Close()

			// Restarted with the route async.
			asyncPolicy := syncPolicy
			asyncPolicy.Ack = &idempotency.Response{Status: 202, Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("accepted")}
			async := newEngine(t, idempotency.Options{Screen: after, Ledger: l, Queue: l, ConfirmByClaim: su.confirmByClaim,
				Cache: idempotency.NewCache(1<<20, 64<<10, 0), Classify: ambiguousNoAnswer, RetryAfter: 3 * time.Second})
			t.Cleanup(async.Close)
			for round := 1; round <= 2; round++ { // the second round meets what the first left in screen and cache
				r := async.Handle(ctx, &asyncPolicy, delivery("evt_refused"), answer(200, "again"))
				if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 422 || string(r.Replay.Body) != `{"error":"refused"}` {
					t.Fatalf("round %d, recorded 422: %s %+v; want the recorded 422 replayed", round, r.Outcome, r.Replay)
				}
				r = async.Handle(ctx, &asyncPolicy, delivery("evt_taken"), answer(200, "again"))
				if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 200 || string(r.Replay.Body) != `{"taken":true}` {
					t.Fatalf("round %d, recorded 200: %s %+v; want the recorded 200 replayed", round, r.Outcome, r.Replay)
				}
				r = async.Handle(ctx, &asyncPolicy, delivery("evt_held"), answer(200, "again"))
				if r.Outcome != idempotency.HeldKey || r.Status != http.StatusConflict || r.Replay != nil {
					t.Fatalf("round %d, held key: %s status %d replay %+v; want 409 held", round, r.Outcome, r.Status, r.Replay)
				}
				r = async.Handle(ctx, &asyncPolicy, delivery("evt_new"), answer(200, "never"))
				want := idempotency.Accepted
				if round == 2 {
					want = idempotency.Replayed
				}
				if r.Outcome != want || (want == idempotency.Replayed && (r.Replay == nil || r.Replay.Status != 202 || string(r.Replay.Body) != "accepted")) {
					t.Fatalf("round %d, new delivery: %s %+v; want %s with the acknowledgement", round, r.Outcome, r.Replay, want)
				}
			}
			if n := forwards.Load(); n != 3 {
				t.Errorf("the upstream got %d deliveries, want the 3 sync ones", n)
			}
			if n := jobs.n.Load(); n != 1 {
				t.Errorf("%d delivery jobs stored, want 1 (the new delivery's)", n)
			}

			// The held key queued again (as a release does for an
			// acknowledged delivery; an operator's release of this one,
			// held while the route was sync, deletes it): its provider
			// is acknowledged from then on, and still once the queue
			// delivered it, whatever the application answered.
			held := delivery("evt_held").Ref
			if _, err := l.Requeue(ctx, held, true, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			setRecordState(t, l, held, idempotency.StateDone, `{"error":"refused"}`)
			// Another replica: nothing of this key in its cache.
			other := newEngine(t, idempotency.Options{Screen: after, Ledger: l, Queue: l, ConfirmByClaim: su.confirmByClaim,
				Cache: idempotency.NewCache(1<<20, 64<<10, 0), Classify: ambiguousNoAnswer})
			t.Cleanup(other.Close)
			r := other.Handle(ctx, &asyncPolicy, delivery("evt_held"), answer(200, "again"))
			if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 202 || string(r.Replay.Body) != "accepted" {
				t.Fatalf("released, then delivered: %s %+v; want the acknowledgement its provider got once released", r.Outcome, r.Replay)
			}
		})
	}
}

// ambiguousNoAnswer classifies errNoAnswer as a forward that may have
// reached the upstream.
func ambiguousNoAnswer(err error) (int, bool) {
	return http.StatusGatewayTimeout, errors.Is(err, errNoAnswer)
}
