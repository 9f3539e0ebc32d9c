package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// setRecordState writes a record's state as the queue would (a dead
// delivery, or one delivered with the upstream's answer body).
func setRecordState(t *testing.T, l *sqlledger.Ledger, ref idempotency.Ref, state idempotency.State, body string) {
	t.Helper()
	db, err := l.DB()
	if err != nil {
		t.Fatal(err)
	}
	q := `UPDATE hookstamp_records SET state = ?, status = ?, headers = ?, body = ? WHERE route = ? AND "key" = ?`
	if l.Driver() == sqlledger.DriverPostgres {
		q = `UPDATE hookstamp_records SET state = $1, status = $2, headers = $3, body = $4 WHERE route = $5 AND "key" = $6`
	}
	status := 0
	if state == idempotency.StateDone {
		status = 200
	}
	res, err := db.ExecContext(context.Background(), q, string(state), status, `{"Content-Type":"application/json"}`, []byte(body), ref.Route, ref.Key)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("set %s %s: %d rows", ref.Key, state, n)
	}
}

// A route switched from delivery: async to sync (a configuration edit and
// a restart) keeps the records it stored while async. A provider's retry
// of a queued or dead one must not be told it was taken: the record holds
// no answer of the upstream (status 0, no body), and "replaying" it sent a
// made-up 200 with an empty body and forwarded nothing. A queued delivery
// answers as one in flight (409 conflict + Retry-After), a dead one as a
// held key (409 held), each without a forward; a delivery the queue did
// deliver replays the upstream's recorded answer.
func TestSyncRouteAnswersAsyncRecordsByTheirState(t *testing.T) {
	type setup struct {
		name   string
		ledger func(t *testing.T) *sqlledger.Ledger
		// screens returns the async engine's screen and, after the
		// restart, the sync engine's (nil: ledger claims).
		screens        func(t *testing.T, l *sqlledger.Ledger) (before, after idempotency.Screen)
		confirmByClaim bool
	}
	setups := []setup{
		{name: "sqlite-ledger-claims", ledger: func(t *testing.T) *sqlledger.Ledger { return sqliteLedger(t) },
			screens: func(*testing.T, *sqlledger.Ledger) (idempotency.Screen, idempotency.Screen) { return nil, nil }},
		{name: "sqlite-memory", ledger: func(t *testing.T) *sqlledger.Ledger { return sqliteLedger(t) },
			// A restart empties the memory screen.
			screens: func(t *testing.T, _ *sqlledger.Ledger) (idempotency.Screen, idempotency.Screen) {
				return memScreen(t), memScreen(t)
			}},
		{name: "postgres-ledger-claims", ledger: func(t *testing.T) *sqlledger.Ledger { return postgresLedger(t) },
			screens: func(*testing.T, *sqlledger.Ledger) (idempotency.Screen, idempotency.Screen) { return nil, nil }},
		{name: "postgres-redis", ledger: nil, confirmByClaim: false},
		{name: "postgres-redis-confirm-by-claim", ledger: nil, confirmByClaim: true},
	}
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var l *sqlledger.Ledger
			var before, after idempotency.Screen
			if su.ledger == nil {
				// Redis outlives the restart: it still holds the
				// acknowledgements the async route gave.
				pg, s := productionStores(t)
				l, before, after = pg, s, s
			} else {
				l = su.ledger(t)
				before, after = su.screens(t, l)
			}
			l.UseJobs(&countedJobs{})

			ack := &idempotency.Response{Status: 202, Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("accepted")}
			asyncPolicy := *racePolicy
			asyncPolicy.Ack = ack
			async := newEngine(t, idempotency.Options{Screen: before, Ledger: l, Queue: l, ConfirmByClaim: su.confirmByClaim})
			t.Cleanup(async.Close)
			delivery := func(key string) idempotency.Delivery {
				return idempotency.Delivery{Ref: idempotency.Ref{Route: racePolicy.Route, Key: key}, Fingerprint: []byte("fp-" + key),
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Headers: http.Header{}, Body: []byte(`{"id":"` + key + `"}`)}}
			}
			var forwards atomic.Int64
			for _, key := range []string{"evt_queued", "evt_dead", "evt_done"} {
				r := async.Handle(ctx, &asyncPolicy, delivery(key), fwdCount(&forwards))
				if r.Outcome != idempotency.Accepted {
					t.Fatalf("async intake of %s: %s (%v)", key, r.Outcome, r.Err)
				}
				// A repeat while async gets the acknowledgement, and
				// leaves it in the screen.
				if r := async.Handle(ctx, &asyncPolicy, delivery(key), fwdCount(&forwards)); r.Outcome != idempotency.Replayed || r.Replay.Status != 202 {
					t.Fatalf("async repeat of %s: %s %+v", key, r.Outcome, r.Replay)
				}
			}
			setRecordState(t, l, delivery("evt_dead").Ref, idempotency.StateDead, "")
			setRecordState(t, l, delivery("evt_done").Ref, idempotency.StateDone, `{"taken":true}`)
			async.Close()

			// Restarted with the route synchronous.
			syncPolicy := *racePolicy
			sync := newEngine(t, idempotency.Options{Screen: after, Ledger: l, ConfirmByClaim: su.confirmByClaim,
				Cache: idempotency.NewCache(1<<20, 64<<10, 0), RetryAfter: 3 * time.Second})
			t.Cleanup(sync.Close)
			for round := 1; round <= 2; round++ { // the second round meets what the first left in screen and cache
				r := sync.Handle(ctx, &syncPolicy, delivery("evt_queued"), fwdCount(&forwards))
				if r.Outcome != idempotency.Conflict || r.Status != http.StatusConflict || r.RetryAfter != 3*time.Second || r.Replay != nil {
					t.Fatalf("round %d, queued record: %s status %d retry-after %v replay %+v; want 409 conflict with Retry-After",
						round, r.Outcome, r.Status, r.RetryAfter, r.Replay)
				}
				r = sync.Handle(ctx, &syncPolicy, delivery("evt_dead"), fwdCount(&forwards))
				if r.Outcome != idempotency.HeldKey || r.Status != http.StatusConflict || r.RetryAfter != 3*time.Second || r.Replay != nil {
					t.Fatalf("round %d, dead record: %s status %d retry-after %v replay %+v; want 409 held with Retry-After",
						round, r.Outcome, r.Status, r.RetryAfter, r.Replay)
				}
				r = sync.Handle(ctx, &syncPolicy, delivery("evt_done"), fwdCount(&forwards))
				if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 200 || string(r.Replay.Body) != `{"taken":true}` {
					t.Fatalf("round %d, delivered record: %s %+v; want the upstream's recorded 200", round, r.Outcome, r.Replay)
				}
				if n := forwards.Load(); n != 0 {
					t.Fatalf("round %d: the upstream got %d copies through the state machine, want 0 (the queue delivers stored events)", round, n)
				}
			}
			// The queue delivers the queued one: its retry now replays
			// the upstream's answer, not a stale 409 or acknowledgement.
			setRecordState(t, l, delivery("evt_queued").Ref, idempotency.StateDone, `{"late":true}`)
			r := sync.Handle(ctx, &syncPolicy, delivery("evt_queued"), fwdCount(&forwards))
			if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != 200 || string(r.Replay.Body) != `{"late":true}` {
				t.Fatalf("queued record delivered since: %s %+v; want the upstream's recorded 200", r.Outcome, r.Replay)
			}
			if n := forwards.Load(); n != 0 {
				t.Fatalf("the upstream got %d copies, want 0", n)
			}
		})
	}
}

// memScreen is a memory screen closed when the test ends.
func memScreen(t *testing.T) idempotency.Screen {
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	return s
}
