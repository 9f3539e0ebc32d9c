package console

import (
	"context"
	"net/http"

	"github.com/hookstamp/hookstamp/internal/admin"
)

// heldListed bounds each route's held list on the page.
const heldListed = 200

type heldData struct {
	// Filter is the route asked for; "" = every route.
	Filter string
	Routes []routeHeld
}

type routeHeld struct {
	Name      string
	Held      []heldRow
	Truncated bool
	Error     string
}

type heldRow struct {
	Key, Since, Source, TraceID string
}

func (c *Console) held(w http.ResponseWriter, r *http.Request, s *session) {
	filter := r.URL.Query().Get("route")
	if _, ok := c.route(filter); filter != "" && !ok {
		c.fail(w, r, s, http.StatusNotFound, "No route of that name is configured.")
		return
	}
	var data heldData
	data.Filter = filter
	lq, cancel := c.ledgerQueries(r)
	defer cancel()
	for _, rt := range c.o.Routes {
		if filter != "" && rt.Name != filter {
			continue
		}
		var recs []admin.Record
		var more bool
		err := lq.ask(func(ctx context.Context) (err error) {
			recs, more, err = c.o.Admin.HeldRecords(ctx, rt.Name, heldListed)
			return err
		})
		rh := routeHeld{Name: rt.Name, Truncated: more}
		if err != nil {
			rh.Error = detail(err)
		}
		for _, rec := range recs {
			rh.Held = append(rh.Held, heldRow{Key: rec.Key, Since: when(rec.CreatedAt), Source: rec.Source, TraceID: rec.TraceID})
		}
		data.Routes = append(data.Routes, rh)
	}
	c.render(w, r, lq.status(), "held", page{Title: "Held", Nav: "held", CSRF: s.csrf,
		Notice: notices[r.URL.Query().Get("done")], Alert: lq.alert(), Data: data})
}
