package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const asyncAdminToken = "async-admin-token"

// startAsyncAdmin is startAsync with the admin API on, and a sync route
// "plain" at /plain that stores no request.
func startAsyncAdmin(tb testing.TB, up *upstream) *Gateway {
	tb.Helper()
	cfg := gwConfig(tb, up.URL, dbPath(tb), asyncRoute+`  - name: plain
    path: /plain
    upstream: {url: "`+up.URL+`/plain"}
    key: {sources: [{json: id}]}
`, "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	return startGatewayWith(tb, cfg, asyncOptions(tb))
}

// adminPost POSTs body to the admin API path of g.
func adminPost(tb testing.TB, g *Gateway, path, body string) (int, string) {
	tb.Helper()
	return adminCall(tb, g, http.MethodPost, path, body)
}

// adminCall sends method with body to the admin API path of g.
func adminCall(tb testing.TB, g *Gateway, method, path, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, "http://"+g.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+asyncAdminToken)
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// switchedUpstream answers {"copy":n} to its n-th request, or 503 while
// down is set.
func switchedUpstream(tb testing.TB) (*upstream, *atomic.Bool) {
	up, down := newUpstream(tb), new(atomic.Bool)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	return up, down
}

func TestAsyncRedeliverAndRedriveThroughTheAdminAPI(t *testing.T) {
	up, down := switchedUpstream(t)
	g := startAsyncAdmin(t, up)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_a"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_a", idempotency.StateDone)

	// A done record is delivered again, same key, and its new answer recorded.
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_a/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s, want 202", status, body)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivered answer recorded", func() bool {
		return string(lookup(t, g, "hooks", "evt_a").Body) == `{"copy":2}`
	})
	if up.count("evt_a") != 2 || up.lastHeader().Get("Idempotency-Key") != "evt_a" {
		t.Fatalf("upstream got %d copies, last key %q", up.count("evt_a"), up.lastHeader().Get("Idempotency-Key"))
	}

	// Dead ones are redriven: all of them, or those named.
	down.Store(true)
	for _, k := range []string{"evt_b", "evt_c"} {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, k)), http.StatusAccepted, "accepted")
		waitState(t, g, k, idempotency.StateDead)
	}
	down.Store(false)
	if status, body := adminPost(t, g, "/admin/routes/hooks/dead/redrive", `{"keys":["evt_c"]}`); status != 200 || strings.TrimSpace(body) != `{"requeued":1}` {
		t.Fatalf("redrive evt_c = %d %s", status, body)
	}
	waitState(t, g, "evt_c", idempotency.StateDone)
	if rec := lookup(t, g, "hooks", "evt_b"); rec.State != idempotency.StateDead {
		t.Fatalf("evt_b is %s, want still dead", rec.State)
	}
	if status, body := adminPost(t, g, "/admin/routes/hooks/dead/redrive", ""); status != 200 || strings.TrimSpace(body) != `{"requeued":1}` {
		t.Fatalf("redrive all = %d %s", status, body)
	}
	waitState(t, g, "evt_b", idempotency.StateDone)

	// A sync route's record without a stored request cannot be redelivered.
	wantOutcome(t, send(t, g, "/plain", `{"id":"evt_p"}`), http.StatusOK, "forwarded")
	if status, _ := adminPost(t, g, "/admin/routes/plain/records/evt_p/redeliver", ""); status != http.StatusConflict {
		t.Fatalf("redeliver without a stored request = %d, want 409", status)
	}
	if status, _ := adminPost(t, g, "/admin/routes/hooks/records/nope/redeliver", ""); status != http.StatusNotFound {
		t.Fatalf("redeliver of no record = %d, want 404", status)
	}
}

