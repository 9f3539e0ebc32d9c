package console

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// action is something the console does to a record. Every action is
// asked for on a confirmation page (GET /ui/confirm) and done by its
// form's POST (/ui/act); nothing changes on a GET.
type action struct {
	Title   string
	Explain string
	Button  string
	// Record: the form asks for the answer to record.
	Record bool
	// Route: the action is on a whole route and takes no key.
	Route bool
	// run does it and returns the notice to show (notices), "" for the
	// action's own.
	run func(ctx context.Context, c *Console, ref idempotency.Ref, form url.Values) (string, error)
	// redrive, set instead of run, queues deliveries of the route again
	// and returns how many, which the notice tells.
	redrive func(ctx context.Context, c *Console, route string) (int, error)
	// back is where the browser goes after the action.
	back func(ref idempotency.Ref) string
}

var actions = map[string]action{
	"release": {
		Title:   "Release the held key",
		Explain: "The delivery is made again. If its provider was acknowledged (an async route's answer), it will not send it again: the stored request is queued and delivered to the upstream, whatever the route is now. Otherwise the held row is deleted: the provider's next delivery of this key is forwarded to the upstream. Choose this when the upstream did not act on the first delivery.",
		Button:  "Release",
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, _ url.Values) (string, error) {
			rec, err := c.o.Admin.Resolve(ctx, ref, admin.ResolveRequest{Action: "release"})
			if err == nil && rec.State == string(idempotency.StateQueued) {
				return "release-queued", nil
			}
			return "", err
		},
		back: heldPage,
	},
	"record": {
		Title:   "Record an answer for the held key",
		Explain: "The key becomes done with this answer: every repeat of the delivery gets it, and nothing more is forwarded. Choose this when the upstream did act on the first delivery.",
		Button:  "Record this answer",
		Record:  true,
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, form url.Values) (string, error) {
			req, err := recordRequest(form)
			if err != nil {
				return "", err
			}
			_, err = c.o.Admin.Resolve(ctx, ref, req)
			return "", err
		},
		back: heldPage,
	},
	"delete": {
		Title:   "Delete the record",
		Explain: "The key is forgotten in the ledger and the screen: the next delivery with this key is forwarded to the upstream as a new event.",
		Button:  "Delete",
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, _ url.Values) (string, error) {
			return "", c.o.Admin.Delete(ctx, ref)
		},
		back: eventsPage,
	},
	// delete, of a record whose event it loses (admin.Record.LosesEvent):
	// the confirmation of a delete becomes this one.
	"discard": {
		Title:   "Discard the event",
		Explain: "Its provider was acknowledged and will not send it again: once the record is deleted, the upstream will never receive this event.",
		Button:  "Discard",
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, _ url.Values) (string, error) {
			return "", c.o.Admin.Discard(ctx, ref)
		},
		back: eventsPage,
	},
	"redeliver": {
		Title:   "Deliver the stored request again",
		Explain: "The stored request is queued and delivered to the upstream again, with the same idempotency key header; its new final answer is recorded and replayed to repeats from then on.",
		Button:  "Redeliver",
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, _ url.Values) (string, error) {
			return "", c.queue().Redeliver(ctx, ref)
		},
		back: eventPage,
	},
	"redrive": {
		Title:   "Queue the dead delivery again",
		Explain: "The delivery gets a fresh set of attempts: it is delivered to the upstream again, with the same idempotency key header, until it takes it or the attempts run out again.",
		Button:  "Redrive",
		run: func(ctx context.Context, c *Console, ref idempotency.Ref, _ url.Values) (string, error) {
			n, err := c.queue().Redrive(ctx, ref.Route, []string{ref.Key})
			if err == nil && n == 0 {
				return "", errNotDead
			}
			return "", err
		},
		back: deadPage,
	},
	"redrive-all": {
		Title:   "Queue every dead delivery of the route again",
		Explain: "Every dead delivery of this route gets a fresh set of attempts. Fix what made the upstream refuse them first, or they will die again.",
		Button:  "Redrive all",
		Route:   true,
		redrive: func(ctx context.Context, c *Console, route string) (int, error) {
			n, err := c.queue().Redrive(ctx, route, nil)
			if err == nil && n == 0 {
				return 0, errNoneDead
			}
			return n, err
		},
		back: deadPage,
	},
}

