package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// done writes a done record of pay, its stored request and one attempt.
func (e *env) done(tb testing.TB, key string, at time.Time) {
	tb.Helper()
	ctx := context.Background()
	ref := idempotency.Ref{Route: "pay", Key: key}
	rec := &idempotency.Record{Ref: ref, State: idempotency.StateDone, CreatedAt: at, CompletedAt: at, ExpiresAt: at.Add(time.Hour),
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Source: "10.0.0.9",
		Response: idempotency.Response{Status: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"ok":true}`)}}
	if err := e.ledger.Commit(ctx, rec, "owner", at); err != nil {
		tb.Fatal(err)
	}
	req := &idempotency.Request{Method: "POST", Path: "/up", Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"` + key + `","amount":42}`)}
	if err := e.ledger.StoreRequest(ctx, ref, req); err != nil {
		tb.Fatal(err)
	}
	if err := e.ledger.AddAttempt(ctx, idempotency.Attempt{Ref: ref, Attempt: 1, StartedAt: at, Duration: 12 * time.Millisecond, Status: 200}); err != nil {
		tb.Fatal(err)
	}
}

func TestEventsListFiltersAndLinks(t *testing.T) {
	e := newEnv(t, envOptions{})
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	e.done(t, "order-1", base)
	e.done(t, "order-2", base.Add(10*time.Minute))
	e.done(t, "refund-1", base.Add(20*time.Minute))
	b := e.browser(t)
	b.mustSignIn()

	all := b.get("/ui/events?route=pay")
	if i, j := strings.Index(all.body, "refund-1"), strings.Index(all.body, "order-1"); i < 0 || j < 0 || i > j {
		t.Fatalf("list not newest first:\n%s", all.body)
	}
	p := b.get("/ui/events?" + url.Values{"route": {"pay"}, "key_prefix": {"order-"}, "since": {base.Add(5 * time.Minute).Format("2006-01-02T15:04")}}.Encode())
	if !strings.Contains(p.body, `href="/ui/event?route=pay&amp;key=order-2"`) || strings.Contains(p.body, "order-1") || strings.Contains(p.body, "refund-1") {
		t.Errorf("prefix order- since +5m lists:\n%s", p.body)
	}
	if p := b.get("/ui/events?route=pay&since=yesterday"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "2026-12-05T14:30") {
		t.Errorf("a bad since: %d\n%s", p.status, p.body)
	}
	for q, want := range map[string]string{
		"since=2026-12-07T05:03&until=2026-12-07T05:02": "since must be before until",
		"state=bogus": "state must be",
	} {
		if p := b.get("/ui/events?route=pay&" + q); p.status != http.StatusBadRequest || !strings.Contains(p.body, want) {
			t.Errorf("%s: %d, want 400 saying %q:\n%s", q, p.status, want, p.body)
		}
	}
	if p := b.get("/ui/events?route=pay&key_prefix=zzz"); !strings.Contains(p.body, "No events on pay match these filters.") {
		t.Errorf("no match has no empty state:\n%s", p.body)
	}
}

// The list's "Next page" link leads to the next page of the same route
// and filters.
func TestEventsNextPageFollowsOn(t *testing.T) {
	e := newEnv(t, envOptions{})
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	const n = 51 // one past a page
	for i := range n {
		e.done(t, fmt.Sprintf("order-%02d", i), base.Add(time.Duration(i)*time.Second))
	}
	b := e.browser(t)
	b.mustSignIn()
	first := b.get("/ui/events?route=pay&key_prefix=order-")
	if !strings.Contains(first.body, "order-50") || strings.Contains(first.body, "order-00") {
		t.Fatalf("first page: want order-50 and not order-00:\n%s", first.body)
	}
	m := regexp.MustCompile(`<a href="([^"]*)" rel="next">`).FindStringSubmatch(first.body)
	if m == nil {
		t.Fatalf("first page has no next link:\n%s", first.body)
	}
	next := b.get(html.UnescapeString(m[1]))
	if next.status != http.StatusOK || !strings.Contains(next.body, "order-00") || strings.Contains(next.body, "order-50") {
		t.Fatalf("next page (%s): %d, want order-00 alone:\n%s", m[1], next.status, next.body)
	}
}