func TestAsyncConcurrentCopiesMakeOneJobAndOneDelivery(t *testing.T) {
	up := newUpstream(t)
	g, _ := startAsync(t, up, "")
	replies := race(t, 100, func(int) reply { return send(t, g, "/hooks", `{"id":"evt_same"}`) })
	accepted := 0
	for _, r := range replies {
		if r.status != http.StatusAccepted {
			t.Fatalf("copy answered %d %q %s", r.status, r.outcome(), r.body)
		}
		if r.outcome() == "accepted" {
			accepted++
		}
	}
	if accepted != 1 {
		t.Fatalf("%d copies accepted, want 1 (the rest replayed)", accepted)
	}
	waitState(t, g, "evt_same", idempotency.StateDone)
	db, _ := g.Ledger().DB()
	// River numbers its SQLite jobs from a sequence: one job was ever
	// made, and it ended with its delivery.
	var made, left int
	if err := db.QueryRow(`SELECT seq, (SELECT COUNT(*) FROM river_job) FROM sqlite_sequence WHERE name = 'river_job'`).Scan(&made, &left); err != nil || made != 1 || left != 0 {
		t.Fatalf("%d jobs made, %d left (%v), want 1 made, none left", made, left, err)
	}
	if n := up.count("evt_same"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
}

func TestAsyncHonoursRetryAfter(t *testing.T) {
	up := newUpstream(t)
	var first atomic.Int64
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintf(w, `{"after_ms":%d}`, (time.Now().UnixNano()-first.Load())/1e6)
	})
	// backoff.max 2s: the upstream's 1s is honoured over the 5ms backoff.
	cfg := gwConfig(t, up.URL, dbPath(t), strings.Replace(asyncRoute, "max: 50ms", "max: 2s", 1), "")
	g2 := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g2, "/hooks", `{"id":"evt_ra"}`), http.StatusAccepted, "accepted")
	rec := waitState(t, g2, "evt_ra", idempotency.StateDone)
	var after int
	if _, err := fmt.Sscanf(string(rec.Body), `{"after_ms":%d}`, &after); err != nil || after < 1000 {
		t.Fatalf("second attempt %dms after a Retry-After: 1 (%v), want ≥ 1000ms", after, err)
	}
}

func TestAsyncSQLiteRestartWithJobsQueued(t *testing.T) {
	up := newUpstream(t)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	finals := map[string]int{}
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		finals[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		fmt.Fprint(w, "ok")
	})
	cfg := gwConfig(t, up.URL, dbPath(t), strings.Replace(asyncRoute, "max_attempts: 5", "max_attempts: 1000", 1), "")
	g := startGatewayWith(t, cfg, asyncOptions(t))
	for i := range 20 {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":"evt_%02d"}`, i)), http.StatusAccepted, "accepted")
	}
	testenv.Eventually(t, 10*time.Second, "attempts to fail", func() bool { return up.total.Load() >= 20 })
	shutdownGateway(t, g)
	down.Store(false)
	g2 := startGatewayWith(t, cfg, asyncOptions(t))
	for i := range 20 {
		key := fmt.Sprintf("evt_%02d", i)
		waitState(t, g2, key, idempotency.StateDone)
		mu.Lock()
		n := finals[key]
		mu.Unlock()
		if n != 1 {
			t.Fatalf("%s answered 200 %d times, want 1", key, n)
		}
	}
}

func TestAsyncShutdownFinishesAttemptsInFlight(t *testing.T) {
	up, release := heldUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute, "")
	g, err := New(context.Background(), cfg, asyncOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_term"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 10*time.Second, "the attempt in flight", func() bool { return up.count("evt_term") == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Read after the gateway closed: the attempt it let finish was recorded.
	g2 := startGatewayWith(t, cfg, Options{Logger: testLogger(t)})
	if rec := lookup(t, g2, "hooks", "evt_term"); rec.State != idempotency.StateDone || string(rec.Body) != `{"n":1}` {
		t.Fatalf("after SIGTERM the record is %s %q, want done with the attempt's answer", rec.State, rec.Body)
	}
}

func TestAsyncHandshakeIsForwardedSynchronously(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "challenge-echo")
	})
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute, "")
	cfg.Routes[0].Preset = "twitch"
	cfg.Routes[0].Key.Sources = []config.KeySource{{Kind: config.SourceHeader, Arg: "Twitch-Eventsub-Message-Id"}}
	cfg.Routes[0].Verify.Scheme = ""
	g := startGatewayWith(t, cfg, asyncOptions(t))
	r := send(t, g, "/hooks", `{"challenge":"challenge-echo"}`, "Twitch-Eventsub-Message-Id", "m1",
		"Twitch-Eventsub-Message-Type", "webhook_callback_verification")
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if string(r.body) != "challenge-echo" {
		t.Fatalf("handshake answered %q, want the upstream's echo", r.body)
	}
	n := send(t, g, "/hooks", `{"event":{}}`, "Twitch-Eventsub-Message-Id", "m2", "Twitch-Eventsub-Message-Type", "notification")
	wantOutcome(t, n, http.StatusAccepted, "accepted")
}

