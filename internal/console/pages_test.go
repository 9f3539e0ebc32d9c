package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/net/html"

	"github.com/hookstamp/hookstamp/internal/console"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

func TestOverviewShowsOutcomesAndDuplicates(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for range 3 {
		e.stats.Record(ctx, "pay", idempotency.Forwarded, "", "10.0.0.1")
	}
	for range 2 {
		e.stats.Record(ctx, "pay", idempotency.Replayed, "evt_dup", "10.0.0.7")
	}
	e.hold(t, idempotency.Ref{Route: "pay", Key: "h"})
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/?window=15m")
	for _, want := range []string{
		`<meta http-equiv="refresh" content="10">`,
		`<option value="15m" selected>`,
		`<svg viewBox="0 0 420 64" role="img"`, // two bars
		"Deliveries by outcome: forwarded 3, replayed 2.",
		`class="bar o-forwarded"`, `width="260"`, // the largest count is the longest bar
		"40.0%", // replayed / (forwarded + replayed)
		`<code><bdi class="key">evt_dup</bdi></code>`, "10.0.0.7",
		`<a href="/ui/held?route=pay">1</a>`,
		"No deliveries on this route in the last 15m.", // ship
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("overview:\n%s", p.body)
	}
}

// Without a Redis screen each replica counts only its own deliveries: the
// overview says so, and says nothing when the numbers are every replica's.
func TestOverviewSaysWhenItsNumbersAreThisReplicasOnly(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		e := newEnv(t, envOptions{clusterStats: cluster})
		e.stats.Record(context.Background(), "pay", idempotency.Forwarded, "", "10.0.0.1")
		b := e.browser(t)
		b.mustSignIn()
		p := b.get("/ui/")
		if !strings.Contains(p.body, "Deliveries by outcome: forwarded 1.") {
			t.Fatalf("cluster %v: the overview lacks the numbers:\n%s", cluster, p.body)
		}
		if got := strings.Contains(p.body, "this replica only"); got == cluster {
			t.Errorf("cluster %v: the overview says \"this replica only\": %v, want %v", cluster, got, !cluster)
		}
	}
}

// Every page carries a strict CSP and loads nothing from another host:
// no script at all, every link and resource under /ui/.
func TestPagesLoadNothingFromElsewhere(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.hold(t, idempotency.Ref{Route: "pay", Key: "h"})
	b := e.browser(t)
	pages := map[string]page{"login": b.get("/ui/login")}
	b.mustSignIn()
	for _, path := range []string{"/ui/", "/ui/events", "/ui/held", "/ui/dead", "/ui/confirm?do=record&route=pay&key=h", "/ui/nope"} {
		pages[path] = b.get(path)
	}
	for path, p := range pages {
		csp := p.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "style-src 'self'") ||
			strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: framing/sniffing headers %v", path, p.header)
		}
		for _, ref := range references(t, p.body) {
			if !strings.HasPrefix(ref, "/ui/") && !strings.HasPrefix(ref, "#") {
				t.Errorf("%s refers to %q, outside the console", path, ref)
			}
		}
		if strings.Contains(p.body, "<script") || strings.Contains(p.body, " style=") || strings.Contains(p.body, "onclick=") {
			t.Errorf("%s has a script or inline style", path)
		}
	}
	if css := b.get("/ui/static/console.css"); css.status != http.StatusOK || !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: %d %q", css.status, css.header.Get("Content-Type"))
	}
}

// references are the URLs in a page's src, href and action attributes.
func references(tb testing.TB, body string) []string {
	tb.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	var refs []string
	for n := range doc.Descendants() {
		for _, a := range n.Attr {
			if a.Key == "src" || a.Key == "href" || a.Key == "action" {
				refs = append(refs, a.Val)
			}
		}
	}
	return refs
}

func TestHeldEmptyStateSaysWhy(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/held?" + url.Values{"route": {"pay"}}.Encode())
	if !strings.Contains(p.body, "Nothing is held on this route.") || !strings.Contains(p.body, "record.ambiguous: hold") {
		t.Errorf("empty held page:\n%s", p.body)
	}
	if p := b.get("/ui/held?route=nope"); p.status != http.StatusNotFound {
		t.Errorf("held of an unknown route: %d", p.status)
	}
}

