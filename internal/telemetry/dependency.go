package telemetry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metricDependencyUp is scraped as hookstamp_dependency_up.
const metricDependencyUp = "hookstamp.dependency.up"

// DependencyCheckTimeout bounds each check behind hookstamp_dependency_up:
// a scrape waits for it at most this long, and a dependency that has not
// answered by then is down.
const DependencyCheckTimeout = time.Second

// DependencyCheck is one dependency's readiness check (the one /readyz
// runs): nil when it answers.
type DependencyCheck struct {
	Name  string
	Check func(context.Context) error
}

// ObserveDependencies registers hookstamp_dependency_up{dependency}: 1
// when the dependency's check passes, 0 when it fails or gives no answer
// within DependencyCheckTimeout, checked at each scrape. The errors
// counted in hookstamp_dependency_errors_total happen on deliveries'
// paths; without traffic (every replica out of its Service, not ready)
// this gauge still sees an outage. A check still running from an earlier
// scrape is not started again: the scrape reports what the last one
// found, so slow scrapes cannot pile checks up on a struggling database.
func (t *Telemetry) ObserveDependencies(checks []DependencyCheck) error {
	if len(checks) == 0 {
		return nil
	}
	probes := make([]*depProbe, len(checks))
	for i, c := range checks {
		probes[i] = &depProbe{check: c.Check, attrs: metric.WithAttributes(attribute.String("dependency", c.Name))}
	}
	_, err := t.mp.Meter(instrumentation).Int64ObservableGauge(metricDependencyUp,
		metric.WithDescription("1 when the dependency answers its readiness check at scrape time, else 0."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			var wg sync.WaitGroup
			for _, p := range probes {
				wg.Go(func() { o.Observe(p.up(), p.attrs) })
			}
			wg.Wait()
			return nil
		}))
	if err != nil {
		return fmt.Errorf("telemetry: instrument %s: %w", metricDependencyUp, err)
	}
	return nil
}

// depProbe runs one dependency's check, at most one at a time.
type depProbe struct {
	check func(context.Context) error
	attrs metric.ObserveOption

	mu      sync.Mutex
	running bool
	last    int64 // what the last check found; 0 while one runs late
}

// up checks the dependency and returns 1 when it answered within
// DependencyCheckTimeout, else 0; while an earlier check still runs, what
// the last one found.
func (p *depProbe) up() int64 {
	p.mu.Lock()
	if p.running {
		defer p.mu.Unlock()
		return p.last
	}
	p.running = true
	p.mu.Unlock()
	done := make(chan int64, 1)
	go func() {
		// Not the scrape's context: a check that outlives the scrape
		// (one that ignores its context) still ends the running state.
		ctx, cancel := context.WithTimeout(context.Background(), DependencyCheckTimeout)
		defer cancel()
		v := int64(1)
		if err := p.check(ctx); err != nil {
			v = 0
		}
		p.mu.Lock()
		p.running, p.last = false, v
		p.mu.Unlock()
		done <- v
	}()
	t := time.NewTimer(DependencyCheckTimeout + 50*time.Millisecond)
	defer t.Stop()
	select {
	case v := <-done:
		return v
	case <-t.C:
		p.mu.Lock()
		defer p.mu.Unlock()
		p.last = 0
		return 0
	}
}