func TestAsyncQueueMetrics(t *testing.T) {
	up := newUpstream(t)
	var down atomic.Bool
	down.Store(true)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	g := startAsyncAdmin(t, up)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_m"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_m", idempotency.StateDead)
	waitMetrics(t, g,
		`hookstamp_queue_depth{route="hooks",state="dead"} 1`,
		`hookstamp_queue_depth{route="hooks",state="queued"} 0`,
		`hookstamp_delivery_attempts_total{result="retried",route="hooks"} 4`,
		`hookstamp_delivery_attempts_total{result="dead",route="hooks"} 1`,
		`hookstamp_delivery_attempts_total{result="delivered",route="hooks"} 0`,
		`hookstamp_requests_total{outcome="accepted",route="hooks"} 1`,
		`hookstamp_upstream_duration_seconds_count{route="hooks"} 5`, // every attempt's forward
	)
	down.Store(false)
	if status, body := adminPost(t, g, "/admin/routes/hooks/dead/redrive", ""); status != 200 {
		t.Fatalf("redrive = %d %s", status, body)
	}
	waitState(t, g, "evt_m", idempotency.StateDone)
	waitMetrics(t, g,
		`hookstamp_queue_depth{route="hooks",state="dead"} 0`,
		`hookstamp_delivery_attempts_total{result="delivered",route="hooks"} 1`,
		`hookstamp_delivery_lag_seconds_count{route="hooks"} 1`,
		`hookstamp_upstream_duration_seconds_count{route="hooks"} 6`,
	)
}

// An async attempt sent without an answer, on a record.ambiguous: hold
// route, holds the delivery and counts as a held attempt, with its
// forward's duration.
func TestAsyncAmbiguousAttemptIsHeldAndCounted(t *testing.T) {
	up := newUpstream(t)
	gone := make(chan struct{})
	t.Cleanup(func() { close(gone) })
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) { <-gone })
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute+"    record: {ambiguous: hold}\n", "")
	cfg.Routes[0].Upstream.Timeout = 200 * time.Millisecond
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_h", idempotency.StateHeld)
	waitMetrics(t, g,
		`hookstamp_delivery_attempts_total{result="held",route="hooks"} 1`,
		`hookstamp_delivery_attempts_total{result="retried",route="hooks"} 0`,
		`hookstamp_held_keys{route="hooks"} 1`,
		`hookstamp_upstream_duration_seconds_count{route="hooks"} 1`,
	)
	if n := up.count("evt_h"); n != 1 {
		t.Errorf("the upstream received evt_h %d times, want 1: a held delivery waits for an operator", n)
	}
}

// waitMetrics waits until g's /metrics holds every line of wants: a run
// counts its attempt once the record it settled is committed, which a
// test may see first.
func waitMetrics(tb testing.TB, g *Gateway, wants ...string) {
	tb.Helper()
	var missing []string
	testenv.Poll(5*time.Second, func() bool {
		m := scrape(tb, g)
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(m, want) {
				missing = append(missing, want)
			}
		}
		return len(missing) == 0
	})
	for _, want := range missing {
		tb.Errorf("/metrics lacks %s", want)
	}
}

// scrape reads g's /metrics, without the lines of other instrumentation
// scopes' labels.
func scrape(tb testing.TB, g *Gateway) string {
	tb.Helper()
	resp, err := client.Get("http://" + g.AdminAddr() + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return stripScope(string(b))
}

// scopeLabel matches the instrumentation scope's labels, which the
// Prometheus exporter adds to every series.
var scopeLabel = regexp.MustCompile(`,?otel_scope_[a-z_]+="[^"]*"`)

func stripScope(metrics string) string {
	return strings.ReplaceAll(scopeLabel.ReplaceAllString(metrics, ""), "{,", "{")
}

func TestAsyncDetailShowsTheNextAttempt(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			detailShowsTheNextAttempt(t, driver)
		})
	}
}

