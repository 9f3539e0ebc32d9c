package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/ingress"
)

// The instruments of SPEC §7. The Prometheus exporter appends "_total" to
// counters and the unit ("s" → "_seconds") to the histograms, so
// "hookstamp.requests" is scraped as hookstamp_requests_total and
// "hookstamp.request.duration" as hookstamp_request_duration_seconds.
const (
	metricRequests         = "hookstamp.requests"
	metricRequestDuration  = "hookstamp.request.duration"
	metricUpstreamDuration = "hookstamp.upstream.duration"
	metricDuplicates       = "hookstamp.duplicates"
	metricShadow           = "hookstamp.shadow"
	metricTakeovers        = "hookstamp.takeovers"
	metricCommitFailures   = "hookstamp.commit_failures"
	metricHeldKeys         = "hookstamp.held_keys"
	metricDependencyErrors = "hookstamp.dependency_errors"
)

// heldCountTimeout bounds the ledger query behind hookstamp_held_keys, so
// that a slow database cannot hang a scrape.
const heldCountTimeout = 2 * time.Second

// Source label values beside the senders' own.
const (
	sourceOther = "other"   // past MaxSourcesPerRoute
	sourceNone  = "unknown" // the request had no source
)

// MaxSourcesPerRoute caps the distinct values of the source label of
// hookstamp_duplicates_total on one route. A source is the sender's IP
// address or a header value (routes[].source): the sender chooses it, and an
// unbounded label would let it grow the metrics without limit. The first
// MaxSourcesPerRoute sources seen since start-up keep their own series;
// duplicates from any later source are counted under source="other". Exact
// top sources over a time window are /admin/stats' job.
const MaxSourcesPerRoute = 100

// durationBuckets (seconds) span a replay answered from memory (under a
// millisecond) to an upstream timeout.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// DependencyOps are the operations the state machine reports failures of
// (idempotency.Hooks.DependencyError), per dependency. Init creates their
// series at zero.
var DependencyOps = map[string][]string{
	"screen": {"claim", "peek", "complete", "release"},
	"ledger": {"lookup", "claim", "enqueue", "commit", "attempt", "release"},
}

type metrics struct {
	// requests and duplicates are counted per request. With exemplars on
	// (traces exported) they are synchronous counters, so that a series
	// names the trace of its last measurement; otherwise they are nil and
	// the counts are atomics in byOutcome and bySource, read by observable
	// counters when metrics are collected: a synchronous Add normalizes
	// and looks up its attribute set every time, some 2% of a cached
	// repeat's CPU for the two (make bench, B2).
	requests       metric.Int64Counter
	duplicates     metric.Int64Counter
	shadow         metric.Int64Counter // shadowed repeats by what enforce would answer
	duration       metric.Float64Histogram
	upstream       metric.Float64Histogram
	takeovers      metric.Int64Counter
	commitFailures metric.Int64Counter
	depErrors      metric.Int64Counter
	log            *slog.Logger

	// byOutcome and bySource cache the attribute sets of (route, outcome)
	// and (route, source): building one sorts and copies its attributes,
	// per request otherwise.
	byOutcome, bySource, byWould attrCache

	mu         sync.Mutex
	routes     map[string]*routeState
	countHeld  func(context.Context) (map[string]int, error)
	heldWarned bool
	certs      certExpiry
}

// routeState is what the metrics remember of one route.
type routeState struct {
	sources map[string]struct{} // admitted source label values
	held    int64
}

