package loadbench

import (
	"context"
	"fmt"
	"time"
)

// asyncRoute is the route YAML of A1: store-and-forward with hookstamp's
// default async settings, as every system keeps the defaults.
const asyncRoute = "    delivery: async\n"

// drainer waits, after a cell, for the queue the cell left to empty, and
// measures its drain.
type drainer interface {
	measure(ctx context.Context) (drainAgg, error)
}

// asyncDrain follows A1's queue after a closed-loop cell or an open-loop
// slice: the deliveries its own upstream receives until the ledger holds
// no queued row.
type asyncDrain struct {
	up     *Upstream // A1's alone, so that its count is A1's deliveries
	pg     *Postgres
	schema string
	max    time.Duration
}

// DrainResult is what the drains after a system's cells measured.
type DrainResult struct {
	Delivered uint64  `json:"delivered"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"drain_per_s"`
	// Left is the queued rows when the last drain stopped: more than 0
	// when it ran out of time.
	Left int64 `json:"queued_left"`
}

// drainAgg accumulates the drains of one system at one concurrency.
type drainAgg struct {
	delivered uint64
	elapsed   time.Duration
	left      int64
}

func (d *drainAgg) add(o drainAgg) {
	d.delivered += o.delivered
	d.elapsed += o.elapsed
	d.left = o.left
}

func (d *drainAgg) result() *DrainResult {
	if d == nil {
		return nil
	}
	res := &DrainResult{Delivered: d.delivered, Seconds: round3(d.elapsed.Seconds()), Left: d.left}
	if d.elapsed > 0 {
		res.PerSecond = round3(float64(d.delivered) / d.elapsed.Seconds())
	}
	return res
}

// asyncSystemUnder starts A1's gateway (Redis screen and PostgreSQL like
// B1, its own schema, prefix and upstream) and returns the system.
func (r *run) asyncSystemUnder(ctx context.Context) (*system, error) {
	const schema = "_async"
	dsn, err := r.pg.Schema(ctx, r.id+schema)
	if err != nil {
		return nil, err
	}
	up, err := StartUpstream()
	if err != nil {
		return nil, fmt.Errorf("A1 upstream: %w", err)
	}
	r.ups = append(r.ups, up)
	gw, err := r.gateway(ctx, "gw-async", GatewayConfig{Store: "postgres", DSN: dsn, Screen: "redis", Prefix: r.prefix("async"),
		OnUnavailable: r.o.ScreenOnUnavailable, UpstreamURL: up.URL, Route: asyncRoute})
	if err != nil {
		return nil, err
	}
	return &system{name: asyncSystem, desc: "Redis+PG, delivery: async, 100% unique (acknowledged/s)",
		doer: NewHTTPTarget(gw.Addr, unique(1)), child: gw, schema: r.id + schema,
		drain: &asyncDrain{up: up, pg: r.pg, schema: r.id + schema, max: r.o.DrainMax}}, nil
}

// measure waits until the queue is empty or d.max has passed, and returns
// what reached the upstream meanwhile. An empty queue at the start
// (delivery kept up with the intake) measures nothing.
func (d *asyncDrain) measure(ctx context.Context) (drainAgg, error) {
	n0, t0 := d.up.Received(), time.Now()
	left, err := d.pg.CountQueued(ctx, d.schema)
	if err != nil || left == 0 {
		return drainAgg{}, wrapDrain(err)
	}
	for left > 0 && time.Since(t0) < d.max && ctx.Err() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
		if left, err = d.pg.CountQueued(ctx, d.schema); err != nil {
			return drainAgg{}, wrapDrain(err)
		}
	}
	return drainAgg{delivered: d.up.Received() - n0, elapsed: time.Since(t0), left: left}, nil
}

func wrapDrain(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("A1 drain: %w", err)
}

// drainAfter measures A1's drain after a cell into a.
func (r *run) drainAfter(ctx context.Context, s *system, a *agg) error {
	d, err := s.drain.measure(ctx)
	if err != nil {
		return err
	}
	if a.drain == nil {
		a.drain = &drainAgg{}
	}
	a.drain.add(d)
	r.logf("  %-4s drain: %d delivered in %v, %d still queued", s.name, d.delivered, d.elapsed.Round(time.Millisecond), d.left)
	return nil
}
