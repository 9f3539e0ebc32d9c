// Package stats answers "what is being delivered twice, and by whom" for
// GET /admin/stats: per route, the count of each outcome, the duplicate
// rate, the keys repeated most and the sources sending the most repeats,
// over a recent window (at most MaxWindow).
//
// Two recorders implement it. Memory keeps everything in the process (the
// memory screen: one gateway process). Redis aggregates in Redis (the redis
// screen) so that every replica records into, and reads from, the same
// numbers.
//
// Both keep time buckets in two tiers — minutes for windows up to an hour,
// hours for windows up to a day — and each bucket keeps at most Capacity
// keys and Capacity sources per route, so memory is bounded whatever the
// traffic. Counts are exact while a bucket sees at most Capacity distinct
// repeated keys (and sources); beyond that the heaviest hitters are kept
// and the light ones are approximate (see topK).
package stats

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// MaxWindow is the longest window a query may ask for.
const MaxWindow = 24 * time.Hour

// DefaultCapacity is how many keys (and sources) one bucket of one route
// keeps when the options say nothing.
const DefaultCapacity = 64

// ErrWindow is returned for a window that is not positive or longer than
// MaxWindow.
var ErrWindow = errors.New("stats: window must be positive and at most 24h")

// Scope says whose requests a snapshot counts.
type Scope string

const (
	// ScopeReplica: this process's only (Memory).
	ScopeReplica Scope = "replica"
	// ScopeCluster: every replica recording under the same Redis prefix
	// (Redis).
	ScopeCluster Scope = "cluster"
)

// Snapshot is the answer of a query.
type Snapshot struct {
	// Window is the window asked for. The buckets read cover it rounded up
	// to whole buckets (minutes up to 1h, hours beyond).
	Window time.Duration
	Scope  Scope
	// Routes holds every route that recorded something in the window (the
	// Redis recorder: every configured route).
	Routes map[string]*RouteStats
}

// RouteStats are one route's numbers over the window.
type RouteStats struct {
	// Outcomes counts requests by outcome; outcomes never seen are absent.
	Outcomes map[idempotency.Outcome]int64
	// TopKeys are the keys with the most repeats (Outcome.IsDuplicate),
	// most first, ties by name.
	TopKeys []Item
	// TopSources are the senders of the most repeats, most first.
	TopSources []Item
	// KeysCapped: a bucket in the window kept as many keys as it can,
	// so keys repeated in it may have been left out, and the counts of
	// those kept may be too high (topK): TopKeys are approximate.
	KeysCapped bool
}

// DuplicateRate is replayed / (forwarded + replayed) (SPEC §7), an async
// route's first deliveries (accepted) counting as forwarded; 0 when
// nothing was forwarded, accepted or replayed.
func (r *RouteStats) DuplicateRate() float64 {
	rep := r.Outcomes[idempotency.Replayed]
	fwd := r.Outcomes[idempotency.Forwarded] + r.Outcomes[idempotency.Accepted]
	if rep+fwd == 0 {
		return 0
	}
	return float64(rep) / float64(rep+fwd)
}

// Item is a key or a source with its repeat count.
type Item struct {
	Name  string
	Count int64
}

// tier is one resolution of buckets of width each, for windows of up to
// slots buckets. A window reads one bucket more than it spans, the current
// one being partly elapsed, so rings hold slots+1 buckets.
type tier struct {
	name  string // in Redis key names
	width time.Duration
	slots int
}

// tiers, finest first. A record goes into the current bucket of each; a
// query reads the finest tier that covers its window.
var tiers = [...]tier{
	{name: "m", width: time.Minute, slots: 60},
	{name: "h", width: time.Hour, slots: 24},
}

// span says which buckets answer a query: tier t, epochs (bucket numbers
// since the Unix epoch) from first to last.
type span struct {
	t           int
	first, last int64
}

// spanFor picks the buckets covering window ending at now: from the one
// holding now-window to the current one, so that the window is covered
// whole, rounded up to bucket boundaries (at 10:00:05 a one-minute window
// reads 09:59 and 10:00).
func spanFor(window time.Duration, now time.Time) (span, error) {
	if window <= 0 || window > MaxWindow {
		return span{}, fmt.Errorf("%w: got %v", ErrWindow, window)
	}
	for i, t := range tiers {
		if window <= t.width*time.Duration(t.slots) {
			return span{t: i, first: epoch(now.Add(-window), t.width), last: epoch(now, t.width)}, nil
		}
	}
	return span{}, fmt.Errorf("%w: got %v", ErrWindow, window)
}

func epoch(now time.Time, width time.Duration) int64 {
	return now.UnixNano() / int64(width)
}

// outcomeIndex numbers the known outcomes for the per-bucket counters.
var outcomeIndex = func() map[idempotency.Outcome]int {
	m := make(map[idempotency.Outcome]int, len(idempotency.Outcomes))
	for i, o := range idempotency.Outcomes {
		m[o] = i
	}
	return m
}()

// top sorts counts most first (ties by name, so answers are stable) and
// keeps n of them.
func top(counts map[string]int64, n int) []Item {
	items := make([]Item, 0, len(counts))
	for name, c := range counts {
		if c > 0 {
			items = append(items, Item{Name: name, Count: c})
		}
	}
	slices.SortFunc(items, func(a, b Item) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if n >= 0 && len(items) > n {
		items = items[:n]
	}
	return items
}