func newMetrics(m metric.Meter, log *slog.Logger, exemplars bool) (*metrics, error) {
	ms := &metrics{log: log, routes: map[string]*routeState{}}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("telemetry: instrument %s: %w", name, err)
		}
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err != nil {
			err = fmt.Errorf("telemetry: instrument %s: %w", name, err)
		}
		return h
	}
	hot := func(name, desc string, c *attrCache) metric.Int64Counter {
		if exemplars {
			return counter(name, desc)
		}
		if err == nil {
			_, err = m.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithInt64Callback(
				func(_ context.Context, o metric.Int64Observer) error {
					c.observe(o)
					return nil
				}))
			if err != nil {
				err = fmt.Errorf("telemetry: instrument %s: %w", name, err)
			}
		}
		return nil
	}
	ms.requests = hot(metricRequests, "Requests that reached a route, by outcome.", &ms.byOutcome)
	ms.duration = histogram(metricRequestDuration, "Time from the request's arrival to its answer, by outcome.")
	ms.upstream = histogram(metricUpstreamDuration, "Time of each forward to the upstream, answer read, failures included.")
	ms.duplicates = hot(metricDuplicates, "Repeats intercepted (replayed, conflict, mismatch; shadowed in shadow mode), by sender.", &ms.bySource)
	ms.shadow = counter(metricShadow, "Repeats forwarded in shadow mode, by the outcome enforce mode would have answered.")
	ms.takeovers = counter(metricTakeovers, "Claims taken over after their owner's lease expired.")
	ms.commitFailures = counter(metricCommitFailures, "Deliveries forwarded with a final answer whose ledger commit failed.")
	ms.depErrors = counter(metricDependencyErrors, "Calls to the screen or the ledger that failed to reach it.")
	if err != nil {
		return nil, err
	}
	_, err = m.Int64ObservableGauge(metricHeldKeys,
		metric.WithDescription("Keys held after an ambiguous upstream result, waiting for an operator."),
		metric.WithInt64Callback(ms.observeHeld))
	if err != nil {
		return nil, fmt.Errorf("telemetry: instrument %s: %w", metricHeldKeys, err)
	}
	if err := registerTLSExpiry(m, ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// Init creates every series of the configured routes at zero (requests by
// outcome, shadowed repeats by what enforce would answer, takeovers,
// commit failures, held keys) and the dependency error
// series of the named dependencies ("ledger", "screen"), so that rate() and
// increase() see the first event of each.
func (t *Telemetry) Init(routes []string, dependencies ...string) {
	ctx := context.Background()
	m := t.m
	for _, r := range routes {
		for _, o := range idempotency.Outcomes {
			m.count(ctx, m.requests, m.byOutcome.get(r, string(o), outcomeAttrSet), 0)
		}
		for _, w := range idempotency.ShadowWould {
			m.shadow.Add(ctx, 0, m.byWould.get(r, string(w), wouldAttrSet).add...)
		}
		m.takeovers.Add(ctx, 0, routeAttrs(r))
		m.commitFailures.Add(ctx, 0, routeAttrs(r))
		m.mu.Lock()
		m.route(r)
		m.mu.Unlock()
	}
	for _, d := range dependencies {
		for _, op := range DependencyOps[d] {
			m.depErrors.Add(ctx, 0, depAttrs(d, op))
		}
	}
}

// Observe puts one finished request on its server span (annotateSpan) and
// counts it (ingress.Observer): requests and their duration by route and
// outcome, and, for a repeat intercepted, hookstamp_duplicates_total by
// route and sender.
func (t *Telemetry) Observe(ctx context.Context, ev *ingress.Event) {
	annotateSpan(ctx, ev)
	m := t.m
	o := ev.Result.Outcome
	attrs := m.byOutcome.get(ev.Route, string(o), outcomeAttrSet)
	m.count(ctx, m.requests, attrs, 1)
	if ev.Duration > 0 { // 0: unknown (a body refused while it was read)
		m.duration.Record(ctx, ev.Duration.Seconds(), attrs.record...)
	}
	if o.IsDuplicate() {
		m.count(ctx, m.duplicates, m.bySource.get(ev.Route, m.sourceLabel(ev.Route, ev.Source), sourceAttrSet), 1)
	}
	if w := ev.Result.Would; o == idempotency.Shadowed && w != "" {
		m.shadow.Add(ctx, 1, m.byWould.get(ev.Route, string(w), wouldAttrSet).add...)
	}
}

// count adds n to the series attrs of a per-request counter: to the
// synchronous counter c when there is one, else to the series' atomic.
func (m *metrics) count(ctx context.Context, c metric.Int64Counter, attrs *attrOpts, n int64) {
	if c != nil {
		c.Add(ctx, n, attrs.add...)
		return
	}
	attrs.n.Add(n)
}

// ObserveUpstream records the time of one forward to the upstream of route
// (ingress.Observer).
func (t *Telemetry) ObserveUpstream(ctx context.Context, route string, d time.Duration) {
	t.m.upstream.Record(ctx, d.Seconds(), routeAttrs(route))
}

// Hooks are the state machine's events as metrics (idempotency.Options.Hooks).
func (t *Telemetry) Hooks() idempotency.Hooks {
	m := t.m
	return idempotency.Hooks{
		Takeover: func(route string) {
			m.takeovers.Add(context.Background(), 1, routeAttrs(route))
		},
		CommitFailure: func(route string) {
			m.commitFailures.Add(context.Background(), 1, routeAttrs(route))
		},
		DependencyError: func(dependency, op string) {
			m.depErrors.Add(context.Background(), 1, depAttrs(dependency, op))
		},
		HeldChanged: t.AddHeld,
	}
}

// AddHeld changes hookstamp_held_keys of route by delta (a key became held,
// +1; an operator resolved one, -1).
func (t *Telemetry) AddHeld(route string, delta int) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	st := t.m.route(route)
	st.held = max(0, st.held+int64(delta))
}

