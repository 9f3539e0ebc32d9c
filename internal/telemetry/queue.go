package telemetry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The queue's instruments (SPEC §11), scraped as hookstamp_queue_depth,
// hookstamp_queue_oldest_seconds, hookstamp_delivery_attempts_total and
// hookstamp_delivery_lag_seconds.
const (
	metricQueueDepth       = "hookstamp.queue.depth"
	metricQueueOldest      = "hookstamp.queue.oldest"
	metricDeliveryAttempts = "hookstamp.delivery.attempts"
	metricDeliveryLag      = "hookstamp.delivery.lag"
)

// AttemptResults are the result label values of
// hookstamp_delivery_attempts_total.
var AttemptResults = []string{"delivered", "retried", "dead", "held", "gave_up"}

// lagBuckets (seconds) span a delivery made at once to one that waited
// out a day-long outage.
var lagBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400}

// QueueCount is one route's async deliveries waiting (queued) and given up
// (dead), and when the oldest waiting one was acknowledged.
type QueueCount struct {
	Queued, Dead int
	Oldest       time.Time // zero when none is queued
}

// QueueMetrics are the queue's instruments; its methods are the queue's
// hooks.
type QueueMetrics struct {
	attempts metric.Int64Counter
	lag      metric.Float64Histogram
}

// ObserveQueue registers the queue's instruments for routes, the async
// ones (their series start at zero): depth and age are read from count at
// each scrape, so that they hold across replicas and restarts. Any other
// route count finds queued or dead deliveries of is reported too: one
// switched to sync or removed keeps them (SPEC §10), and its dead ones
// still wait for an operator. When count fails, the gauges report the
// last counts it returned.
func (t *Telemetry) ObserveQueue(routes []string, count func(context.Context) (map[string]QueueCount, error), now func() time.Time) (*QueueMetrics, error) {
	m := t.mp.Meter(instrumentation)
	q := &QueueMetrics{}
	var err error
	if q.attempts, err = m.Int64Counter(metricDeliveryAttempts,
		metric.WithDescription("Attempts to deliver async deliveries, by result: delivered, retried, dead.")); err != nil {
		return nil, fmt.Errorf("telemetry: instrument %s: %w", metricDeliveryAttempts, err)
	}
	if q.lag, err = m.Float64Histogram(metricDeliveryLag, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(lagBuckets...),
		metric.WithDescription("Time from an async delivery's acknowledgement to its final answer from the upstream.")); err != nil {
		return nil, fmt.Errorf("telemetry: instrument %s: %w", metricDeliveryLag, err)
	}
	depth, err := m.Int64ObservableGauge(metricQueueDepth, metric.WithDescription("Async deliveries queued and dead, by route."))
	if err != nil {
		return nil, fmt.Errorf("telemetry: instrument %s: %w", metricQueueDepth, err)
	}
	oldest, err := m.Float64ObservableGauge(metricQueueOldest, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest queued async delivery, by route; 0 when none is queued."))
	if err != nil {
		return nil, fmt.Errorf("telemetry: instrument %s: %w", metricQueueOldest, err)
	}
	var (
		mu     sync.Mutex
		last   map[string]QueueCount // the last counts read, reported while the ledger cannot be read
		warned bool                  // the failure to count was logged; until a count succeeds again
	)
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		cctx, cancel := context.WithTimeout(ctx, heldCountTimeout)
		defer cancel()
		counts, err := count(cctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			// Series that vanish resolve the alerts on them mid-incident
			// (dead deliveries, the backlog), which then wait out their
			// "for" again: the last counts stand, their age growing.
			if !warned {
				t.log.WarnContext(ctx, "hookstamp_queue_depth: cannot count the queue; reporting the last counts", "err", err)
				warned = true
			}
			counts = last
		} else {
			warned, last = false, counts
		}
		observe := func(r string, c QueueCount) {
			o.ObserveInt64(depth, int64(c.Queued), metric.WithAttributes(attribute.String("route", r), attribute.String("state", "queued")))
			o.ObserveInt64(depth, int64(c.Dead), metric.WithAttributes(attribute.String("route", r), attribute.String("state", "dead")))
			age := 0.0
			if !c.Oldest.IsZero() {
				age = max(0, now().Sub(c.Oldest).Seconds())
			}
			o.ObserveFloat64(oldest, age, routeAttrs(r))
		}
		for _, r := range routes {
			observe(r, counts[r])
		}
		for r, c := range counts {
			if (c.Queued > 0 || c.Dead > 0) && !slices.Contains(routes, r) {
				observe(r, c)
			}
		}
		return nil
	}, depth, oldest)
	if err != nil {
		return nil, fmt.Errorf("telemetry: queue gauges: %w", err)
	}
	for _, r := range routes {
		for _, res := range AttemptResults {
			q.attempts.Add(context.Background(), 0, metric.WithAttributes(attribute.String("route", r), attribute.String("result", res)))
		}
	}
	return q, nil
}

// Attempt counts one attempt's result.
func (q *QueueMetrics) Attempt(route, result string) {
	q.attempts.Add(context.Background(), 1, metric.WithAttributes(attribute.String("route", route), attribute.String("result", result)))
}

// Lag records a delivery's time from acknowledgement to final answer.
func (q *QueueMetrics) Lag(route string, d time.Duration) {
	q.lag.Record(context.Background(), d.Seconds(), routeAttrs(route))
}
