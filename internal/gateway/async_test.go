package gateway

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// asyncRoute is the YAML of an async route with tiny backoffs; extra is
// appended under async.
const asyncRoute = `    delivery: async
    async:
      max_attempts: 5
      backoff: {initial: 5ms, max: 50ms}
`

// asyncOptions poll the queue often, for tests that wait for deliveries.
func asyncOptions(tb testing.TB) Options {
	return Options{Logger: testLogger(tb), QueuePollInterval: 20 * time.Millisecond, RescueMargin: time.Second}
}

// startAsync starts a gateway on SQLite with the async route "hooks".
func startAsync(tb testing.TB, up *upstream, route string) (*Gateway, *config.Config) {
	tb.Helper()
	cfg := gwConfig(tb, up.URL, dbPath(tb), asyncRoute+route, "")
	return startGatewayWith(tb, cfg, asyncOptions(tb)), cfg
}

// waitState waits until the record of key is in state.
func waitState(tb testing.TB, g *Gateway, key string, state idempotency.State) *idempotency.Record {
	tb.Helper()
	return waitStateWithin(tb, g, key, state, 20*time.Second)
}

// waitStateWithin is waitState for at most d.
func waitStateWithin(tb testing.TB, g *Gateway, key string, state idempotency.State, d time.Duration) *idempotency.Record {
	tb.Helper()
	var rec *idempotency.Record
	testenv.Eventually(tb, d, "record "+key+" "+string(state), func() bool {
		r, err := g.Ledger().Lookup(t0ctx, idempotency.Ref{Route: "hooks", Key: key})
		rec = r
		return err == nil && r.State == state
	})
	return rec
}

func TestAsyncAcknowledgesBeforeTheUpstreamAnswers(t *testing.T) {
	up, release := heldUpstream(t)
	g, _ := startAsync(t, up, "")
	first := send(t, g, "/hooks", `{"id":"evt_1"}`)
	wantOutcome(t, first, http.StatusAccepted, "accepted")
	if len(first.body) != 0 || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("ack = %q replayed=%q, want an empty 202", first.body, first.header.Get("Idempotent-Replayed"))
	}
	// Acknowledged while the upstream still holds the attempt.
	testenv.Eventually(t, 10*time.Second, "the attempt to reach the upstream", func() bool { return up.count("evt_1") == 1 })
	before := send(t, g, "/hooks", `{"id":"evt_1"}`)
	wantOutcome(t, before, http.StatusAccepted, "replayed")
	sameReply(t, first, before)
	if before.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("a repeat's ack is not marked Idempotent-Replayed")
	}
	close(release)
	rec := waitState(t, g, "evt_1", idempotency.StateDone)
	if rec.Status != 200 || string(rec.Body) != `{"n":1}` {
		t.Fatalf("recorded %d %q, want the upstream's 200", rec.Status, rec.Body)
	}
	after := send(t, g, "/hooks", `{"id":"evt_1"}`)
	wantOutcome(t, after, http.StatusAccepted, "replayed")
	sameReply(t, first, after)
	if n := up.count("evt_1"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
	changed := send(t, g, "/hooks", `{"id":"evt_1","amount":2}`)
	wantOutcome(t, changed, http.StatusUnprocessableEntity, "mismatch")
}

// An idle route's queue looks for new deliveries every async.poll_interval:
// with a short one the event reaches the upstream at once, with an hour
// it waits, although the queue has free workers.
func TestAsyncPollIntervalIsTheRoutesOwn(t *testing.T) {
	o := asyncOptions(t)
	o.QueuePollInterval = 0
	start := func(poll string) (*Gateway, *upstream) {
		up := newUpstream(t)
		cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute+"      poll_interval: "+poll+"\n", "")
		return startGatewayWith(t, cfg, o), up
	}
	// The hour-long queue starts first, so that its start-up fetch, which
	// finds nothing, is over before the fast route has delivered.
	slow, slowUp := start("1h")
	fast, fastUp := start("20ms")
	wantOutcome(t, send(t, fast, "/hooks", `{"id":"evt_fast"}`), http.StatusAccepted, "accepted")
	waitState(t, fast, "evt_fast", idempotency.StateDone)
	if n := fastUp.count("evt_fast"); n != 1 {
		t.Fatalf("the 20ms route's upstream got %d copies, want 1", n)
	}
	wantOutcome(t, send(t, slow, "/hooks", `{"id":"evt_slow"}`), http.StatusAccepted, "accepted")
	time.Sleep(time.Second) // nothing to poll for: the test is that nothing arrives (4× the default interval)
	rec, err := slow.Ledger().Lookup(t0ctx, idempotency.Ref{Route: "hooks", Key: "evt_slow"})
	if err != nil || rec.State != idempotency.StateQueued || slowUp.count("evt_slow") != 0 {
		t.Fatalf("the 1h route after 1s: %+v (%v), upstream got %d; want it still queued", rec, err, slowUp.count("evt_slow"))
	}
}

