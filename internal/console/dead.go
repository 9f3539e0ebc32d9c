package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// deadListed bounds each route's dead list on the page.
const deadListed = 100

type deadData struct {
	Filter string
	// NoAsync: no route delivers asynchronously, so nothing can be dead.
	NoAsync bool
	Routes  []routeDead
}

type routeDead struct {
	Name string
	// Redrivable: the route stores requests; one switched to sync
	// without record.request has nothing to deliver again.
	Redrivable bool
	Dead       []eventRow
	More       bool
	Error      string
}

func (c *Console) dead(w http.ResponseWriter, r *http.Request, s *session) {
	filter := r.URL.Query().Get("route")
	if _, ok := c.route(filter); filter != "" && !ok {
		c.fail(w, r, s, http.StatusNotFound, "No route of that name is configured.")
		return
	}
	lq, cancel := c.ledgerQueries(r)
	defer cancel()
	// A route switched from async keeps its dead deliveries (SPEC §10).
	var depths map[string]Depth
	if c.o.Depths != nil {
		_ = lq.ask(func(ctx context.Context) (err error) { // unknown: async routes only
			depths, err = c.o.Depths(ctx)
			return err
		})
	}
	d := deadData{Filter: filter, NoAsync: true}
	for _, rt := range c.o.Routes {
		if !rt.Async && depths[rt.Name].Dead == 0 || filter != "" && rt.Name != filter {
			continue
		}
		d.NoAsync = false
		rd := routeDead{Name: rt.Name, Redrivable: rt.StoresRequests}
		var page admin.RecordList
		err := lq.ask(func(ctx context.Context) (err error) {
			page, err = c.o.EventLog.EventList(ctx, idempotency.ListQuery{Route: rt.Name, State: idempotency.StateDead, Limit: deadListed})
			return err
		})
		if err != nil {
			rd.Error = detail(err)
		}
		for _, rec := range page.Records {
			rd.Dead = append(rd.Dead, eventRow{Route: rec.Route, Key: rec.Key, State: rec.State,
				Created: when(rec.CreatedAt), Source: rec.Source})
		}
		rd.More = page.NextCursor != nil
		d.Routes = append(d.Routes, rd)
	}
	c.render(w, r, lq.status(), "dead", page{Title: "Dead", Nav: "dead", CSRF: s.csrf,
		Notice: deadNotice(r.URL.Query()), Alert: lq.alert(), Data: d})
}

// deadNotice is the line shown after an action (notices); after a redrive
// of a whole route, with how many it queued.
func deadNotice(q url.Values) string {
	n, err := strconv.Atoi(q.Get("queued"))
	switch {
	case q.Get("done") != "redrive-all" || err != nil || n < 1:
		return notices[q.Get("done")]
	case n == 1:
		return "Queued again: the route's one dead delivery gets a fresh set of attempts."
	}
	return fmt.Sprintf("Queued again: the route's %d dead deliveries get a fresh set of attempts.", n)
}
