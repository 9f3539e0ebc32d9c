package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

func TestHeldPageListsAndReleases(t *testing.T) {
	e := newEnv(t, envOptions{})
	ref := idempotency.Ref{Route: "pay", Key: "order/42 & co"}
	e.hold(t, ref)
	b := e.browser(t)
	b.mustSignIn()

	held := b.get("/ui/held")
	if held.status != http.StatusOK || !strings.Contains(held.body, "order/42 &amp; co") {
		t.Fatalf("held page %d does not list the key:\n%s", held.status, held.body)
	}
	if !strings.Contains(held.body, "Nothing is held on this route.") {
		t.Errorf("the empty route (ship) has no empty state")
	}
	link := "/ui/confirm?do=release&amp;route=pay&amp;key=order%2f42%20%26%20co"
	if !strings.Contains(held.body, link) {
		t.Fatalf("no release link %s in:\n%s", link, held.body)
	}
	// The link only asks: nothing changes until the form is sent.
	conf := b.get("/ui/confirm?" + url.Values{"do": {"release"}, "route": {"pay"}, "key": {ref.Key}}.Encode())
	if conf.status != http.StatusOK || e.lookup(t, ref) == nil {
		t.Fatalf("confirmation page %d; record %v", conf.status, e.lookup(t, ref))
	}
	p := b.post("/ui/act", b.confirmForm("release", "pay", ref.Key))
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/held?done=release&route=pay" {
		t.Fatalf("release: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
	if rec := e.lookup(t, ref); rec != nil {
		t.Errorf("released, the ledger still holds %s", rec.State)
	}
	if after := b.get(p.header.Get("Location")); !strings.Contains(after.body, "Released: the next delivery") || strings.Contains(after.body, "order/42") {
		t.Errorf("held page after release:\n%s", after.body)
	}
}

// Releasing a held delivery whose provider was acknowledged queues it
// again, and the notice says so: the console said the provider's next
// delivery would be forwarded, which never comes for an acknowledged one.
func TestReleaseOfAnAcknowledgedHeldDeliveryQueuesIt(t *testing.T) {
	e := newEnv(t, envOptions{requeue: true})
	ref := idempotency.Ref{Route: "pay", Key: "evt_acked"}
	e.holdAcked(t, ref)
	b := e.browser(t)
	b.mustSignIn()
	p := b.post("/ui/act", b.confirmForm("release", "pay", ref.Key))
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/held?done=release-queued&route=pay" {
		t.Fatalf("release: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
	if rec := e.lookup(t, ref); rec == nil || rec.State != idempotency.StateQueued {
		t.Fatalf("released, the record is %+v; want it queued", rec)
	}
	if after := b.get(p.header.Get("Location")); !strings.Contains(after.body, "Released into the queue") {
		t.Errorf("held page after release:\n%s", after.body)
	}
}

func TestRecordAnAnswerForAHeldKey(t *testing.T) {
	e := newEnv(t, envOptions{})
	ref := idempotency.Ref{Route: "pay", Key: "k1"}
	e.hold(t, ref)
	b := e.browser(t)
	b.mustSignIn()
	// The form takes what the API takes (SPEC §8), so that the API says
	// why a 5xx cannot be recorded.
	if conf := b.get("/ui/confirm?do=record&route=pay&key=k1"); !strings.Contains(conf.body, `min="200" max="599"`) {
		t.Errorf("the status field does not take 200 to 599:\n%s", conf.body)
	}
	form := b.confirmForm("record", "pay", "k1")
	form.Set("status", "503")
	form.Set("content_type", "application/json")
	form.Set("body", `{"ok":true}`)

	p := b.post("/ui/act", form)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "status 503 is never final") || !strings.Contains(p.body, "{&#34;ok&#34;:true}") {
		t.Fatalf("a 503 to record: %d, want 400 naming why, with the form kept:\n%s", p.status, p.body)
	}
	if rec := e.lookup(t, ref); rec == nil || rec.State != idempotency.StateHeld {
		t.Fatalf("after a refused record the key is %v, want held", rec)
	}
	form.Set("status", "200")
	form.Set("body", strings.Repeat("x", 1<<20))
	if p := b.post("/ui/act", form); p.status != http.StatusRequestEntityTooLarge || !strings.Contains(p.body, "larger than") {
		t.Fatalf("a 1 MiB answer to record: %d, want 413 saying the form is too large:\n%s", p.status, p.body)
	}
	form.Set("body", `{"ok":true}`)
	if p := b.post("/ui/act", form); p.status != http.StatusSeeOther {
		t.Fatalf("record 200: %d\n%s", p.status, p.body)
	}
	rec := e.lookup(t, ref)
	if rec == nil || rec.State != idempotency.StateDone || rec.Status != 200 || string(rec.Body) != `{"ok":true}` || rec.Headers["Content-Type"] != "application/json" {
		t.Errorf("recorded %+v", rec)
	}
}

func TestDeleteARecord(t *testing.T) {
	e := newEnv(t, envOptions{})
	ref := idempotency.Ref{Route: "ship", Key: "gone"}
	e.hold(t, ref)
	b := e.browser(t)
	b.mustSignIn()
	p := b.post("/ui/act", b.confirmForm("delete", "ship", "gone"))
	if p.status != http.StatusSeeOther || e.lookup(t, ref) != nil {
		t.Fatalf("delete: %d, record %v", p.status, e.lookup(t, ref))
	}
}

// Deleting a queued or dead record of an async route loses its event:
// its provider was acknowledged and will not send it again. The
// confirmation says so, and what to do instead; a done record's is the
// ordinary one. The delete itself is refused; the discard deletes it.
func TestDeleteOfAnAcknowledgedDeliveryAsksToDiscardIt(t *testing.T) {
	e := newEnv(t, envOptions{requeue: true})
	e.enqueue(t, idempotency.Ref{Route: "pay", Key: "evt_queued"})
	e.enqueue(t, idempotency.Ref{Route: "pay", Key: "evt_dead"})
	e.setState(t, idempotency.Ref{Route: "pay", Key: "evt_dead"}, idempotency.StateDead)
	e.done(t, "evt_done", time.Now())
	b := e.browser(t)
	b.mustSignIn()
	tests := []struct {
		key, do string
		want    []string
	}{
		{"evt_queued", "discard", []string{"<h1>Discard the event</h1>", "will never receive this event", "wait for the queue"}},
		{"evt_dead", "discard", []string{"<h1>Discard the event</h1>", "will never receive this event", "redrive it instead"}},
		{"evt_done", "delete", []string{"<h1>Delete the record</h1>", "forwarded to the upstream as a new event"}},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			ev := b.get("/ui/event?" + url.Values{"route": {"pay"}, "key": {tc.key}}.Encode())
			if link := "/ui/confirm?do=" + tc.do + "&amp;route=pay&amp;key=" + tc.key; !strings.Contains(ev.body, link) {
				t.Errorf("the event page has no link %s", link)
			}
			conf := b.get("/ui/confirm?" + url.Values{"do": {"delete"}, "route": {"pay"}, "key": {tc.key}}.Encode())
			for _, want := range append(tc.want, `name="do" value="`+tc.do+`"`) {
				if !strings.Contains(conf.body, want) {
					t.Errorf("the confirmation lacks %q:\n%s", want, conf.body)
				}
			}
			if tc.do == "delete" && strings.Contains(conf.body, "Discard") {
				t.Errorf("the confirmation of deleting a done record speaks of a discard:\n%s", conf.body)
			}
		})
	}
	ref := idempotency.Ref{Route: "pay", Key: "evt_queued"}
	form := b.confirmForm("delete", "pay", ref.Key)
	form.Set("do", "delete")
	if p := b.post("/ui/act", form); p.status != http.StatusConflict || e.lookup(t, ref) == nil {
		t.Fatalf("delete of a queued record: %d, record %v; want 409, kept", p.status, e.lookup(t, ref))
	}
	form.Set("do", "discard")
	p := b.post("/ui/act", form)
	if p.status != http.StatusSeeOther || e.lookup(t, ref) != nil {
		t.Fatalf("discard: %d, record %v", p.status, e.lookup(t, ref))
	}
	if after := b.get(p.header.Get("Location")); !strings.Contains(after.body, "Discarded") {
		t.Errorf("no notice after the discard:\n%s", after.body)
	}
}