// River refuses queue names over 64 characters, and "route_" takes six:
// a route name of the longest kind still gets a queue.
func TestAsyncRouteWithTheLongestNameStartsAndDelivers(t *testing.T) {
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute, "")
	name := strings.Repeat("n", 64)
	cfg.Routes[0].Name = name
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_long"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 20*time.Second, "the delivery done", func() bool {
		return lookup(t, g, name, "evt_long").State == idempotency.StateDone
	})
	if n := up.count("evt_long"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
}

func TestAsyncRetriesUntilTheUpstreamTakesIt(t *testing.T) {
	up := newUpstream(t)
	fourth := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(fourth) }) }
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		<-fourth
		fmt.Fprintf(w, `{"attempt":%q}`, r.Header.Get("Hookstamp-Attempt"))
	})
	g, _ := startAsync(t, up, "")
	t.Cleanup(release)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_r"}`), http.StatusAccepted, "accepted")
	// Each retry's run noted its number on the job with its attempt, and
	// River's snoozes kept the note: while the fourth run is out, the
	// last is the third run's.
	testenv.Eventually(t, 20*time.Second, "the fourth attempt", func() bool { return up.count("evt_r") == 4 })
	db, _ := g.Ledger().DB()
	var noted, snoozes int
	err := db.QueryRow(`SELECT json_extract(metadata, '$.output.recorded_run'), json_extract(metadata, '$.snoozes') FROM river_job`).Scan(&noted, &snoozes)
	release()
	if err != nil || noted != 3 || snoozes != 3 {
		t.Fatalf("the job's note: run %d after %d snoozes (%v), want run 3 after 3", noted, snoozes, err)
	}
	rec := waitState(t, g, "evt_r", idempotency.StateDone)
	if string(rec.Body) != `{"attempt":"4"}` {
		t.Fatalf("recorded %q, want the fourth attempt's answer", rec.Body)
	}
	if n := up.count("evt_r"); n != 4 {
		t.Fatalf("upstream got %d attempts, want 4", n)
	}
	want := []int{503, 503, 503, 200}
	got := attemptStatuses(t, g, "evt_r")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts recorded %v, want %v", got, want)
	}
}

func TestAsyncDeadAfterMaxAttemptsThenRedrive(t *testing.T) {
	up := newUpstream(t)
	var mu sync.Mutex
	down := true
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, "ok")
	})
	g, _ := startAsync(t, up, "")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_d"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_d", idempotency.StateDead)
	if n := up.count("evt_d"); n != 5 {
		t.Fatalf("upstream got %d attempts, want max_attempts 5", n)
	}
	// Dead or not, the provider's repeat gets the ack.
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_d"}`), http.StatusAccepted, "replayed")
	mu.Lock()
	down = false
	mu.Unlock()
	n, err := g.Ledger().Redrive(t0ctx, "hooks", nil, time.Now().Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("redrive = %d, %v; want 1", n, err)
	}
	rec := waitState(t, g, "evt_d", idempotency.StateDone)
	if string(rec.Body) != "ok" || up.count("evt_d") != 6 {
		t.Fatalf("after redrive: recorded %q, upstream got %d; want ok after 6", rec.Body, up.count("evt_d"))
	}
}

