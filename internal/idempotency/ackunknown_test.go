package idempotency_test

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// setAckUnknown leaves a record's acked NULL, as a release that does not
// know the column leaves every row it writes.
func setAckUnknown(t *testing.T, l *sqlledger.Ledger, ref idempotency.Ref) {
	t.Helper()
	db, err := l.DB()
	if err != nil {
		t.Fatal(err)
	}
	q := `UPDATE hookstamp_records SET acked = NULL WHERE route = ? AND "key" = ?`
	if l.Driver() == sqlledger.DriverPostgres {
		q = `UPDATE hookstamp_records SET acked = NULL WHERE route = $1 AND "key" = $2`
	}
	res, err := db.ExecContext(context.Background(), q, ref.Route, ref.Key)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("acked of %s: %d rows", ref.Key, n)
	}
}

// During a rolling update, replicas of a release without the acked column
// store async deliveries in the ledger the new replicas read: those rows
// (and all stored before the upgrade) have acked NULL. Once delivered, or
// held, and out of screen and cache, a repeat on the async route must get
// the route's acknowledgement byte for byte, as the older release answered
// it: it was answered the upstream's recorded 200 and body, or 409 held.
// On a synchronous route such a row replays its recorded answer, as that
// release did. A record this release made synchronously (acked false)
// keeps its recorded answer on a route async now. Each is answered from
// the ledger, then from what that left in screen and cache (the cache's
// and the Redis entry's flag carry it), without a forward.
func TestRowsOfAnOlderReleaseAreAnsweredAsItAnsweredThem(t *testing.T) {
	setups := []struct {
		name           string
		stores         func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen)
		confirmByClaim bool
	}{
		{name: "sqlite-ledger-claims", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen) { return sqliteLedger(t), nil }},
		{name: "sqlite-memory", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen) { return sqliteLedger(t), memScreen(t) }},
		{name: "postgres-ledger-claims", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen) { return postgresLedger(t), nil }},
		{name: "postgres-redis", stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen) {
			l, s := productionStores(t)
			return l, s
		}},
		{name: "postgres-redis-confirm-by-claim", confirmByClaim: true, stores: func(t *testing.T) (*sqlledger.Ledger, idempotency.Screen) {
			l, s := productionStores(t)
			return l, s
		}},
	}
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, screen := su.stores(t)
			jobs := &countedJobs{}
			l.UseJobs(jobs)
			now := time.Now()
			ref := func(key string) idempotency.Ref { return idempotency.Ref{Route: racePolicy.Route, Key: key} }
			request := func(key string) *idempotency.Request {
				return &idempotency.Request{Method: "POST", Path: "/hooks", Headers: http.Header{}, Body: []byte(`{"id":"` + key + `"}`)}
			}
			delivery := func(key string) idempotency.Delivery {
				return idempotency.Delivery{Ref: ref(key), Fingerprint: []byte("fp-" + key), Request: request(key)}
			}

			// Stored by an older release's async intake, then delivered
			// (the upstream's 200 recorded) or held.
			older := map[string]idempotency.State{
				"evt_older_done": idempotency.StateDone, "evt_older_held": idempotency.StateHeld,
				"evt_older_done_a": idempotency.StateDone, "evt_older_held_a": idempotency.StateHeld,
			}
			for key, st := range older {
				rec := &idempotency.Record{Ref: ref(key), State: idempotency.StateQueued, Fingerprint: []byte("fp-" + key),
					CreatedAt: now, ExpiresAt: now.Add(time.Hour), Request: request(key)}
				if _, err := l.Enqueue(ctx, rec, "", now); err != nil {
					t.Fatal(err)
				}
				setRecordState(t, l, ref(key), st, `{"taken":true}`)
				setAckUnknown(t, l, ref(key))
			}
			// Recorded by this release while the route was synchronous.
			for key, st := range map[string]idempotency.State{"evt_sync_done": idempotency.StateDone, "evt_sync_held": idempotency.StateHeld} {
				rec := &idempotency.Record{Ref: ref(key), State: st, Fingerprint: []byte("fp-" + key), ExpiresAt: now.Add(time.Hour)}
				if st == idempotency.StateDone {
					rec.Response = idempotency.Response{Status: 422, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"error":"refused"}`)}
				}
				if err := l.Commit(ctx, rec, "sync-owner", now); err != nil {
					t.Fatal(err)
				}
			}

			ack := &idempotency.Response{Status: 202, Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("accepted")}
			syncPolicy := *racePolicy
			asyncPolicy := *racePolicy
			asyncPolicy.Ack = ack
			var forwards atomic.Int64
			engine := func() *idempotency.Engine {
				e := newEngine(t, idempotency.Options{Screen: screen, Ledger: l, Queue: l, ConfirmByClaim: su.confirmByClaim,
					Cache: idempotency.NewCache(1<<20, 64<<10, 0), RetryAfter: 3 * time.Second})
				t.Cleanup(e.Close)
				return e
			}
			acked := func(phase, key string, r idempotency.Result) {
				t.Helper()
				if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != ack.Status ||
					!maps.Equal(r.Replay.Headers, ack.Headers) || !bytes.Equal(r.Replay.Body, ack.Body) {
					t.Fatalf("%s, %s: %s status %d %+v; want the acknowledgement, byte for byte", phase, key, r.Outcome, r.Status, r.Replay)
				}
			}
			replayed := func(phase, key string, r idempotency.Result, status int, body string) {
				t.Helper()
				if r.Outcome != idempotency.Replayed || r.Replay == nil || r.Replay.Status != status || string(r.Replay.Body) != body {
					t.Fatalf("%s, %s: %s status %d %+v; want the recorded %d %s", phase, key, r.Outcome, r.Status, r.Replay, status, body)
				}
			}
			held := func(phase, key string, r idempotency.Result) {
				t.Helper()
				if r.Outcome != idempotency.HeldKey || r.Status != http.StatusConflict || r.Replay != nil {
					t.Fatalf("%s, %s: %s status %d %+v; want 409 held", phase, key, r.Outcome, r.Status, r.Replay)
				}
			}
			// answer is what a repeat of key gets on a route async (or not).
			answer := func(phase string, e *idempotency.Engine, async bool, key string) {
				t.Helper()
				p := &syncPolicy
				if async {
					p = &asyncPolicy
				}
				r := e.Handle(ctx, p, delivery(key), fwdCount(&forwards))
				switch older[key] {
				case idempotency.StateDone:
					if async {
						acked(phase, key, r)
					} else {
						replayed(phase, key, r, 200, `{"taken":true}`)
					}
				case idempotency.StateHeld:
					if async {
						acked(phase, key, r)
					} else {
						held(phase, key, r)
					}
				default:
					if key == "evt_sync_done" {
						replayed(phase, key, r, 422, `{"error":"refused"}`)
					} else {
						held(phase, key, r)
					}
				}
			}
			on := func(phase string, e *idempotency.Engine, async bool, keys ...string) {
				t.Helper()
				for round := 1; round <= 2; round++ { // the second meets what the first left in screen and cache
					for _, key := range keys {
						answer(phase, e, async, key)
					}
				}
			}
			keys := []string{"evt_older_done", "evt_older_held", "evt_sync_done", "evt_sync_held"}

			// An async route reads the records from the ledger.
			on("async route", engine(), true, "evt_older_done_a", "evt_older_held_a", "evt_sync_done", "evt_sync_held")
			// A synchronous route reads them, refilling the screen and
			// its cache with them.
			first := engine()
			on("sync route", first, false, keys...)
			// The route async on the same replica: its cache holds the
			// synchronous route's entries.
			on("async route, from the cache", first, true, keys...)
			first.Close()
			// Another replica: nothing in its cache; the screen holds
			// what the first one left.
			on("async route, another replica", engine(), true, keys...)
			// And synchronous again, after the async route's answers.
			on("sync route again", engine(), false, append(keys, "evt_older_done_a", "evt_older_held_a")...)

			if n := forwards.Load(); n != 0 {
				t.Errorf("the upstream got %d deliveries, want none: each was recorded or stored", n)
			}
			if n := jobs.n.Load(); n != int64(len(older)) {
				t.Errorf("%d delivery jobs, want the %d of the older release's intakes", n, len(older))
			}
		})
	}
}
