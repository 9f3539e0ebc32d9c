package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/stats"
)

// windows are the overview's choices.
var windows = []string{"5m", "15m", "1h", "6h", "24h"}

const defaultWindow = "1h"

// topN is how many duplicate keys and sources the overview lists.
const topN = 5

type overviewData struct {
	Window  string
	Windows []string
	Routes  []routeOverview
	// StatsError is why the numbers are missing, when they are.
	StatsError string
	// ReplicaOnly: the numbers are this replica's only (no Redis screen).
	ReplicaOnly bool
}

type routeOverview struct {
	Route
	Stats *admin.RouteStats
	Chart chart
	// Held is the count of held keys; HeldError when the ledger did not
	// answer.
	Held      int
	HeldError bool
	// Queue: the route is async, or was and still has deliveries queued
	// or dead (SPEC §10). Depth is its queue; nil when unknown
	// (DepthError).
	Queue      bool
	Depth      *Depth
	OldestAge  string
	DepthError bool
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	window := r.URL.Query().Get("window")
	if !slices.Contains(windows, window) {
		window = defaultWindow
	}
	d := time.Hour
	if v, err := time.ParseDuration(window); err == nil {
		d = v
	}
	data := overviewData{Window: window, Windows: windows}
	st, err := c.o.Admin.Stats(r.Context(), d, topN)
	if err != nil {
		data.StatsError = detail(err)
	}
	data.ReplicaOnly = st.Scope == string(stats.ScopeReplica)
	lq, cancel := c.ledgerQueries(r)
	defer cancel()
	var depths map[string]Depth
	var depthErr error
	if c.o.Depths != nil {
		depthErr = lq.ask(func(ctx context.Context) (err error) {
			depths, err = c.o.Depths(ctx)
			return err
		})
	}
	var held map[string]int
	heldErr := lq.ask(func(ctx context.Context) (err error) {
		held, err = c.o.Admin.HeldCounts(ctx)
		return err
	})
	now := c.o.Now()
	for _, rt := range c.o.Routes {
		d, has := depths[rt.Name] // absent: nothing queued or dead
		ro := routeOverview{Route: rt, Queue: rt.Async || has, DepthError: rt.Async && depthErr != nil}
		if ro.Queue && c.o.Depths != nil && depthErr == nil {
			ro.Depth = &d
			if !d.OldestQueued.IsZero() {
				ro.OldestAge = now.Sub(d.OldestQueued).Round(time.Second).String()
			}
		}
		if rs := st.Routes[rt.Name]; rs != nil {
			ro.Stats, ro.Chart = rs, outcomeChart(rs.Outcomes)
		}
		ro.Held, ro.HeldError = held[rt.Name], heldErr != nil
		data.Routes = append(data.Routes, ro)
	}
	c.render(w, r, lq.status(), "overview", page{
		Title: "Overview", Nav: "overview", CSRF: s.csrf, Refresh: int(c.o.Refresh / time.Second),
		Notice: notices[r.URL.Query().Get("done")], Alert: lq.alert(), Data: data,
	})
}

// detail is what the console shows of an operation's failure: an
// admin.OpError's or admin.QueryError's own words, or a generic line (the
// cause is logged by the operation).
func detail(err error) string {
	var oe *admin.OpError
	if errors.As(err, &oe) {
		return oe.Detail
	}
	var qe *admin.QueryError
	if errors.As(err, &qe) {
		return "The filters cannot be used: " + qe.Detail + "."
	}
	return "the operation failed; the gateway's log says why"
}

// statusOf is the HTTP status for err on a console page.
func statusOf(err error) int {
	var oe *admin.OpError
	if errors.As(err, &oe) {
		return oe.Status
	}
	return http.StatusInternalServerError
}
