package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// eventsPerPage is the list's page size.
const eventsPerPage = 50

// states are the record states the list filters on ("" = any).
var states = []string{"", "queued", "pending", "held", "done", "dead"}

// timeInput is the layout of an <input type="datetime-local">, read as
// UTC.
const timeInput = "2006-01-02T15:04"

type eventsData struct {
	Routes []Route
	// Route, State, KeyPrefix, Since and Until are the filters as given.
	Route, State, KeyPrefix, Since, Until string
	States                                []string
	// NoneStore: no route stores requests.
	NoneStore bool
	Rows      []eventRow
	Next      string // query of the next page; "" on the last
	Paged     bool   // this is not the first page
	Error     string
}

type eventRow struct {
	Route, Key, State, Status, Created, Completed, Source string
}

func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d := eventsData{Routes: c.o.Routes, States: states, State: q.Get("state"), KeyPrefix: q.Get("key_prefix"),
		Since: q.Get("since"), Until: q.Get("until"), Route: q.Get("route"), Paged: q.Get("cursor") != ""}
	d.NoneStore = !slices.ContainsFunc(c.o.Routes, func(rt Route) bool { return rt.StoresRequests })
	if d.Route == "" {
		d.Route = c.defaultRoute()
	}
	if _, ok := c.route(d.Route); !ok {
		c.fail(w, r, s, http.StatusNotFound, "No route of that name is configured.")
		return
	}
	eq, msg := eventQuery(q)
	status := http.StatusOK
	if msg != "" {
		d.Error, status = msg, http.StatusBadRequest
	} else if page, err := c.o.EventLog.Records(r.Context(), d.Route, eq); err != nil {
		d.Error, status = detail(err), statusOf(err)
	} else {
		for _, rec := range page.Records {
			d.Rows = append(d.Rows, eventRow{Route: rec.Route, Key: rec.Key, State: rec.State, Status: statusText(rec.Status),
				Created: when(rec.CreatedAt), Completed: when(rec.CompletedAt), Source: rec.Source})
		}
		if page.NextCursor != "" {
			next := url.Values{"route": {d.Route}, "state": {d.State}, "key_prefix": {d.KeyPrefix},
				"since": {d.Since}, "until": {d.Until}, "cursor": {page.NextCursor}}
			d.Next = next.Encode()
		}
	}
	c.render(w, r, status, "events", page{Title: "Events", Nav: "events", CSRF: s.csrf,
		Notice: notices[q.Get("done")], Data: d})
}

// defaultRoute is the first route that stores requests, or the first.
func (c *Console) defaultRoute() string {
	for _, rt := range c.o.Routes {
		if rt.StoresRequests {
			return rt.Name
		}
	}
	if len(c.o.Routes) > 0 {
		return c.o.Routes[0].Name
	}
	return ""
}

// eventQuery reads the list's filters; a message says what is wrong.
func eventQuery(q url.Values) (EventQuery, string) {
	eq := EventQuery{State: q.Get("state"), KeyPrefix: q.Get("key_prefix"), Cursor: q.Get("cursor"), Limit: eventsPerPage}
	if !slices.Contains(states, eq.State) {
		return eq, "Unknown state: pick one from the list."
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &eq.Since}, {"until", &eq.Until}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(timeInput, v)
		if err != nil {
			return eq, "The " + f.name + " time must look like 2026-12-05T14:30 (UTC)."
		}
		*f.to = t
	}
	if !eq.Since.IsZero() && !eq.Until.IsZero() && eq.Until.Before(eq.Since) {
		return eq, "The until time is before the since time."
	}
	return eq, ""
}

// statusText is an HTTP status for a table cell; "—" for none.
func statusText(st int) string {
	if st == 0 {
		return "—"
	}
	return strconv.Itoa(st)
}