// max_age bounds the wait for the next attempt too: with a backoff (and
// Retry-After) of 3 s and a max_age of 1 s, the second attempt goes out
// at max_age, not 3 s after the first, and fails the delivery for good.
func TestAsyncLastAttemptGoesOutByMaxAge(t *testing.T) {
	up := newUpstream(t)
	var mu sync.Mutex
	var at []time.Time
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), `    delivery: async
    async:
      max_attempts: 5
      max_age: 1s
      backoff: {initial: 3s, max: 3s}
`, "")
	g := startGatewayWith(t, cfg, asyncOptions(t))
	sent := time.Now()
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_old"}`), http.StatusAccepted, "accepted")
	waitStateWithin(t, g, "evt_old", idempotency.StateDead, 2500*time.Millisecond)
	time.Sleep(3 * time.Second) // past the backoff: the test is that no third attempt comes
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("upstream got %d attempts, want 2: the first, and the last at max_age", len(at))
	}
	if d := at[1].Sub(sent); d < 900*time.Millisecond || d > 2*time.Second {
		t.Fatalf("the second attempt went out %v after intake, want it at max_age (1s)", d)
	}
	if got := fmt.Sprint(attemptStatuses(t, g, "evt_old")); got != "[503 503]" {
		t.Fatalf("attempts recorded %s, want [503 503]", got)
	}
}

// attemptStatuses are the statuses of key's recorded attempts, in order.
// An attempt the application answers only after upstream.timeout may
// have been acted on: the next attempt sends it again with the same key
// (SPEC §10, record.ambiguous: release), and the gateway says so in its
// log as it does when a synchronous route releases one.
func TestAsyncUnansweredAttemptIsSentAgainWithItsKey(t *testing.T) {
	up := newUpstream(t)
	var mu sync.Mutex
	var seen []string
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Idempotency-Key")+"#"+r.Header.Get("Hookstamp-Attempt"))
		mu.Unlock()
		if n == 1 {
			<-r.Context().Done() // answered after the gateway gave up
		}
		fmt.Fprintf(w, `{"n":%d}`, n)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute, "")
	cfg.Routes[0].Upstream.Timeout = 300 * time.Millisecond
	logs := &testenv.Buffer{}
	o := asyncOptions(t)
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g := startGatewayWith(t, cfg, o)

	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_slow"}`), http.StatusAccepted, "accepted")
	rec := waitState(t, g, "evt_slow", idempotency.StateDone)
	if string(rec.Body) != `{"n":2}` {
		t.Fatalf("recorded %q, want the second attempt's answer", rec.Body)
	}
	mu.Lock()
	got := fmt.Sprint(seen)
	mu.Unlock()
	if want := "[evt_slow#1 evt_slow#2]"; got != want {
		t.Fatalf("the upstream received %s, want %s", got, want)
	}
	if got := attemptStatuses(t, g, "evt_slow"); fmt.Sprint(got) != "[0 200]" {
		t.Fatalf("attempts recorded with statuses %v, want [0 200] (no answer, then 200)", got)
	}
	if line := lastLogLine(logs, "async attempt sent without an answer"); !strings.Contains(line, "route=hooks key=evt_slow attempt=1 ") {
		t.Fatalf("no log line for the unanswered attempt 1 of evt_slow:\n%s", logs)
	}
}

func attemptStatuses(tb testing.TB, g *Gateway, key string) []int {
	tb.Helper()
	db, err := g.Ledger().DB()
	if err != nil {
		tb.Fatal(err)
	}
	rows, err := db.Query(`SELECT attempt, COALESCE(status, 0) FROM hookstamp_attempts WHERE route = 'hooks' AND "key" = ? ORDER BY attempt`, key)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var n, s int
		if err := rows.Scan(&n, &s); err != nil {
			tb.Fatal(err)
		}
		if n != len(out)+1 {
			tb.Fatalf("attempt numbers skip: %d after %d", n, len(out))
		}
		out = append(out, s)
	}
	return out
}

var t0ctx = context.Background()