func TestEventShowsRequestAnswerAttemptsAndTrace(t *testing.T) {
	e := newEnv(t, envOptions{traceURL: "http://grafana:3000/explore?traceId={trace_id}"})
	e.done(t, "order-1", time.Now().Add(-time.Minute))
	for range 2 {
		e.stats.Record(context.Background(), "pay", idempotency.Replayed, "order-1", "10.0.0.9")
	}
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/event?route=pay&key=order-1")
	for _, want := range []string{
		"<code>POST /up</code>",
		"{\n  &#34;id&#34;: &#34;order-1&#34;,\n  &#34;amount&#34;: 42\n}", // the request, indented
		"Status <strong>200</strong>",
		"<strong>Attempt 1</strong>", "status 200",
		`<dd class="repeats">2</dd>`,
		`href="http://grafana:3000/explore?traceId=4bf92f3577b34da6a3ce929d0e0e4736"`,
		`href="/ui/confirm?do=delete&amp;route=pay&amp;key=order-1"`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("event page lacks %q", want)
		}
	}
	if strings.Contains(p.body, "do=redeliver") {
		t.Errorf("redeliver offered without a queue")
	}
	if t.Failed() {
		t.Logf("event page:\n%s", p.body)
	}
	if p := b.get("/ui/event?route=pay&key=never"); p.status != http.StatusNotFound {
		t.Errorf("an unknown key: %d", p.status)
	}
	// Deleting it from its page, confirmed, leaves the ledger without it.
	if p := b.post("/ui/act", b.confirmForm("delete", "pay", "order-1")); p.status != http.StatusSeeOther ||
		p.header.Get("Location") != "/ui/events?done=delete&route=pay" {
		t.Fatalf("delete: %d %q", p.status, p.header.Get("Location"))
	}
	if rec := e.lookup(t, idempotency.Ref{Route: "pay", Key: "order-1"}); rec != nil {
		t.Errorf("deleted, the ledger still holds %s", rec.State)
	}
}

func TestDeadPageWithoutAsyncRoutesSaysWhy(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	b.mustSignIn()
	if p := b.get("/ui/dead"); !strings.Contains(p.body, "No route delivers asynchronously: set <code>delivery: async</code>") {
		t.Errorf("dead page without async routes:\n%s", p.body)
	}
}

// A provider chooses the key and the body; the console shows both as text
// and links to the event by the key's escaped form.
func TestEventPagesShowHostileKeysAndBodiesAsText(t *testing.T) {
	e := newEnv(t, envOptions{})
	const key = `"><img src=x onerror=alert(1)>`
	e.done(t, key, time.Now().Add(-time.Minute))
	ctx := context.Background()
	ref := idempotency.Ref{Route: "pay", Key: key}
	if err := e.ledger.StoreRequest(ctx, ref, &idempotency.Request{Method: "POST", Path: "/up",
		Headers: http.Header{"X-Note": {`<script>alert(2)</script>`}}, Body: []byte(`</pre><script>alert(3)</script>`)}); err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)
	b.mustSignIn()
	list := b.get("/ui/events?route=pay")
	var link string
	for _, ref := range references(t, list.body) {
		if strings.HasPrefix(ref, "/ui/event?") {
			link = ref
		}
	}
	p := b.get(link) // the list's own link reaches the event
	if p.status != http.StatusOK || !strings.Contains(p.body, "<h1>Event &#34;&gt;&lt;img") {
		t.Fatalf("the list's link %q: %d\n%s", link, p.status, p.body)
	}
	for name, pg := range map[string]page{"list": list, "event": p} {
		if strings.Contains(pg.body, "<img") || strings.Contains(pg.body, "<script") {
			t.Errorf("%s page renders markup from the delivery:\n%s", name, pg.body)
		}
	}
	for _, want := range []string{"&lt;img src=x onerror=alert(1)&gt;", "&lt;script&gt;alert(2)&lt;/script&gt;", "&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("event page lacks %q as text", want)
		}
	}
	if t.Failed() {
		t.Logf("event page:\n%s", p.body)
	}
}

// A body nested thousands deep is shown as it is: indented, 18 KB of
// brackets make a page of 162 MB, which the gateway builds in memory for
// every view.
func TestEventPageShowsDeeplyNestedJSONAsItIs(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.done(t, "evt_deep", time.Now())
	body := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	if err := e.ledger.StoreRequest(context.Background(), idempotency.Ref{Route: "pay", Key: "evt_deep"},
		&idempotency.Request{Method: "POST", Path: "/up", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/event?route=pay&key=evt_deep")
	if p.status != http.StatusOK || !strings.Contains(p.body, "<code>"+body+"</code>") || !strings.Contains(p.body, "nested too deeply to indent") {
		t.Fatalf("event page %d, %d bytes, without the body as it is", p.status, len(p.body))
	}
	if len(p.body) > 64<<10 {
		t.Errorf("the event page is %d bytes for an 18 KB body", len(p.body))
	}
}

// The statistics keep 64 keys a bucket: with 90 keys repeated once each,
// some are left out and others counted too high. The event page says so
// rather than show an exact-looking count (26 of them showed 0).
func TestEventRepeatsSayWhenTheStatisticsCannotTell(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 90 {
		e.stats.Record(context.Background(), "pay", idempotency.Replayed, fmt.Sprintf("evt_%02d", i), "10.0.0.9")
	}
	b := e.browser(t)
	b.mustSignIn()
	repeats := regexp.MustCompile(`<dd class="repeats">([^<]*)</dd>`)
	for i := 0; i < 90; i += 10 {
		key := fmt.Sprintf("evt_%02d", i)
		e.done(t, key, time.Now())
		p := b.get("/ui/event?route=pay&key=" + key)
		m := repeats.FindStringSubmatch(p.body)
		if m == nil || (m[1] != "unknown" && !strings.HasPrefix(m[1], "about ")) || !strings.Contains(p.body, "than the statistics keep") {
			t.Errorf("%s: repeats %q, want unknown or about N, with a note why", key, m)
		}
	}
}