// notices are the lines shown after an action, by its name.
var notices = map[string]string{
	"release":     "Released: the next delivery of that key is forwarded.",
	"record":      "Recorded: repeats of that key now get the answer you gave.",
	"delete":      "Deleted: the next delivery of that key is forwarded as new.",
	"discard":     "Discarded: the record is deleted, and the upstream will not receive that event.",
	"redeliver":   "Queued: the stored request is delivered to the upstream again.",
	"redrive":     "Queued again: the dead delivery gets a fresh set of attempts.",
	"redrive-all": "Queued again: every dead delivery of the route gets a fresh set of attempts.",
	// a release of a delivery acknowledged to its provider
	"release-queued": "Released into the queue: the delivery, acknowledged to its provider, is delivered to the upstream again.",
}

func heldPage(ref idempotency.Ref) string {
	return "/ui/held?" + url.Values{"route": {ref.Route}}.Encode()
}

func deadPage(ref idempotency.Ref) string {
	return "/ui/dead?" + url.Values{"route": {ref.Route}}.Encode()
}

func eventsPage(ref idempotency.Ref) string {
	return "/ui/events?" + url.Values{"route": {ref.Route}}.Encode()
}

func eventPage(ref idempotency.Ref) string {
	return "/ui/event?" + url.Values{"route": {ref.Route}, "key": {ref.Key}}.Encode()
}

// errNotDead and errNoneDead: a redrive that queued nothing (redriven or
// swept meanwhile, or a form sent twice).
var (
	errNotDead  = &admin.OpError{Status: http.StatusConflict, Detail: "the delivery is not dead (redriven, delivered or swept meanwhile): nothing was queued"}
	errNoneDead = &admin.OpError{Status: http.StatusConflict, Detail: "the route has no dead delivery: nothing was queued"}
)

// noQueue refuses the queue's actions where nothing is queued.
type noQueue struct{}

var errNoQueue = &admin.OpError{Status: http.StatusNotFound, Detail: "no route stores requests: nothing can be delivered again"}

func (noQueue) Redeliver(context.Context, idempotency.Ref) error { return errNoQueue }
func (noQueue) Redrive(context.Context, string, []string) (int, error) {
	return 0, errNoQueue
}

func (c *Console) queue() Queue {
	if c.o.Queue == nil {
		return noQueue{}
	}
	return c.o.Queue
}

// recordRequest reads the record form.
func recordRequest(form url.Values) (admin.ResolveRequest, error) {
	st, err := strconv.Atoi(strings.TrimSpace(form.Get("status")))
	if err != nil {
		return admin.ResolveRequest{}, &admin.OpError{Status: http.StatusBadRequest, Detail: "The status must be a number such as 200."}
	}
	body := form.Get("body")
	req := admin.ResolveRequest{Action: "record", Status: &st, Body: &body}
	if ct := strings.TrimSpace(form.Get("content_type")); ct != "" {
		req.Headers = map[string]string{"Content-Type": ct}
	}
	return req, nil
}

// discardInstead is what to do rather than discard an event, by its
// record's state.
var discardInstead = map[idempotency.State]string{
	idempotency.StateQueued: "It is still being delivered: to have the upstream receive it, wait for the queue (the event page shows its next attempt).",
	idempotency.StateDead:   "To have the upstream receive it, redrive it instead, once the upstream takes it.",
	idempotency.StateHeld:   "To have it delivered again, release it instead; if the upstream acted on it, record an answer.",
}

type confirmData struct {
	Do, Route, Key string
	Action         action
	Back           string
	// Instead is what to do rather than discard the event.
	Instead string
	// Version is the record's as the page showed it (recordVersion).
	Version string
	// The record form's values, kept when it is refused.
	Status, ContentType, Body string
	Error                     string
}

