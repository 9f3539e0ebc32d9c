package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
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
	Next      string // the next page's URL; "" on the last
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
	eq, msg := eventQuery(d.Route, q)
	status := http.StatusOK
	if msg != "" {
		d.Error, status = msg, http.StatusBadRequest
	} else if page, err := c.o.EventLog.EventList(r.Context(), eq); err != nil {
		d.Error, status = detail(err), statusOf(err)
	} else {
		for _, rec := range page.Records {
			d.Rows = append(d.Rows, eventRow{Route: rec.Route, Key: rec.Key, State: rec.State, Status: statusText(rec.Status),
				Created: when(rec.CreatedAt), Completed: when(rec.CompletedAt), Source: rec.Source})
		}
		if page.NextCursor != nil {
			next := url.Values{"route": {d.Route}, "state": {d.State}, "key_prefix": {d.KeyPrefix},
				"since": {d.Since}, "until": {d.Until}, "cursor": {*page.NextCursor}}
			d.Next = "/ui/events?" + next.Encode()
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

// eventQuery reads the list's filters the way the admin API reads its
// query (admin.ParseListQuery), the times from the form's UTC
// "2026-12-05T14:30"; a message says what is wrong.
func eventQuery(route string, q url.Values) (idempotency.ListQuery, string) {
	v := url.Values{"limit": {strconv.Itoa(eventsPerPage)}}
	for _, name := range []string{"state", "key_prefix", "cursor"} {
		if s := q.Get(name); s != "" {
			v.Set(name, s)
		}
	}
	for _, name := range []string{"since", "until"} {
		s := q.Get(name)
		if s == "" {
			continue
		}
		t, err := time.Parse(timeInput, s)
		if err != nil {
			return idempotency.ListQuery{}, "The " + name + " time must look like 2026-12-05T14:30 (UTC)."
		}
		v.Set(name, t.UTC().Format(time.RFC3339))
	}
	lq, err := admin.ParseListQuery(route, v)
	if err != nil {
		return lq, detail(err)
	}
	return lq, ""
}

// statusText is an HTTP status for a table cell; "—" for none.
func statusText(st int) string {
	if st == 0 {
		return "—"
	}
	return strconv.Itoa(st)
}
