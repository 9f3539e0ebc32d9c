package console

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// repeatsWindow and repeatsTop bound the search for an event's repeats
// in the duplicate statistics: the keys repeated most over the last day.
const (
	repeatsWindow = 24 * time.Hour
	repeatsTop    = 100
)

type eventData struct {
	Route      Route
	Rec        admin.Record
	TraceURL   string
	Request    *requestView
	Answer     bodyView
	AnswerHdrs []header
	Attempts   []attemptView
	NextAt     string
	// Repeats are the repeats intercepted for the key over the last day,
	// as the statistics can tell them: "2", "about 2" or "unknown", with
	// a note saying why when they are not exact.
	Repeats     string
	RepeatsNote string
	// The actions that apply. Discard: deleting the record loses its
	// event.
	CanRedeliver, CanResolve, CanRedrive, Discard bool
}

type requestView struct {
	Method, Path string
	Headers      []header
	Body         bodyView
}

type header struct{ Name, Value string }

type attemptView struct {
	N                            int
	Started, Took, Status, Error string
	OK                           bool
}

func (c *Console) event(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	rt, ok := c.route(q.Get("route"))
	if !ok || q.Get("key") == "" {
		c.fail(w, r, s, http.StatusNotFound, "No route of that name is configured, or no key was given.")
		return
	}
	ref := idempotency.Ref{Route: rt.Name, Key: q.Get("key")}
	ev, err := c.o.EventLog.EventDetail(r.Context(), ref)
	if err != nil {
		c.failRecord(w, r, s, err)
		return
	}
	d := eventData{Route: rt, Rec: ev.Record, Answer: recordedBody(ev.Record), AnswerHdrs: sortedHeaders(single(ev.Headers))}
	if c.o.TraceURL != "" && ev.TraceID != "" {
		d.TraceURL = strings.ReplaceAll(c.o.TraceURL, "{trace_id}", url.QueryEscape(ev.TraceID))
	}
	if ev.Request != nil {
		body, _ := base64.StdEncoding.DecodeString(ev.Request.BodyBase64)
		d.Request = &requestView{Method: ev.Request.Method, Path: ev.Request.Path,
			Headers: sortedHeaders(ev.Request.Headers), Body: viewBody(body)}
	}
	for _, a := range ev.Attempts {
		d.Attempts = append(d.Attempts, attemptOf(a))
	}
	if ev.NextAttemptAt.At != nil {
		d.NextAt = when(ev.NextAttemptAt.At)
	}
	d.Repeats, d.RepeatsNote = c.repeats(r, ref)
	state := idempotency.State(ev.State)
	d.CanRedeliver = c.o.Queue != nil && ev.Request != nil && (state == idempotency.StateDone || state == idempotency.StateDead)
	d.CanResolve = state == idempotency.StateHeld
	d.CanRedrive = c.o.Queue != nil && state == idempotency.StateDead
	d.Discard = ev.LosesEvent()
	c.render(w, r, http.StatusOK, "event", page{Title: "Event " + keyText(ref.Key), Nav: "events", CSRF: s.csrf,
		Notice: notices[q.Get("done")], Data: d})
}

// failRecord shows why a record could not be read.
func (c *Console) failRecord(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if statusOf(err) == http.StatusNotFound {
		c.fail(w, r, s, http.StatusNotFound, "No record for this key on this route: it was never delivered, or it expired or was deleted.")
		return
	}
	c.fail(w, r, s, statusOf(err), detail(err))
}

// repeats finds ref's key among the keys repeated most over the last day.
func (c *Console) repeats(r *http.Request, ref idempotency.Ref) (n, note string) {
	const capped = "More keys were repeated on this route in a minute or an hour of the last 24 than the statistics keep: " +
		"those repeated least were left out, and the counts of the others may be off."
	st, err := c.o.Admin.Stats(r.Context(), repeatsWindow, repeatsTop)
	if err != nil {
		return "unknown", "The duplicate statistics did not answer: " + detail(err)
	}
	rs := st.Routes[ref.Route]
	if rs == nil {
		return "0", ""
	}
	for _, k := range rs.TopKeys {
		switch {
		case k.Key != ref.Key:
		case rs.TopKeysExact:
			return strconv.FormatInt(k.Count, 10), ""
		default:
			return "about " + strconv.FormatInt(k.Count, 10), capped
		}
	}
	switch {
	case len(rs.TopKeys) >= repeatsTop:
		return "unknown", "Not among the 100 keys repeated most on this route over the last 24 hours."
	case !rs.TopKeysExact:
		return "unknown", capped
	}
	return "0", ""
}

func recordedBody(rec admin.Record) bodyView {
	b, err := base64.StdEncoding.DecodeString(rec.BodyBase64)
	if err != nil {
		return bodyView{}
	}
	return viewBody(b)
}

func attemptOf(a admin.Attempt) attemptView {
	v := attemptView{N: a.Attempt, Started: when(&a.StartedAt), Took: (time.Duration(a.DurationMS) * time.Millisecond).String(),
		Error: a.Error, Status: "—"}
	if a.Status != nil {
		v.Status, v.OK = statusText(*a.Status), *a.Status >= 200 && *a.Status < 300
	}
	return v
}

func single(h map[string]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		out[k] = []string{v}
	}
	return out
}

// sortedHeaders lists h by name, each value on its own row.
func sortedHeaders(h map[string][]string) []header {
	var out []header
	for name, vs := range h {
		for _, v := range vs {
			out = append(out, header{Name: name, Value: v})
		}
	}
	slices.SortStableFunc(out, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	return out
}