func detailShowsTheNextAttempt(t *testing.T, driver string) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusServiceUnavailable) })
	cfg := gwConfig(t, up.URL, dbPath(t), strings.Replace(asyncRoute, "max: 50ms", "max: 1h", 1), "")
	cfg.Routes[0].Async.Backoff.Initial = time.Hour // the next attempt stays scheduled while the test reads it
	onStore(t, cfg, driver)
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_next"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 10*time.Second, "the first attempt", func() bool { return up.count("evt_next") == 1 })
	var detail asyncDetail
	testenv.Eventually(t, 10*time.Second, "next_attempt_at in the detail", func() bool {
		detail = detailOf(t, g, "evt_next")
		return detail.NextAttemptAt != nil
	})
	if detail.State != "queued" || detail.NextAttemptAt.Before(time.Now()) || detail.NextAttemptAt.After(time.Now().Add(time.Hour+time.Minute)) {
		t.Fatalf("detail: %s, next attempt %v; want queued, within the hour's backoff", detail.State, detail.NextAttemptAt)
	}
}

// asyncDetail is what the tests read of a record's detail (GET
// /admin/routes/hooks/records/{key}).
type asyncDetail struct {
	State         string     `json:"state"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

// detailOf reads the detail of key's record, or a zero one when the admin
// API does not answer it.
func detailOf(tb testing.TB, g *Gateway, key string) asyncDetail {
	tb.Helper()
	var d asyncDetail
	if status, body := adminCall(tb, g, http.MethodGet, "/admin/routes/hooks/records/"+key, ""); status == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			tb.Fatalf("detail of %s: %v: %s", key, err, body)
		}
	}
	return d
}

// A record whose request was stored while its route kept requests is not
// queued again once the route stopped keeping them: no worker would run
// the job, so a 202 would be a promise nobody keeps. Redeliver and redrive
// answer 409, and nothing reaches the upstream; a key without a record is
// still 404.
func TestRedeliverOnARouteThatNoLongerStoresRequests(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	start := func(record string) *Gateway {
		cfg := gwConfig(t, up.URL, db, record, "")
		cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
		return startGatewayWith(t, cfg, asyncOptions(t))
	}
	g := start("    record: {request: true}\n")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_stored"}`), http.StatusOK, "forwarded")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Another route keeps requests, so the queue runs: only this route's
	// worker is missing.
	g = start(`  - name: kept
    path: /kept
    upstream: {url: "` + up.URL + `/kept"}
    key: {sources: [{json: id}]}
    record: {request: true}
`)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/admin/routes/hooks/records/evt_stored/redeliver", http.StatusConflict},
		{"/admin/routes/hooks/dead/redrive", http.StatusConflict},
		{"/admin/routes/hooks/records/evt_none/redeliver", http.StatusNotFound},
	} {
		if status, body := adminPost(t, g, c.path, ""); status != c.status || !strings.Contains(body, `"status":`) {
			t.Errorf("POST %s = %d %s, want a %d problem", c.path, status, body, c.status)
		}
	}
	if n := up.count("evt_stored"); n != 1 {
		t.Fatalf("upstream received evt_stored %d times, want once", n)
	}
}

// A redelivery of a done record that runs out of attempts leaves the
// record its earlier answer, and its attempt is in the record's history
// with the status it got: the operator sees why it did not take.
func TestRedeliveryThatGivesUpKeepsTheAnswerAndItsAttempt(t *testing.T) {
	up, down := switchedUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), `    delivery: async
    async: {max_attempts: 1}
`, "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_once"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_once", idempotency.StateDone)

	down.Store(true)
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_once/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s, want 202", status, body)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivery's attempt recorded", func() bool {
		return len(attemptsOf(t, g, "evt_once")) == 2
	})
	atts := attemptsOf(t, g, "evt_once")
	if atts[0].Status != http.StatusOK || atts[1].Status != http.StatusServiceUnavailable {
		t.Fatalf("attempts %+v, want 200 then 503", atts)
	}
	if rec := lookup(t, g, "hooks", "evt_once"); rec.State != idempotency.StateDone || string(rec.Body) != `{"copy":1}` {
		t.Fatalf("record %s %q, want done with the first answer", rec.State, rec.Body)
	}
	if n := up.count("evt_once"); n != 2 {
		t.Fatalf("upstream received %d copies, want 2", n)
	}
	waitMetrics(t, g,
		`hookstamp_delivery_attempts_total{result="gave_up",route="hooks"} 1`,
		`hookstamp_delivery_attempts_total{result="dead",route="hooks"} 0`,
		`hookstamp_delivery_attempts_total{result="delivered",route="hooks"} 1`,
	)
}

