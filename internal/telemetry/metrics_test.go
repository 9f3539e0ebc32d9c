package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/ingress"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// scenarioRoutes: "hooks" rejects repeats in flight and names senders by a
// header; "held" holds keys whose upstream does not answer in time.
const scenarioRoutes = `
  - name: hooks
    path: /hooks
    upstream: {url: "%[1]s/up", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
    inflight: reject
    source: "header:X-Sender"
  - name: held
    path: /held
    upstream: {url: "%[1]s/slow", timeout: 200ms}
    key: {sources: [{header: X-Event-Id}]}
    record: {ambiguous: hold}
`

// A scripted scenario, then a scrape of /metrics: every counter has the
// exact value the deliveries imply, and the histograms count them.
func TestScriptedScenarioMetrics(t *testing.T) {
	up := newUpstream(t)
	unblock := make(chan struct{})
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		key := r.Header.Get("Idempotency-Key")
		switch {
		case r.URL.Path == "/slow":
			<-r.Context().Done() // never answers: the gateway times out
			return
		case key == "evt_c" && n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case key == "evt_d":
			<-unblock
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"n":%d}`, n)
	}
	g := startGateway(t, gatewayConfig(t, up.URL, scenarioRoutes, ""), noTraces())

	from := func(sender string) []string { return []string{"X-Sender", sender} }
	deliver := func(key, body, sender string) reply {
		return send(t, g, "/hooks", body, append([]string{"X-Event-Id", key}, from(sender)...)...)
	}
	wantOutcome(t, deliver("evt_a", `{"a":1}`, "sender-1"), 200, "forwarded")
	wantOutcome(t, deliver("evt_a", `{"a":1}`, "sender-1"), 200, "replayed")
	wantOutcome(t, deliver("evt_a", `{"a":1}`, "sender-1"), 200, "replayed")
	wantOutcome(t, deliver("evt_b", `{"b":1}`, "sender-2"), 200, "forwarded")
	wantOutcome(t, deliver("evt_b", `{"b":2}`, "sender-2"), 422, "mismatch")
	wantOutcome(t, deliver("evt_c", `{"c":1}`, "sender-2"), 503, "released")
	wantOutcome(t, deliver("evt_c", `{"c":1}`, "sender-2"), 200, "forwarded")
	wantOutcome(t, deliver("evt_c", `{"c":1}`, "sender-2"), 200, "replayed")

	first := make(chan reply, 1)
	go func() { first <- send(t, g, "/hooks", `{"d":1}`, "X-Event-Id", "evt_d", "X-Sender", "sender-1") }()
	testenv.Eventually(t, 5*time.Second, "evt_d in flight upstream", func() bool {
		keys, _ := up.received()
		return slices.Contains(keys, "evt_d")
	})
	wantOutcome(t, deliver("evt_d", `{"d":1}`, "sender-3"), 409, "conflict")
	close(unblock)
	wantOutcome(t, <-first, 200, "forwarded")
	wantOutcome(t, send(t, g, "/hooks", `{}`, from("sender-1")...), 400, "missing_key")

	wantOutcome(t, send(t, g, "/held", `{}`, "X-Event-Id", "evt_h"), 504, "held")
	wantOutcome(t, send(t, g, "/held", `{}`, "X-Event-Id", "evt_h"), 409, "held")

	fams := scrape(t, g.Telemetry().MetricsHandler())

	requests := map[string]map[idempotency.Outcome]float64{
		"hooks": {idempotency.Forwarded: 4, idempotency.Replayed: 3, idempotency.Mismatch: 1, idempotency.Released: 1,
			idempotency.Conflict: 1, idempotency.MissingKey: 1},
		"held": {idempotency.HeldKey: 2},
	}
	for route, want := range requests {
		for _, o := range idempotency.Outcomes {
			if got := value(fams, "hookstamp_requests_total", "route", route, "outcome", string(o)); got != want[o] {
				t.Errorf("hookstamp_requests_total{route=%q,outcome=%q} = %v, want %v", route, o, got, want[o])
			}
			wantCount := want[o]
			if wantCount == 0 {
				wantCount = -1 // no observation, no histogram series
			}
			if got := value(fams, "hookstamp_request_duration_seconds", "route", route, "outcome", string(o)); got != wantCount {
				t.Errorf("hookstamp_request_duration_seconds{route=%q,outcome=%q} count = %v, want %v", route, o, got, wantCount)
			}
		}
	}

	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hookstamp_duplicates_total", []string{"route", "hooks", "source", "sender-1"}, 2},
		{"hookstamp_duplicates_total", []string{"route", "hooks", "source", "sender-2"}, 2},
		{"hookstamp_duplicates_total", []string{"route", "hooks", "source", "sender-3"}, 1},
		{"hookstamp_upstream_duration_seconds", []string{"route", "hooks"}, 5},
		{"hookstamp_upstream_duration_seconds", []string{"route", "held"}, 1},
		{"hookstamp_held_keys", []string{"route", "held"}, 1},
		{"hookstamp_held_keys", []string{"route", "hooks"}, 0},
		{"hookstamp_takeovers_total", []string{"route", "hooks"}, 0},
		{"hookstamp_takeovers_total", []string{"route", "held"}, 0},
		{"hookstamp_commit_failures_total", []string{"route", "hooks"}, 0},
		{"hookstamp_commit_failures_total", []string{"route", "held"}, 0},
		{"hookstamp_dependency_errors_total", []string{"dependency", "ledger", "op", "commit"}, 0},
		{"hookstamp_dependency_errors_total", []string{"dependency", "screen", "op", "claim"}, 0},
	}
	for _, tt := range tests {
		if got := value(fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if n := len(fams["hookstamp_duplicates_total"].GetMetric()); n != 3 {
		t.Errorf("hookstamp_duplicates_total has %d series, want 3 (one per sender)", n)
	}
}

// The exposition has exactly the families of SPEC §7 under hookstamp_, of
// the right types, with no labels beyond the documented ones.
func TestMetricNamesAndLabels(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	tel.Init([]string{"r"}, "ledger", "screen")
	ctx := context.Background()
	for _, o := range idempotency.Outcomes {
		tel.Observe(ctx, &ingress.Event{Route: "r", Source: "10.0.0.1", Result: &idempotency.Result{Outcome: o}, Duration: time.Millisecond})
	}
	tel.ObserveUpstream(ctx, "r", 20*time.Millisecond)
	h := tel.Hooks()
	h.Takeover("r")
	h.CommitFailure("r")
	h.DependencyError("screen", "claim")
	h.HeldChanged("r", 1)

	want := map[string]struct {
		typ    dto.MetricType
		labels []string
	}{
		"hookstamp_requests_total":            {dto.MetricType_COUNTER, []string{"outcome", "route"}},
		"hookstamp_request_duration_seconds":  {dto.MetricType_HISTOGRAM, []string{"outcome", "route"}},
		"hookstamp_upstream_duration_seconds": {dto.MetricType_HISTOGRAM, []string{"route"}},
		"hookstamp_duplicates_total":          {dto.MetricType_COUNTER, []string{"route", "source"}},
		"hookstamp_shadow_total":              {dto.MetricType_COUNTER, []string{"route", "would"}},
		"hookstamp_takeovers_total":           {dto.MetricType_COUNTER, []string{"route"}},
		"hookstamp_commit_failures_total":     {dto.MetricType_COUNTER, []string{"route"}},
		"hookstamp_held_keys":                 {dto.MetricType_GAUGE, []string{"route"}},
		"hookstamp_dependency_errors_total":   {dto.MetricType_COUNTER, []string{"dependency", "op"}},
	}
	fams := scrape(t, tel.MetricsHandler())
	var got []string
	for name, f := range fams {
		if !strings.HasPrefix(name, "hookstamp_") {
			continue
		}
		got = append(got, name)
		w, ok := want[name]
		if !ok {
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), w.typ)
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			if !slices.Equal(labels, w.labels) {
				t.Errorf("%s has labels %q, want %q", name, labels, w.labels)
			}
		}
	}
	slices.Sort(got)
	if wantNames := slices.Sorted(maps.Keys(want)); !slices.Equal(got, wantNames) {
		t.Errorf("hookstamp families:\n got %q\nwant %q", got, wantNames)
	}
	if v := value(fams, "hookstamp_duplicates_total", "route", "r", "source", "10.0.0.1"); v != 4 {
		t.Errorf("duplicates = %v, want 4 (replayed, conflict, mismatch, shadowed)", v)
	}
	if v := value(fams, "hookstamp_dependency_errors_total", "dependency", "screen", "op", "claim"); v != 1 {
		t.Errorf("dependency errors = %v, want 1", v)
	}
}

// Senders choose their source label (an address, or a header value): past
// MaxSourcesPerRoute distinct values per route, duplicates are counted
// under "other", and an empty source is "unknown".
func TestDuplicateSourcesAreBounded(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	ctx := context.Background()
	dup := func(route, source string) {
		tel.Observe(ctx, &ingress.Event{Route: route, Source: source, Result: &idempotency.Result{Outcome: idempotency.Replayed}})
	}
	const extra = 30
	for i := range telemetry.MaxSourcesPerRoute + extra {
		dup("a", fmt.Sprintf("src-%d", i))
	}
	dup("a", "src-0")   // admitted before the cap: keeps its series
	dup("a", "src-999") // new after the cap
	dup("a", "")        // no source
	dup("b", "src-999") // another route has its own budget
	fams := scrape(t, tel.MetricsHandler())

	tests := []struct {
		route, source string
		want          float64
	}{
		{"a", "src-0", 2},
		{"a", fmt.Sprintf("src-%d", telemetry.MaxSourcesPerRoute-1), 1},
		{"a", fmt.Sprintf("src-%d", telemetry.MaxSourcesPerRoute), -1},
		{"a", "other", extra + 1},
		{"a", "unknown", 1},
		{"b", "src-999", 1},
	}
	for _, tt := range tests {
		if got := value(fams, "hookstamp_duplicates_total", "route", tt.route, "source", tt.source); got != tt.want {
			t.Errorf("duplicates{route=%q,source=%q} = %v, want %v", tt.route, tt.source, got, tt.want)
		}
	}
	if n := len(fams["hookstamp_duplicates_total"].GetMetric()); n != telemetry.MaxSourcesPerRoute+3 {
		t.Errorf("%d duplicate series, want %d", n, telemetry.MaxSourcesPerRoute+3)
	}
}

// Requests and duplicates counted from many goroutines at once, on series
// none of them has seen before, add up exactly — with the counts in
// atomics (no trace exporter) and in synchronous counters (traces
// exported, for exemplars) alike.
func TestConcurrentCountsAddUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    telemetry.Overrides
	}{{"atomics", telemetry.Overrides{}}, {"synchronous", telemetry.Overrides{SpanExporter: tracetest.NewInMemoryExporter()}}} {
		t.Run(tc.name, func(t *testing.T) {
			tel := setup(t, config.Default().Telemetry, tc.o)
			const goroutines, each = 16, 200
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						route := fmt.Sprintf("r%d", i%5) // new series while others count
						tel.Observe(context.Background(), &ingress.Event{Route: route, Source: fmt.Sprintf("s%d", g%3),
							Result: &idempotency.Result{Outcome: idempotency.Replayed}, Duration: time.Millisecond})
					}
				}()
			}
			wg.Wait()
			fams := scrape(t, tel.MetricsHandler())
			for r := range 5 {
				route := fmt.Sprintf("r%d", r)
				if got, want := value(fams, "hookstamp_requests_total", "route", route, "outcome", "replayed"), float64(goroutines*each/5); got != want {
					t.Errorf("requests{route=%s} = %v, want %v", route, got, want)
				}
				sum := 0.0
				for s := range 3 {
					sum += value(fams, "hookstamp_duplicates_total", "route", route, "source", fmt.Sprintf("s%d", s))
				}
				if want := float64(goroutines * each / 5); sum != want {
					t.Errorf("duplicates{route=%s} = %v, want %v", route, sum, want)
				}
			}
		})
	}
}

// hookstamp_held_keys follows the hooks, and, with a counter (the ledger),
// is what the counter says at each scrape; a failing counter leaves the
// last value.
func TestHeldKeysGauge(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	tel.Init([]string{"a", "b"})
	held := func() (a, b float64) {
		fams := scrape(t, tel.MetricsHandler())
		return value(fams, "hookstamp_held_keys", "route", "a"), value(fams, "hookstamp_held_keys", "route", "b")
	}
	check := func(step string, wantA, wantB float64) {
		t.Helper()
		if a, b := held(); a != wantA || b != wantB {
			t.Errorf("%s: held a=%v b=%v, want %v %v", step, a, b, wantA, wantB)
		}
	}
	check("initial", 0, 0)
	tel.Hooks().HeldChanged("a", 1)
	tel.Hooks().HeldChanged("a", 1)
	tel.AddHeld("a", -1)
	tel.SetHeld("b", 5)
	check("hooks", 1, 5)

	counts := map[string]int{"a": 7}
	var fail error
	tel.CountHeldWith(func(context.Context) (map[string]int, error) { return counts, fail })
	check("counted", 7, 0)
	fail = errors.New("ledger down")
	tel.AddHeld("a", 1)
	check("counter failing", 8, 0)
}

// A gauge of held keys never goes below zero: a resolve the gauge did not
// see become held (held before a restart, counter failing) must not show
// -1 on a dashboard.
func TestHeldKeysGaugeNeverNegative(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	tel.Init([]string{"a"})
	tel.AddHeld("a", -1)
	if v := value(scrape(t, tel.MetricsHandler()), "hookstamp_held_keys", "route", "a"); v != 0 {
		t.Fatalf("held after resolving an unseen key = %v, want 0", v)
	}
	tel.AddHeld("a", 1)
	if v := value(scrape(t, tel.MetricsHandler()), "hookstamp_held_keys", "route", "a"); v != 1 {
		t.Fatalf("held after one key became held = %v, want 1", v)
	}
}

// Each hook counts into its own family and series: a takeover is not a
// commit failure, and a dependency error carries its own dependency and op.
// Init creates at zero every dependency series the engine can report, so
// that increase() sees the first failure of each.
func TestHooksCountIntoTheirOwnSeries(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	tel.Init([]string{"r", "s"}, "ledger", "screen")
	ops := map[string][]string{
		"screen": {"claim", "peek", "complete", "release"},
		"ledger": {"lookup", "claim", "enqueue", "commit", "attempt", "release"},
	}
	fams := scrape(t, tel.MetricsHandler())
	for dep, list := range ops {
		for _, op := range list {
			if v := value(fams, "hookstamp_dependency_errors_total", "dependency", dep, "op", op); v != 0 {
				t.Errorf("after Init, hookstamp_dependency_errors_total{dependency=%q,op=%q} = %v, want 0", dep, op, v)
			}
		}
	}

	h := tel.Hooks()
	h.Takeover("r")
	h.CommitFailure("r")
	h.CommitFailure("r")
	h.CommitFailure("s")
	h.DependencyError("ledger", "release")
	h.DependencyError("ledger", "release")
	h.DependencyError("screen", "complete")
	fams = scrape(t, tel.MetricsHandler())
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hookstamp_takeovers_total", []string{"route", "r"}, 1},
		{"hookstamp_takeovers_total", []string{"route", "s"}, 0},
		{"hookstamp_commit_failures_total", []string{"route", "r"}, 2},
		{"hookstamp_commit_failures_total", []string{"route", "s"}, 1},
		{"hookstamp_dependency_errors_total", []string{"dependency", "ledger", "op", "release"}, 2},
		{"hookstamp_dependency_errors_total", []string{"dependency", "screen", "op", "release"}, 0},
		{"hookstamp_dependency_errors_total", []string{"dependency", "screen", "op", "complete"}, 1},
		{"hookstamp_dependency_errors_total", []string{"dependency", "ledger", "op", "commit"}, 0},
	}
	for _, tt := range tests {
		if got := value(fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// With telemetry.metrics.prometheus off there is no metrics handler (the
// admin listener answers 404: gateway.TestAdminMetricsOff).
func TestMetricsOff(t *testing.T) {
	cfg := config.Default().Telemetry
	cfg.Metrics.Prometheus = false
	tel := setup(t, cfg)
	if h := tel.MetricsHandler(); h != nil {
		t.Errorf("MetricsHandler() = %T, want nil", h)
	}
}

// TestExemplarsOnlyWithExportedTraces: an OpenMetrics scrape carries
// exemplars naming the trace of a measurement when traces are exported
// (the trace can be looked up), and none when traces.exporter is none (the
// trace exists nowhere, and offering every measurement to the reservoirs
// costs the hot path).
func TestExemplarsOnlyWithExportedTraces(t *testing.T) {
	up := newUpstream(t)
	_, exported := spanRecorder()
	for _, tc := range []struct {
		name      string
		o         gateway.Options
		exemplars bool
	}{{"exporter none", noTraces(), false}, {"exported", exported, true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, gatewayConfig(t, up.URL, scenarioRoutes, ""), tc.o)
			wantOutcome(t, send(t, g, "/hooks", `{"a":1}`, "X-Event-Id", "evt_ex_"+strings.ReplaceAll(tc.name, " ", "_")), 200, "forwarded")
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			g.Telemetry().MetricsHandler().ServeHTTP(rec, req)
			var line string
			for l := range strings.SplitSeq(rec.Body.String(), "\n") {
				if strings.HasPrefix(l, "hookstamp_requests_total{") && strings.Contains(l, `outcome="forwarded"`) {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("no hookstamp_requests_total series for the forward in:\n%s", rec.Body)
			}
			// An exemplar follows "# {" with trace_id and span_id labels, in
			// either order.
			_, exemplar, _ := strings.Cut(line, " # {")
			if got := strings.Contains(exemplar, "trace_id="); got != tc.exemplars {
				t.Fatalf("exemplar on %q: %v, want %v", line, got, tc.exemplars)
			}
		})
	}
}

// While the ledger cannot count the queue, the queue gauges report the
// last counts, the oldest delivery's age still growing: series that
// vanished would resolve HookstampDeadDeliveries and HookstampQueueBacklog
// mid-outage, to wait out their "for" again after it. The failure is
// logged once, not at every scrape.
func TestQueueGaugesKeepTheLastCounts(t *testing.T) {
	var logs testenv.Buffer
	tel, err := telemetry.SetupWith(context.Background(), config.Default().Telemetry, "v-test",
		slog.New(slog.NewJSONHandler(&logs, nil)), telemetry.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oldest := now.Add(-time.Minute)
	var fail error
	count := func(context.Context) (map[string]telemetry.QueueCount, error) {
		if fail != nil {
			return nil, fail
		}
		return map[string]telemetry.QueueCount{"hooks": {Queued: 3, Dead: 2, Oldest: oldest}}, nil
	}
	if _, err := tel.ObserveQueue([]string{"hooks"}, count, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	check := func(step string, wantAge float64) {
		t.Helper()
		fams := scrape(t, tel.MetricsHandler())
		queued := value(fams, "hookstamp_queue_depth", "route", "hooks", "state", "queued")
		dead := value(fams, "hookstamp_queue_depth", "route", "hooks", "state", "dead")
		age := value(fams, "hookstamp_queue_oldest_seconds", "route", "hooks")
		if queued != 3 || dead != 2 || age != wantAge {
			t.Errorf("%s: queued %v, dead %v, oldest %v s; want 3, 2, %v", step, queued, dead, age, wantAge)
		}
	}
	check("counted", 60)
	fail = errors.New("ledger down")
	for i := range 3 {
		now = now.Add(time.Minute)
		check(fmt.Sprintf("ledger down, scrape %d", i+1), float64(120+60*i))
	}
	if n := strings.Count(logs.String(), "cannot count the queue"); n != 1 {
		t.Errorf("%d warnings in 3 failed scrapes, want 1:\n%s", n, logs.String())
	}
	fail = nil
	check("counted again", 240)
	fail = errors.New("ledger down again")
	check("down again", 240)
	if n := strings.Count(logs.String(), "cannot count the queue"); n != 2 {
		t.Errorf("%d warnings after a second outage, want 2:\n%s", n, logs.String())
	}
}

// hookstamp_dependency_up is what each dependency's check finds at scrape
// time. A check that does not answer costs a scrape at most
// DependencyCheckTimeout and reads as down; while it still runs, later
// scrapes report the last finding and start no other.
func TestDependencyUpGauge(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	var ledgerDown atomic.Bool
	ledgerDown.Store(true)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	var screenChecks atomic.Int32
	err := tel.ObserveDependencies([]telemetry.DependencyCheck{
		{Name: "ledger", Check: func(context.Context) error {
			if ledgerDown.Load() {
				return errors.New("connection refused")
			}
			return nil
		}},
		{Name: "screen", Check: func(context.Context) error {
			screenChecks.Add(1)
			<-hang // deaf to its context
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		ledgerDown     bool
		ledger, screen float64
	}{{true, 0, 0}, {true, 0, 0}, {false, 1, 0}} {
		ledgerDown.Store(want.ledgerDown)
		start := time.Now()
		fams := scrape(t, tel.MetricsHandler())
		if d := time.Since(start); d > telemetry.DependencyCheckTimeout+500*time.Millisecond {
			t.Errorf("scrape %d took %v", i+1, d)
		}
		l := value(fams, "hookstamp_dependency_up", "dependency", "ledger")
		s := value(fams, "hookstamp_dependency_up", "dependency", "screen")
		if l != want.ledger || s != want.screen {
			t.Errorf("scrape %d: ledger %v, screen %v; want %v, %v", i+1, l, s, want.ledger, want.screen)
		}
	}
	if n := screenChecks.Load(); n != 1 {
		t.Errorf("the hung screen was checked %d times, want 1: checks pile up", n)
	}
}