// Every POST needs the session's CSRF token, and a browser's cross-site
// POST is refused even with it; nothing changes in the ledger.
func TestActionsNeedCSRF(t *testing.T) {
	e := newEnv(t, envOptions{})
	ref := idempotency.Ref{Route: "pay", Key: "k"}
	e.hold(t, ref)
	b := e.browser(t)
	tok := b.mustSignIn()
	other := e.browser(t)
	otherTok := other.mustSignIn()
	tests := []struct {
		name   string
		csrf   string
		header map[string]string
	}{
		{"no token", "", nil},
		{"another session's token", otherTok, nil},
		{"cross-site fetch", tok, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"another origin", tok, map[string]string{"Origin": "http://evil.example"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"do": {"release"}, "route": {"pay"}, "key": {"k"}}
			if tc.csrf != "" {
				form.Set("csrf", tc.csrf)
			}
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ui/act", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if p := b.do(req); p.status != http.StatusForbidden || !strings.Contains(p.body, `data-page="error"`) {
				t.Errorf("status %d, want 403 with the console's error page:\n%s", p.status, p.body)
			}
			if rec := e.lookup(t, ref); rec == nil || rec.State != idempotency.StateHeld {
				t.Errorf("the key is %v after a refused POST, want held", rec)
			}
		})
	}
	if p := b.post("/ui/logout", url.Values{}); p.status != http.StatusForbidden {
		t.Errorf("sign-out without a token: %d, want 403", p.status)
	}
	if p := e.browser(t).post("/ui/act", url.Values{"csrf": {tok}, "do": {"release"}, "route": {"pay"}, "key": {"k"}}); p.status != http.StatusUnauthorized {
		t.Errorf("an action without a session: %d, want 401", p.status)
	}
}

