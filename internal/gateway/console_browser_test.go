package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const consoleToken = "console-browser-t0ken"

// consoleUpstream answers each key as its mode says: "ok" (200 JSON),
// "fail" (503) or "hang" (past the route's timeout, so the attempt gets
// no answer and the key is held).
type consoleUpstream struct {
	*upstream
	mu    sync.Mutex
	modes map[string]string
}

func newConsoleUpstream(tb testing.TB) *consoleUpstream {
	u := &consoleUpstream{upstream: newUpstream(tb), modes: map[string]string{}}
	u.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		mode := u.modes[key]
		u.mu.Unlock()
		switch mode {
		case "fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "hang":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"key":%q,"n":%d}`, key, n)
		}
	})
	return u
}

func (u *consoleUpstream) mode(key, mode string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.modes[key] = mode
}

// startConsoleGateway is a gateway whose route "hooks" is async with
// record.ambiguous: hold, its admin listener and console on.
func startConsoleGateway(tb testing.TB, up *consoleUpstream) *Gateway {
	tb.Helper()
	cfg := gwConfig(tb, up.URL, dbPath(tb), asyncRoute+"    record: {ambiguous: hold}\n", "")
	cfg.Routes[0].Upstream.Timeout = 300 * time.Millisecond
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", consoleToken
	return startGatewayWith(tb, cfg, asyncOptions(tb))
}

// The console in a real browser on a real gateway: sign in with the
// keyboard; the overview counts; redrive a dead delivery and release a
// held one, and see the upstream receive each again; sign out. No page
// asks another host for anything.
func TestConsoleInBrowser(t *testing.T) {
	up := newConsoleUpstream(t)
	g := startConsoleGateway(t, up)
	// Three firsts (evt_ok, evt_dead, evt_held) and two replays: 40%.
	for _, outcome := range []string{"accepted", "replayed", "replayed"} {
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_ok","amount":42}`, "X-Event-Id", "evt_ok"), http.StatusAccepted, outcome)
	}
	up.mode("evt_dead", "fail")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
	up.mode("evt_held", "hang")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_held"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_ok", idempotency.StateDone)
	waitState(t, g, "evt_dead", idempotency.StateDead)
	waitState(t, g, "evt_held", idempotency.StateHeld)
	deadTries := up.count("evt_dead")

	base := "http://" + g.AdminAddr()
	c := startChrome(t)
	c.open(base+"/ui/", "login")
	c.shot("sign-in")
	c.do("sign in with the keyboard", chromedp.SendKeys(chromedp.ID("token"), consoleToken+kb.Enter), c.waitPage("overview"))
	c.shot("overview")
	counts := c.text(`section[aria-labelledby="route-hooks"] .counts`)
	for _, want := range []string{"Dead 1", "Held 1", "Duplicate rate 40.0%", "Queued 0"} {
		if !strings.Contains(strings.Join(strings.Fields(counts), " "), want) {
			t.Errorf("overview counts %q lack %q", counts, want)
		}
	}
	c.do("phone width", chromedp.EmulateViewport(390, 844))
	c.shot("overview-phone")
	c.do("desktop width", chromedp.EmulateViewport(1280, 900))

	// Events: find evt_ok by its key prefix, open it, see its replays and
	// its attempt, and redeliver it.
	c.click(`nav a[href="/ui/events"]`, "events")
	c.do("filter by key prefix", chromedp.SendKeys(chromedp.ID("key_prefix"), "evt_o"+kb.Enter), c.waitPage("events"))
	c.shot("events")
	if got := c.text("table tbody"); !strings.Contains(got, "evt_ok") || strings.Contains(got, "evt_dead") {
		t.Fatalf("events filtered by evt_o: %q", got)
	}
	c.click(`table tbody a[href*="key=evt_ok"]`, "event")
	c.shot("event")
	if got := c.text(".repeats"); got != "2" {
		t.Errorf("repeats intercepted for evt_ok %q, want 2", got)
	}
	if got := c.text(".timeline"); !strings.Contains(got, "Attempt 1") || !strings.Contains(got, "status 200") {
		t.Errorf("attempts %q, want attempt 1 answered 200", got)
	}
	if got := c.text("pre.body"); !strings.Contains(got, "\"amount\": 42") {
		t.Errorf("the request body is not shown indented: %q", got)
	}
	c.click(`a[href*="do=redeliver"]`, "confirm")
	c.shot("confirm-redeliver")
	c.click(`form.confirm button[type=submit]`, "event")
	testenv.Eventually(t, 10*time.Second, "the redelivery to reach the upstream", func() bool { return up.count("evt_ok") == 2 })

	c.click(`nav a[href="/ui/dead"]`, "dead")
	c.shot("dead")
	up.mode("evt_dead", "ok")
	c.click(`a[href*="do=redrive&"][href*="key=evt_dead"]`, "confirm")
	c.shot("confirm-redrive")
	c.click(`form.confirm button[type=submit]`, "dead")
	if got := c.text(".notice"); !strings.HasPrefix(got, "Queued again") {
		t.Errorf("notice after redrive %q", got)
	}
	waitState(t, g, "evt_dead", idempotency.StateDone)
	if n := up.count("evt_dead"); n != deadTries+1 {
		t.Errorf("after the redrive the upstream got evt_dead %d times, want %d", n, deadTries+1)
	}

	up.mode("evt_held", "ok")
	c.click(`nav a[href="/ui/held"]`, "held")
	c.shot("held")
	c.click(`a[href*="do=release"][href*="key=evt_held"]`, "confirm")
	c.click(`form.confirm button[type=submit]`, "held")
	c.shot("released")
	if got := c.text(".notice"); !strings.HasPrefix(got, "Released") {
		t.Errorf("notice after release %q", got)
	}
	waitState(t, g, "evt_held", idempotency.StateDone)
	testenv.Eventually(t, 10*time.Second, "the released delivery to reach the upstream again", func() bool { return up.count("evt_held") == 2 })

	c.click(`form.signout button`, "login")
	c.shot("signed-out")
	c.open(base+"/ui/dead", "login")
	c.wantOnlyHost(g.AdminAddr())
}
