package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
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
	p := b.post("/ui/act", url.Values{"csrf": {csrf(t, conf)}, "do": {"release"}, "route": {"pay"}, "key": {ref.Key}})
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
	tok := b.mustSignIn()
	p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"release"}, "route": {"pay"}, "key": {ref.Key}})
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
	tok := b.mustSignIn()
	form := url.Values{"csrf": {tok}, "do": {"record"}, "route": {"pay"}, "key": {"k1"},
		"status": {"503"}, "content_type": {"application/json"}, "body": {`{"ok":true}`}}

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
	tok := b.mustSignIn()
	p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"delete"}, "route": {"ship"}, "key": {"gone"}})
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
	tok := b.mustSignIn()
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
	if p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"delete"}, "route": {"pay"}, "key": {ref.Key}}); p.status != http.StatusConflict || e.lookup(t, ref) == nil {
		t.Fatalf("delete of a queued record: %d, record %v; want 409, kept", p.status, e.lookup(t, ref))
	}
	p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"discard"}, "route": {"pay"}, "key": {ref.Key}})
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
			if p := b.do(req); p.status != http.StatusForbidden {
				t.Errorf("status %d, want 403", p.status)
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
		!strings.Contains(p.body, "no held record for this key") {
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
	b := e.browser(t)
	tok := b.mustSignIn()
	for do, want := range map[string]string{"redrive": "not dead", "redrive-all": "no dead delivery"} {
		form := url.Values{"csrf": {tok}, "do": {do}, "route": {"pay"}}
		if do == "redrive" {
			form.Set("key", "k")
		}
		p := b.post("/ui/act", form)
		if p.status != http.StatusConflict || !strings.Contains(p.body, want) || !strings.Contains(p.body, "nothing was queued") {
			t.Fatalf("%s: %d, want 409 saying %q and that nothing was queued; body %s", do, p.status, want, p.body)
		}
	}
}