// A route switched from async to sync keeps its queued and dead
// deliveries (SPEC §10): the overview and the dead page still show them,
// without a redrive the route could not carry out when it stores no
// requests.
func TestFormerAsyncRouteKeepsItsQueueOnThePages(t *testing.T) {
	e := newEnv(t, envOptions{depths: map[string]console.Depth{"ship": {Queued: 3, Dead: 2}}})
	ctx := context.Background()
	now := time.Now()
	db, err := e.ledger.DB()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"d1", "d2"} {
		rec := &idempotency.Record{Ref: idempotency.Ref{Route: "ship", Key: key}, State: idempotency.StateDone, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := e.ledger.Commit(ctx, rec, "owner", now); err != nil {
			t.Fatal(err)
		}
		// Dead rows are the queue's to write; Commit writes answers.
		if _, err := db.ExecContext(ctx, `UPDATE hookstamp_records SET state = 'dead' WHERE route = 'ship' AND key = ?`, key); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/")
	for _, want := range []string{
		`<a href="/ui/events?route=ship&amp;state=queued">3</a>`,
		`<a href="/ui/dead?route=ship">2</a>`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("overview lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, "route=pay&amp;state=queued") {
		t.Errorf("overview shows a queue for pay, which has none and is not async")
	}
	d := b.get("/ui/dead")
	for _, want := range []string{`<h2 id="dead-ship">ship</h2>`, `<code><bdi class="key">d1</bdi></code>`, `<code><bdi class="key">d2</bdi></code>`, "This route stores no requests now"} {
		if !strings.Contains(d.body, want) {
			t.Errorf("dead page lacks %q:\n%s", want, d.body)
		}
	}
	if strings.Contains(d.body, "No route delivers asynchronously") || strings.Contains(d.body, "do=redrive") {
		t.Errorf("dead page says no route is async, or offers a redrive ship cannot do:\n%s", d.body)
	}
}

// A key may hold characters that show nothing or turn the text around:
// RLI "evt_9" PDI looks like evt_9, RLO reverses what follows it. Every
// page that shows a key writes them out as their codes, and isolates the
// key from the text around it.
func TestKeysShowTheirHiddenCharacters(t *testing.T) {
	e := newEnv(t, envOptions{depths: map[string]console.Depth{"pay": {Dead: 1}}})
	const (
		isolated = "\u2067evt_9\u2069"
		reversed = "evt_\u202e9_tve"
		held     = "held\u200b_1"
		dead     = "dead\u2066_1"
	)
	for _, key := range []string{isolated, reversed, dead} {
		e.done(t, key, time.Now())
		e.stats.Record(context.Background(), "pay", idempotency.Replayed, key, "10.0.0.9")
	}
	e.setState(t, idempotency.Ref{Route: "pay", Key: dead}, idempotency.StateDead)
	e.hold(t, idempotency.Ref{Route: "pay", Key: held})
	b := e.browser(t)
	b.mustSignIn()
	pages := map[string][]string{
		"/ui/":                 {`\u2067evt_9\u2069`, `evt_\u202e9_tve`},
		"/ui/events?route=pay": {`\u2067evt_9\u2069`, `evt_\u202e9_tve`},
		"/ui/held":             {`held\u200b_1`},
		"/ui/dead":             {`dead\u2066_1`},
		"/ui/event?" + url.Values{"route": {"pay"}, "key": {isolated}}.Encode():                     {`Event \u2067evt_9\u2069`, `\u2067evt_9\u2069`},
		"/ui/confirm?" + url.Values{"do": {"delete"}, "route": {"pay"}, "key": {reversed}}.Encode(): {`evt_\u202e9_tve`},
	}
	for path, want := range pages {
		p := b.get(path)
		text := visibleText(t, p.body)
		if i := strings.IndexFunc(text, func(r rune) bool { return unicode.Is(unicode.Cf, r) }); i >= 0 {
			t.Errorf("%s shows a format character as it is: %+q", path, text[max(0, i-20):min(len(text), i+20)])
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not show %s", path, w)
			}
		}
		if !strings.Contains(p.body, `<bdi class="key">`) || !strings.Contains(p.body, `<span class="hidden-char">`) {
			t.Errorf("%s does not isolate its keys, or mark their hidden characters", path)
		}
	}
}

// visibleText is the text a page shows but the bodies of events (shown
// as sent): its text nodes, title included, without attributes.
func visibleText(tb testing.TB, body string) string {
	tb.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for n := range doc.Descendants() {
		if n.Type == html.TextNode && !(n.Parent.Data == "code" && n.Parent.Parent.Data == "pre") {
			b.WriteString(n.Data)
		}
	}
	return b.String()
}

// A done record whose redelivery waits counts as queued (the queue's
// depth), but the event log lists it as done: the overview's link to the
// queued list counts what that list shows, and names the redeliveries
// apart.
func TestOverviewQueuedLinkCountsWhatItLists(t *testing.T) {
	e := newEnv(t, envOptions{depths: map[string]console.Depth{"ship": {Queued: 3, Redelivering: 1}}})
	b := e.browser(t)
	b.mustSignIn()
	p := b.get("/ui/")
	if want := `<a href="/ui/events?route=ship&amp;state=queued">2</a> + 1 redelivery of done events`; !strings.Contains(p.body, want) {
		t.Errorf("overview lacks %q:\n%s", want, p.body)
	}
}