// confirm asks for an action: its consequences and the form that does it.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d, ok := c.confirmData(q)
	if !ok {
		c.fail(w, r, s, http.StatusNotFound, "There is no such action, or no route of that name.")
		return
	}
	if !d.Action.Route {
		ev, err := c.o.EventLog.EventDetail(r.Context(), idempotency.Ref{Route: d.Route, Key: d.Key})
		if err != nil {
			c.failRecord(w, r, s, err)
			return
		}
		if d.Do == "delete" || d.Do == "discard" {
			d.deletes(ev.Record)
		}
		d.Version = recordVersion(ev)
	}
	d.Status, d.ContentType = "200", "application/json"
	c.render(w, r, http.StatusOK, "confirm", page{Title: d.Action.Title, CSRF: s.csrf, Data: d})
}

// recordVersion names the record as a confirmation page shows it. Every
// action on a record changes it: a redelivery's attempt and answer, a
// redrive's or release's state, a recorded answer, a delete (and a new
// delivery of the key after it), so that a confirmation sent again once
// its action took effect (the Back button, a second tab, a second
// operator) is refused rather than done twice.
func recordVersion(ev admin.RecordDetail) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d", ev.State, unixNano(ev.CreatedAt), unixNano(ev.CompletedAt), len(ev.Attempts), ev.Status)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

func unixNano(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixNano()
}

// deletes makes d the confirmation of deleting rec: a discard when that
// loses its event.
func (d *confirmData) deletes(rec admin.Record) {
	d.Do = "delete"
	if rec.LosesEvent() {
		d.Do, d.Instead = "discard", discardInstead[idempotency.State(rec.State)]
	}
	d.Action = actions[d.Do]
}

func (c *Console) confirmData(v url.Values) (confirmData, bool) {
	d := confirmData{Do: v.Get("do"), Route: v.Get("route"), Key: v.Get("key")}
	a, ok := actions[d.Do]
	if _, known := c.route(d.Route); !ok || !known || a.Route != (d.Key == "") {
		return d, false
	}
	d.Action, d.Back = a, a.back(idempotency.Ref{Route: d.Route, Key: d.Key})
	return d, true
}

// act does a confirmed action, then sends the browser back with a
// notice; a refusal shows the confirmation again with the reason.
func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.confirmData(r.PostForm)
	if !ok {
		c.fail(w, r, s, http.StatusNotFound, "There is no such action, or no route of that name.")
		return
	}
	ref := idempotency.Ref{Route: d.Route, Key: d.Key}
	if !d.Action.Route {
		ev, err := c.o.EventLog.EventDetail(r.Context(), ref)
		if err != nil {
			c.failRecord(w, r, s, err)
			return
		}
		if d.Version = r.PostForm.Get("version"); d.Version != recordVersion(ev) {
			c.o.Logger.InfoContext(r.Context(), "console: action on a record changed since its confirmation refused", "action", d.Do, "route", ref.Route, "key", ref.Key)
			c.render(w, r, http.StatusConflict, "error", page{Title: "The event changed", CSRF: s.csrf, Data: errorData{
				Message: "The event changed since you opened this page (an action on it took effect meanwhile, from this page or another): nothing was done. " +
					"Look at it as it is now before you act again.",
				Event: eventPage(ref)}})
			return
		}
	}
	var done string
	var queued int
	var err error
	if d.Action.redrive != nil {
		queued, err = d.Action.redrive(r.Context(), c, ref.Route)
	} else {
		done, err = d.Action.run(r.Context(), c, ref, r.PostForm)
	}
	if err != nil {
		d.Error = detail(err)
		d.Status, d.ContentType, d.Body = r.PostForm.Get("status"), r.PostForm.Get("content_type"), r.PostForm.Get("body")
		c.render(w, r, statusOf(err), "confirm", page{Title: d.Action.Title, CSRF: s.csrf, Data: d})
		return
	}
	c.o.Logger.InfoContext(r.Context(), "console: action done", "action", d.Do, "route", ref.Route, "key", ref.Key)
	back, _ := url.Parse(d.Back)
	q := back.Query()
	q.Set("done", cmp.Or(done, d.Do))
	if d.Action.redrive != nil {
		q.Set("queued", strconv.Itoa(queued))
	}
	back.RawQuery = q.Encode()
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}