// On PostgreSQL the record becomes done and its job is deleted in one
// transaction (SPEC §10): triggers note the transaction of each.
func TestAsyncRecordDoneAndJobDeletedInOneTransaction(t *testing.T) {
	t.Parallel()
	s := backend{name: "postgres+memory", ledger: "postgres", screen: "memory"}.open(t)
	up := newUpstream(t)
	g := startGatewayWith(t, s.config(t, up.URL, asyncRoute, ""), asyncOptions(t))
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		`CREATE TABLE settled_in (what text, tx bigint)`,
		`CREATE FUNCTION note_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			INSERT INTO settled_in VALUES ('job', txid_current());
			RETURN OLD;
		END $$`,
		`CREATE FUNCTION note_done() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF NEW.state::text = 'done' AND OLD.state::text <> 'done' THEN
				INSERT INTO settled_in VALUES ('record', txid_current());
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER note_job AFTER DELETE ON river_job FOR EACH ROW EXECUTE FUNCTION note_job()`,
		`CREATE TRIGGER note_done AFTER UPDATE ON hookstamp_records FOR EACH ROW EXECUTE FUNCTION note_done()`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_tx"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_tx", idempotency.StateDone)
	tx := map[string]int64{}
	rows, err := db.Query(`SELECT what, tx FROM settled_in`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var what string
		var id int64
		if err := rows.Scan(&what, &id); err != nil {
			t.Fatal(err)
		}
		tx[what] = id
	}
	if len(tx) != 2 || tx["job"] != tx["record"] {
		t.Fatalf("transactions noted %v: want the job deleted in the record's", tx)
	}
	var jobs int
	if err := db.QueryRow(`SELECT COUNT(*) FROM river_job`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("river_job holds %d jobs (%v), want none", jobs, err)
	}
}

// On SQLite too the job ends with its record: once the record is done,
// River lists no job in any state.
func TestAsyncSQLiteJobEndsWithItsRecord(t *testing.T) {
	up := newUpstream(t)
	g, _ := startAsync(t, up, "")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_fin"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_fin", idempotency.StateDone)
	db, _ := g.Ledger().DB()
	client, err := river.NewClient(riversqlite.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	all := []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted,
		rivertype.JobStateDiscarded, rivertype.JobStatePending, rivertype.JobStateRetryable, rivertype.JobStateRunning, rivertype.JobStateScheduled}
	res, err := client.JobList(t0ctx, river.NewJobListParams().States(all...))
	if err != nil || len(res.Jobs) != 0 {
		t.Fatalf("River lists %d jobs (%v), want none", len(res.Jobs), err)
	}
}

// On PostgreSQL a final settlement is one statement that numbers its
// attempt from its own snapshot. When another writer (a redelivery's
// run, say) takes that number meanwhile, the statement fails whole and
// runs again with the next number; the delivery is not sent again.
func TestAsyncSettlementRenumbersAnAttemptTakenMeanwhile(t *testing.T) {
	t.Parallel()
	s := backend{name: "postgres+memory", ledger: "postgres", screen: "memory"}.open(t)
	up, release := heldUpstream(t)
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	g := startGatewayWith(t, s.config(t, up.URL, asyncRoute, ""), asyncOptions(t))
	t.Cleanup(answer)
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_n"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 10*time.Second, "the attempt to reach the upstream", func() bool { return up.count("evt_n") == 1 })
	other, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	var xid string
	if err := other.QueryRow(`INSERT INTO hookstamp_attempts (route, "key", attempt, started_at, duration_ms, error, replica) ` +
		`VALUES ('hooks', 'evt_n', 1, now(), 0, '', 'other') RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	answer()
	testenv.Eventually(t, 10*time.Second, "the settlement to wait for attempt 1", func() bool {
		var waiting int
		err := db.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`, xid).Scan(&waiting)
		return err == nil && waiting == 1
	})
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, g, "evt_n", idempotency.StateDone)
	if rec.Status != 200 {
		t.Fatalf("recorded %d, want the upstream's 200", rec.Status)
	}
	attempts, err := g.Ledger().Attempts(t.Context(), idempotency.Ref{Route: "hooks", Key: "evt_n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 || attempts[0].Replica != "other" || attempts[1].Attempt != 2 || attempts[1].Status != 200 {
		t.Fatalf("attempts %+v, want the other writer's 1 and the delivery's 2 (200)", attempts)
	}
	if n := up.count("evt_n"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
	var jobs int
	if err := db.QueryRow(`SELECT COUNT(*) FROM river_job`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("river_job holds %d jobs (%v), want none", jobs, err)
	}
}
