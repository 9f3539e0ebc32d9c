package admin

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/stats"
)

// StatsAnswer is the answer of GET /admin/stats (SPEC §8).
type StatsAnswer struct {
	Window string `json:"window"`
	// Scope is "replica" when the numbers are this replica's only (no
	// Redis screen), "cluster" when every replica's.
	Scope  string                 `json:"scope"`
	Routes map[string]*RouteStats `json:"routes"`
}

// RouteStats are one route's numbers over the window.
type RouteStats struct {
	// Outcomes has every outcome, 0 when none happened.
	Outcomes      map[string]int64 `json:"outcomes"`
	DuplicateRate float64          `json:"duplicate_rate"`
	TopKeys       []KeyCount       `json:"top_keys"`
	TopSources    []SourceCount    `json:"top_sources"`
	// TopKeysExact is false when the statistics kept as many keys as they
	// can in a minute or hour of the window: keys repeated then may be
	// missing from TopKeys, and the counts shown may be off.
	TopKeysExact bool `json:"top_keys_exact"`
}

// KeyCount is a key and the repeats intercepted for it.
type KeyCount struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// SourceCount is a sender and the repeats it sent.
type SourceCount struct {
	Source string `json:"source"`
	Count  int64  `json:"count"`
}

// maxTop bounds ?top=.
const maxTop = 100

// stats answers per route: counts by outcome, duplicate rate, top keys and
// sources over ?window= (a Go duration, default 1h, at most 24h), ?top= of
// each (default Options.TopN, at most 100). Every configured route is
// listed, with zeros when it saw nothing.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if s.o.Stats == nil {
		problem(w, http.StatusNotFound, "statistics are off")
		return
	}
	q := r.URL.Query()
	window := time.Hour
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > stats.MaxWindow {
			problem(w, http.StatusBadRequest, "window must be a duration such as 15m or 1h, at most 24h")
			return
		}
		window = d
	}
	topN := s.o.TopN
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTop {
			problem(w, http.StatusBadRequest, fmt.Sprintf("top must be an integer from 1 to %d", maxTop))
			return
		}
		topN = n
	}
	out, err := s.Stats(r.Context(), window, topN)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func routeStats(rs *stats.RouteStats) *RouteStats {
	out := &RouteStats{Outcomes: make(map[string]int64, len(idempotency.Outcomes)),
		TopKeys: []KeyCount{}, TopSources: []SourceCount{}, TopKeysExact: rs == nil || !rs.KeysCapped}
	for _, o := range idempotency.Outcomes {
		out.Outcomes[string(o)] = 0
	}
	if rs == nil {
		return out
	}
	for o, n := range rs.Outcomes {
		out.Outcomes[string(o)] = n
	}
	out.DuplicateRate = rs.DuplicateRate()
	for _, it := range rs.TopKeys {
		out.TopKeys = append(out.TopKeys, KeyCount{Key: it.Name, Count: it.Count})
	}
	for _, it := range rs.TopSources {
		out.TopSources = append(out.TopSources, SourceCount{Source: it.Name, Count: it.Count})
	}
	return out
}

// shortDuration writes d without zero units: 1h, 15m, 1h30m, 90s → 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