// SetHeld sets hookstamp_held_keys of route, e.g. from the ledger at start-up.
func (t *Telemetry) SetHeld(route string, n int) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.m.route(route).held = int64(n)
}

// CountHeldWith makes every collection of hookstamp_held_keys ask count
// (e.g. sqlledger's CountHeldByRoute) for the held keys of every route, so
// that the gauge is right after a restart and across replicas sharing one
// ledger. A route count omits is 0. When count fails, the gauge keeps the
// last counts, adjusted by AddHeld.
func (t *Telemetry) CountHeldWith(count func(context.Context) (map[string]int, error)) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.m.countHeld = count
}

func (m *metrics) observeHeld(ctx context.Context, o metric.Int64Observer) error {
	m.mu.Lock()
	count := m.countHeld
	m.mu.Unlock()
	if count != nil {
		cctx, cancel := context.WithTimeout(ctx, heldCountTimeout)
		counts, err := count(cctx)
		cancel()
		m.mu.Lock()
		if err != nil {
			if !m.heldWarned {
				m.log.WarnContext(ctx, "hookstamp_held_keys: cannot count held keys; reporting the last counts", "err", err)
				m.heldWarned = true
			}
		} else {
			m.heldWarned = false
			for r, st := range m.routes {
				st.held = int64(counts[r])
			}
			for r, n := range counts {
				m.route(r).held = int64(n)
			}
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for r, st := range m.routes {
		o.Observe(st.held, routeAttrs(r))
	}
	return nil
}

// sourceLabel bounds the source label: see MaxSourcesPerRoute.
func (m *metrics) sourceLabel(route, source string) string {
	if source == "" {
		return sourceNone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.route(route)
	if _, ok := st.sources[source]; ok {
		return source
	}
	if len(st.sources) >= MaxSourcesPerRoute {
		return sourceOther
	}
	st.sources[source] = struct{}{}
	return source
}

// route returns the state of route, creating it; m.mu is held.
func (m *metrics) route(name string) *routeState {
	st, ok := m.routes[name]
	if !ok {
		st = &routeState{sources: map[string]struct{}{}}
		m.routes[name] = st
	}
	return st
}

func routeAttrs(route string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("route", route))
}

// attrCache maps a pair of label values to their attribute set, as the
// option slices the instruments take (passing a prebuilt slice allocates
// nothing; building the set sorts and copies its attributes). It grows
// copy-on-write — its pairs are bounded: routes × outcomes, routes ×
// MaxSourcesPerRoute — so that lookups take no lock.
type attrCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[[2]string]*attrOpts]
}

type attrOpts struct {
	add     []metric.AddOption
	record  []metric.RecordOption
	observe []metric.ObserveOption
	n       atomic.Int64 // the series' count, when its counter is observable
}

func (c *attrCache) get(a, b string, build func(a, b string) attribute.Set) *attrOpts {
	k := [2]string{a, b}
	if p := c.m.Load(); p != nil {
		if o, ok := (*p)[k]; ok {
			return o
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if o, ok := (*old)[k]; ok { // added since the lookup above
			return o
		}
	}
	opt := metric.WithAttributeSet(build(a, b))
	o := &attrOpts{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}, observe: []metric.ObserveOption{opt}}
	next := map[[2]string]*attrOpts{k: o}
	if old != nil {
		for kk, v := range *old {
			next[kk] = v
		}
	}
	c.m.Store(&next)
	return o
}

// observe reports the count of every series (observable counters).
func (c *attrCache) observe(o metric.Int64Observer) {
	if p := c.m.Load(); p != nil {
		for _, a := range *p {
			o.Observe(a.n.Load(), a.observe...)
		}
	}
}

func outcomeAttrSet(route, outcome string) attribute.Set {
	return attribute.NewSet(attribute.String("route", route), attribute.String("outcome", outcome))
}

func sourceAttrSet(route, source string) attribute.Set {
	return attribute.NewSet(attribute.String("route", route), attribute.String("source", source))
}

func wouldAttrSet(route, would string) attribute.Set {
	return attribute.NewSet(attribute.String("route", route), attribute.String("would", would))
}

func depAttrs(dependency, op string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("dependency", dependency), attribute.String("op", op))
}
