package stats

import (
	"context"
	"sync"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// MemoryOptions configure a Memory recorder. Zero values take the defaults
// named.
type MemoryOptions struct {
	// Capacity is how many keys, and how many sources, one bucket of one
	// route keeps (DefaultCapacity).
	Capacity int
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Memory records in the process: right for one gateway process (the memory
// screen). Record takes one short per-route lock and never allocates for a
// name already counted in the current bucket. Memory holds, per route,
// 84 buckets (60 minutes, 24 hours) of at most Capacity keys and Capacity
// sources each.
type Memory struct {
	capacity int
	now      func() time.Time

	mu     sync.RWMutex
	routes map[string]*memRoute
}

type memRoute struct {
	mu    sync.Mutex
	rings [len(tiers)][]memBucket
}

type memBucket struct {
	epoch    int64 // which bucket the slot holds; stale slots are reset on use
	used     bool
	outcomes []int64 // ordered as idempotency.Outcomes
	keys     *topK
	sources  *topK
}

// NewMemory returns an empty in-process recorder.
func NewMemory(o MemoryOptions) *Memory {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Memory{capacity: o.Capacity, now: o.Now, routes: map[string]*memRoute{}}
}

// Record counts one finished request: its outcome, and for a repeat
// (o.IsDuplicate()) its key and source. Outcomes not in
// idempotency.Outcomes are ignored.
func (m *Memory) Record(_ context.Context, route string, o idempotency.Outcome, key, source string) {
	oi, ok := outcomeIndex[o]
	if !ok {
		return
	}
	r := m.route(route)
	now := m.now()
	dup := o.IsDuplicate()
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range tiers {
		b := r.bucket(t, epoch(now, tiers[t].width), m.capacity)
		b.outcomes[oi]++
		if !dup {
			continue
		}
		if key != "" {
			b.keys.add(key, 1)
		}
		if source != "" {
			b.sources.add(source, 1)
		}
	}
}

func (m *Memory) route(name string) *memRoute {
	m.mu.RLock()
	r := m.routes[name]
	m.mu.RUnlock()
	if r != nil {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r = m.routes[name]; r == nil {
		r = &memRoute{}
		for t := range tiers {
			r.rings[t] = make([]memBucket, tiers[t].slots+1)
		}
		m.routes[name] = r
	}
	return r
}

// bucket returns the slot of epoch e in tier t, emptied if it held an
// older bucket. The caller holds r.mu.
func (r *memRoute) bucket(t int, e int64, capacity int) *memBucket {
	b := &r.rings[t][e%int64(tiers[t].slots+1)]
	if b.used && b.epoch == e {
		return b
	}
	b.epoch, b.used = e, true
	if b.keys == nil {
		b.outcomes = make([]int64, len(idempotency.Outcomes))
		b.keys, b.sources = newTopK(capacity), newTopK(capacity)
	} else {
		clear(b.outcomes)
		b.keys.reset()
		b.sources.reset()
	}
	return b
}

// Query sums the buckets covering window and keeps the topN keys and
// sources of each route (all of them when topN < 0).
func (m *Memory) Query(_ context.Context, window time.Duration, topN int) (Snapshot, error) {
	sp, err := spanFor(window, m.now())
	if err != nil {
		return Snapshot{}, err
	}
	m.mu.RLock()
	routes := make(map[string]*memRoute, len(m.routes))
	for name, r := range m.routes {
		routes[name] = r
	}
	m.mu.RUnlock()

	snap := Snapshot{Window: window, Scope: ScopeReplica, Routes: make(map[string]*RouteStats, len(routes))}
	for name, r := range routes {
		if rs := r.query(sp, topN); rs != nil {
			snap.Routes[name] = rs
		}
	}
	return snap, nil
}

// query sums one route's buckets in sp; nil when none holds anything.
func (r *memRoute) query(sp span, topN int) *RouteStats {
	outcomes := make([]int64, len(idempotency.Outcomes))
	keys, sources := map[string]int64{}, map[string]int64{}
	seen, capped := false, false
	r.mu.Lock()
	for i := range r.rings[sp.t] {
		b := &r.rings[sp.t][i]
		if !b.used || b.epoch < sp.first || b.epoch > sp.last {
			continue
		}
		seen = true
		for j, n := range b.outcomes {
			outcomes[j] += n
		}
		b.keys.addTo(keys)
		b.sources.addTo(sources)
		capped = capped || b.keys.full()
	}
	r.mu.Unlock()
	if !seen {
		return nil
	}
	rs := &RouteStats{Outcomes: map[idempotency.Outcome]int64{}, TopKeys: top(keys, topN), TopSources: top(sources, topN), KeysCapped: capped}
	for j, n := range outcomes {
		if n > 0 {
			rs.Outcomes[idempotency.Outcomes[j]] = n
		}
	}
	return rs
}

// Close does nothing: Memory holds no resources beyond memory.
func (m *Memory) Close() error { return nil }