// A redelivery asked for while the delivery is still queued (its attempt
// out at the upstream, perhaps its last) is refused: no second job is
// made, and the operator is not told of one that will not come.
func TestRedeliverOfAQueuedDeliveryIsRefused(t *testing.T) {
	up, release := heldUpstream(t)
	g := startAsyncAdmin(t, up)
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the gateway's shutdown, should the test fail
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_busy"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 10*time.Second, "the attempt in flight", func() bool { return up.count("evt_busy") == 1 })
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_busy/redeliver", ""); status != http.StatusConflict ||
		!strings.Contains(body, "still queued") {
		t.Fatalf("redeliver of a queued delivery = %d %s, want 409", status, body)
	}
	free()
	waitState(t, g, "evt_busy", idempotency.StateDone)
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_busy/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver once done = %d %s, want 202", status, body)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivery", func() bool { return up.count("evt_busy") == 2 })
}

// Redeliveries of a done record asked for together, or while one is
// under way, make one job: a second would send the request twice at once.
// On PostgreSQL the calls race on the record's row lock.
func TestRedeliverOfADoneRecordOnceAtATime(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			hold := make(chan struct{})
			free := sync.OnceFunc(func() { close(hold) })
			t.Cleanup(free)
			up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 2 {
					<-hold
				}
				fmt.Fprintf(w, `{"copy":%d}`, n)
			})
			cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute, "")
			onStore(t, cfg, driver)
			cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
			g := startGatewayWith(t, cfg, asyncOptions(t))
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_r"}`), http.StatusAccepted, "accepted")
			waitState(t, g, "evt_r", idempotency.StateDone)

			asked := race(t, 8, func(int) reply {
				status, _ := adminPost(t, g, "/admin/routes/hooks/records/evt_r/redeliver", "")
				return reply{status: status}
			})
			byStatus := map[int]int{}
			for _, r := range asked {
				byStatus[r.status]++
			}
			if byStatus[http.StatusAccepted] != 1 || byStatus[http.StatusConflict] != 7 {
				t.Fatalf("8 redeliveries at once answered %v, want one 202 and seven 409", byStatus)
			}
			testenv.Eventually(t, 10*time.Second, "the redelivery at the upstream", func() bool { return up.count("evt_r") == 2 })
			if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_r/redeliver", ""); status != http.StatusConflict {
				t.Fatalf("redeliver during the redelivery = %d %s, want 409", status, body)
			}
			free()
			testenv.Eventually(t, 10*time.Second, "the redelivery's answer recorded", func() bool {
				return string(lookup(t, g, "hooks", "evt_r").Body) == `{"copy":2}`
			})
			// Once it has ended, the record can be redelivered again.
			testenv.Eventually(t, 10*time.Second, "a redelivery accepted again", func() bool {
				status, _ := adminPost(t, g, "/admin/routes/hooks/records/evt_r/redeliver", "")
				return status == http.StatusAccepted
			})
			testenv.Eventually(t, 10*time.Second, "the second redelivery's answer recorded", func() bool {
				return string(lookup(t, g, "hooks", "evt_r").Body) == `{"copy":3}`
			})
			if n := up.count("evt_r"); n != 3 {
				t.Fatalf("upstream received %d copies, want 3", n)
			}
		})
	}
}

