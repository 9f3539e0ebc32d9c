package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The console in a real browser, on a real gateway: sign in (with the
// keyboard), see the deliveries on the overview, release a held key and
// see the next delivery forwarded, sign out. No page asks another host
// for anything.
func TestConsoleInBrowser(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	up := s.upstream
	for i, outcome := range []string{"forwarded", "replayed", "replayed"} {
		a := deliver(t, g, "/hooks", `{"id":"evt_b"}`, "X-Sender", "stripe-7")
		want(t, a, http.StatusOK, outcome)
		if n := up.count("evt_b"); n != 1 {
			t.Fatalf("after delivery %d the upstream got evt_b %d times", i+1, n)
		}
	}
	open := up.gate("evt_held")
	t.Cleanup(open)
	want(t, deliver(t, g, "/held", `{"id":"evt_held"}`), http.StatusGatewayTimeout, "held")
	<-up.arrived
	open()

	base := "http://" + g.AdminAddr()
	c := startChrome(t)
	c.open(base+"/ui/", "login")
	c.shot("sign-in")
	c.do("sign in with the keyboard", chromedp.SendKeys(chromedp.ID("token"), adminToken+kb.Enter), c.waitPage("overview"))
	c.shot("overview")
	if got := c.text(`section[aria-labelledby="route-hooks"] .counts`); !strings.Contains(got, "66.7%") {
		t.Errorf("hooks' counts %q, want the duplicate rate 66.7%% (2 replayed, 1 forwarded)", got)
	}
	if got := c.text(`section[aria-labelledby="route-hooks"] .tops`); !strings.Contains(got, "evt_b") || !strings.Contains(got, "stripe-7") {
		t.Errorf("hooks' top keys and sources %q lack evt_b and stripe-7", got)
	}
	c.do("phone width", chromedp.EmulateViewport(390, 844))
	c.shot("overview-phone")
	c.do("desktop width", chromedp.EmulateViewport(1280, 900))

	c.click(`nav a[href="/ui/held"]`, "held")
	c.shot("held")
	if got := c.text(`section[aria-labelledby="held-held"]`); !strings.Contains(got, "evt_held") {
		t.Fatalf("the held page lists %q, want evt_held", got)
	}
	c.click(`section[aria-labelledby="held-held"] a[href*="do=release"]`, "confirm")
	c.shot("confirm-release")
	c.click(`form.confirm button[type=submit]`, "held")
	c.shot("released")
	if got := c.text(".notice"); !strings.HasPrefix(got, "Released") {
		t.Errorf("notice after release %q", got)
	}
	want(t, deliver(t, g, "/held", `{"id":"evt_held"}`), http.StatusOK, "forwarded")
	if n := up.count("evt_held"); n != 2 {
		t.Errorf("the released key reached the upstream %d times, want 2", n)
	}

	c.click(`form.signout button`, "login")
	c.shot("signed-out")
	c.open(base+"/ui/held", "login")
	c.wantOnlyHost(g.AdminAddr())
}