func TestUnknownActionOrRoute(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	tok := b.mustSignIn()
	for _, q := range []url.Values{
		{"do": {"explode"}, "route": {"pay"}, "key": {"k"}},
		{"do": {"release"}, "route": {"nope"}, "key": {"k"}},
		{"do": {"release"}, "route": {"pay"}},
	} {
		if p := b.get("/ui/confirm?" + q.Encode()); p.status != http.StatusNotFound {
			t.Errorf("confirm %v: %d, want 404", q, p.status)
		}
		q.Set("csrf", tok)
		if p := b.post("/ui/act", q); p.status != http.StatusNotFound {
			t.Errorf("act %v: %d, want 404", q, p.status)
		}
	}
	if p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"release"}, "route": {"pay"}, "key": {"never-held"}}); p.status != http.StatusNotFound ||
		!strings.Contains(p.body, "No record for this key on this route") {
		t.Errorf("release of a key that is not held: %d\n%s", p.status, p.body)
	}
}

// deadGone is a queue whose dead deliveries were all redriven or swept
// already: a redrive queues none.
type deadGone struct{}

func (deadGone) Redeliver(context.Context, idempotency.Ref) error { return nil }
func (deadGone) Redrive(context.Context, string, []string) (int, error) {
	return 0, nil
}

// A redrive that queued nothing (the delivery redriven meanwhile, or the
// form sent twice) says so instead of "Queued again".
func TestRedriveThatQueuedNothingSaysSo(t *testing.T) {
	e := newEnv(t, envOptions{queue: deadGone{}})
	e.done(t, "k", time.Now())
	e.setState(t, idempotency.Ref{Route: "pay", Key: "k"}, idempotency.StateDead)
	b := e.browser(t)
	b.mustSignIn()
	for do, want := range map[string]string{"redrive": "not dead", "redrive-all": "no dead delivery"} {
		key := "k"
		if do == "redrive-all" {
			key = ""
		}
		p := b.post("/ui/act", b.confirmForm(do, "pay", key))
		if p.status != http.StatusConflict || !strings.Contains(p.body, want) || !strings.Contains(p.body, "nothing was queued") {
			t.Fatalf("%s: %d, want 409 saying %q and that nothing was queued; body %s", do, p.status, want, p.body)
		}
	}
}

// deliveringQueue delivers a redelivery at once: the record gets its
// attempt, as when the queue's delivery ends.
type deliveringQueue struct {
	ledger *sqlledger.Ledger
	sent   atomic.Int32
}

func (q *deliveringQueue) Redeliver(ctx context.Context, ref idempotency.Ref) error {
	n := q.sent.Add(1)
	return q.ledger.AddAttempt(ctx, idempotency.Attempt{Ref: ref, Attempt: int(n) + 1, StartedAt: time.Now(), Status: 200})
}

func (q *deliveringQueue) Redrive(context.Context, string, []string) (int, error) { return 0, nil }

// A confirmation sent again after its action took effect (the Back
// button, a second tab, a second operator) is refused: the event changed
// since the page showed it, and acting again would deliver it again.
func TestAStaleConfirmationIsRefused(t *testing.T) {
	q := &deliveringQueue{}
	e := newEnv(t, envOptions{queue: q})
	q.ledger = e.ledger
	e.done(t, "evt_1", time.Now())
	b := e.browser(t)
	b.mustSignIn()
	form := b.confirmForm("redeliver", "pay", "evt_1")
	if p := b.post("/ui/act", form); p.status != http.StatusSeeOther || q.sent.Load() != 1 {
		t.Fatalf("redeliver: %d, %d sent; want 303, 1", p.status, q.sent.Load())
	}
	p := b.post("/ui/act", form)
	if p.status != http.StatusConflict || !strings.Contains(p.body, "changed since you opened this page") ||
		!strings.Contains(p.body, `href="/ui/event?key=evt_1&amp;route=pay"`) {
		t.Errorf("the same form again: %d, want 409 saying the event changed, with a link to it:\n%s", p.status, p.body)
	}
	if n := q.sent.Load(); n != 1 {
		t.Fatalf("the stale form redelivered: %d sent, want 1", n)
	}
	if p := b.post("/ui/act", b.confirmForm("redeliver", "pay", "evt_1")); p.status != http.StatusSeeOther || q.sent.Load() != 2 {
		t.Errorf("a fresh confirmation: %d, %d sent; want 303, 2", p.status, q.sent.Load())
	}

	del := b.confirmForm("delete", "pay", "evt_1")
	if p := b.post("/ui/act", del); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d\n%s", p.status, p.body)
	}
	e.done(t, "evt_1", time.Now().Add(time.Second)) // the key delivered again
	if p := b.post("/ui/act", del); p.status != http.StatusConflict || e.lookup(t, idempotency.Ref{Route: "pay", Key: "evt_1"}) == nil {
		t.Errorf("the delete form again, on the key's new record: %d, want 409 and the record kept", p.status)
	}
}