// An operator deleted an async delivery while its job waited out a long
// backoff (the upstream answered 503, Retry-After: 3600), and the
// provider's resend was stored and delivered: a new record, done. The
// deleted record's job stays in River's table until it wakes (up to
// backoff.max later) and ends itself. Until then the operator saw the new
// done record with a next_attempt_at, and its redelivery refused 409 "a
// delivery of this record is still queued": the queue took the old job,
// matched by route and key, for the new record's. Only the jobs of the
// record itself (the created_at it carries) count now.
func TestJobOfADeletedRecordDoesNotHoldUpItsSuccessor(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			var down atomic.Bool
			down.Store(true)
			up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
				if down.Load() {
					w.Header().Set("Retry-After", "3600")
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintf(w, `{"copy":%d}`, n)
			})
			cfg := gwConfig(t, up.URL, dbPath(t), strings.Replace(asyncRoute, "{initial: 5ms, max: 50ms}", "{initial: 1h, max: 1h}", 1), "")
			onStore(t, cfg, driver)
			cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
			g := startGatewayWith(t, cfg, asyncOptions(t))
			const record = "/admin/routes/hooks/records/evt_stale"

			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_stale"}`), http.StatusAccepted, "accepted")
			testenv.Eventually(t, 10*time.Second, "the first attempt's job waiting out its backoff", func() bool {
				next := detailOf(t, g, "evt_stale").NextAttemptAt
				return up.count("evt_stale") == 1 && next != nil && next.After(time.Now().Add(30*time.Minute))
			})
			if status, body := adminCall(t, g, http.MethodDelete, record+"?discard=true", ""); status != http.StatusNoContent {
				t.Fatalf("delete = %d %s, want 204", status, body)
			}
			down.Store(false)
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_stale"}`), http.StatusAccepted, "accepted")
			waitState(t, g, "evt_stale", idempotency.StateDone)

			if d := detailOf(t, g, "evt_stale"); d.State != "done" || d.NextAttemptAt != nil {
				t.Errorf("detail of the new record: %s, next attempt %v; want done, none", d.State, d.NextAttemptAt)
			}
			if status, body := adminPost(t, g, record+"/redeliver", ""); status != http.StatusAccepted {
				t.Fatalf("redeliver of the new done record = %d %s, want 202", status, body)
			}
			testenv.Eventually(t, 10*time.Second, "the redelivery's answer recorded", func() bool {
				return string(lookup(t, g, "hooks", "evt_stale").Body) == `{"copy":3}`
			})
			if n := up.count("evt_stale"); n != 3 {
				t.Fatalf("upstream received %d copies, want 3: the deleted record's attempt, the resend's, the redelivery's", n)
			}
			// The deleted record's job still sleeps, and is ignored.
			db, err := g.Ledger().DB()
			if err != nil {
				t.Fatal(err)
			}
			var waiting int
			if err := db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE state = 'scheduled'`).Scan(&waiting); err != nil || waiting != 1 {
				t.Fatalf("%d jobs waiting (%v), want the deleted record's one", waiting, err)
			}
		})
	}
}

// A record queued again by an operator gets the route's max_age anew:
// redriven or redelivered after max_age, it is not given up after its
// first attempt.
func TestRequeuedRecordsGetTheirMaxAgeAnew(t *testing.T) {
	up := newUpstream(t)
	var failing atomic.Int32
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if failing.Add(-1) >= 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), asyncRoute+"      max_age: 1s\n", "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))

	failing.Store(1000)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_dead", idempotency.StateDead)
	failing.Store(0)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_done"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_done", idempotency.StateDone)
	time.Sleep(1100 * time.Millisecond) // both records older than max_age

	failing.Store(2)
	if status, body := adminPost(t, g, "/admin/routes/hooks/dead/redrive", ""); status != http.StatusOK || strings.TrimSpace(body) != `{"requeued":1}` {
		t.Fatalf("redrive = %d %s", status, body)
	}
	waitState(t, g, "evt_dead", idempotency.StateDone)
	failing.Store(2)
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_done/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s", status, body)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivery's answer recorded", func() bool {
		return len(attemptsOf(t, g, "evt_done")) == 4 && lookup(t, g, "hooks", "evt_done").Status == http.StatusOK
	})
	if got := statusesOf(attemptsOf(t, g, "evt_done")); got != "200 503 503 200" {
		t.Fatalf("evt_done's attempts %s, want 200 503 503 200", got)
	}
	if got := statusesOf(attemptsOf(t, g, "evt_dead")); !strings.HasSuffix(got, " 503 503 200") {
		t.Fatalf("evt_dead's attempts %s, want the redrive's 503 503 200 last", got)
	}
}

// statusesOf lists attempts' statuses, in order.
func statusesOf(atts []idempotency.Attempt) string {
	s := make([]string, len(atts))
	for i, a := range atts {
		s[i] = fmt.Sprint(a.Status)
	}
	return strings.Join(s, " ")
}

// onStore moves cfg's ledger to driver: "postgres" a schema of the test's
// own, "sqlite" the file it has.
func onStore(tb testing.TB, cfg *config.Config, driver string) {
	if driver == "postgres" {
		cfg.Store.Driver, cfg.Store.DSN = driver, testenv.Postgres(tb)
	}
}
