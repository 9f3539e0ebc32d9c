package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSignInSignOut(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)

	if p := b.get("/ui/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
		t.Fatalf("signed out, /ui/ answers %d %q; want a redirect to sign in", p.status, p.header.Get("Location"))
	}
	lp := b.get("/ui/login")
	if !strings.Contains(lp.body, `<label for="token">`) || !strings.Contains(lp.body, `type="password"`) {
		t.Fatalf("sign-in page has no labelled password field:\n%s", lp.body)
	}
	p := b.post("/ui/login", url.Values{"csrf": {csrf(t, lp)}, "token": {token}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in answers %d %q", p.status, p.header.Get("Location"))
	}
	ck := setCookie(t, p, "hookstamp_session")
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/ui/" || ck.MaxAge != int((8*time.Hour).Seconds()) {
		t.Errorf("session cookie %+v; want HttpOnly, SameSite=Strict, not Secure over http, Path /ui/, 8h", ck)
	}
	home := b.get("/ui/")
	if home.status != http.StatusOK || !strings.Contains(home.body, "Sign out") {
		t.Fatalf("overview %d", home.status)
	}

	out := b.post("/ui/logout", url.Values{"csrf": {csrf(t, home)}})
	if out.status != http.StatusSeeOther || !strings.HasPrefix(out.header.Get("Location"), "/ui/login") {
		t.Fatalf("sign-out answers %d %q", out.status, out.header.Get("Location"))
	}
	if p := b.get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("after sign-out /ui/ answers %d, want a redirect to sign in", p.status)
	}
	// The old cookie, replayed, is dead on the server too.
	stolen := e.browser(t)
	stolen.c.Jar.SetCookies(stolen.url, []*http.Cookie{{Name: "hookstamp_session", Value: ck.Value, Path: "/ui/"}})
	if p := stolen.get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("a signed-out session's cookie still opens the console: %d", p.status)
	}
}

func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	e := newEnv(t, envOptions{tls: true})
	p := e.browser(t).signIn(token)
	if ck := setCookie(t, p, "hookstamp_session"); !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie over TLS %+v; want Secure, HttpOnly, SameSite=Strict", ck)
	}
}

// Behind a proxy serving HTTPS the listener sees plain HTTP: the cookies
// are Secure when admin.secure_cookies says so, and only then.
func TestCookiesAreSecureWhenConfigured(t *testing.T) {
	for _, secure := range []bool{true, false} {
		e := newEnv(t, envOptions{secureCookies: secure})
		b := e.browser(t)
		login := b.get("/ui/login")
		p := b.post("/ui/login", url.Values{"csrf": {csrf(t, login)}, "token": {token}})
		for name, ck := range map[string]*http.Cookie{"sign-in": setCookie(t, login, "hookstamp_login"), "session": setCookie(t, p, "hookstamp_session")} {
			if ck.Secure != secure {
				t.Errorf("secure_cookies %v: the %s cookie's Secure is %v", secure, name, ck.Secure)
			}
		}
	}
}

func TestSessionExpires(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	b.mustSignIn()
	e.clock.Advance(8*time.Hour - time.Second)
	if p := b.get("/ui/"); p.status != http.StatusOK {
		t.Fatalf("a session before its expiry: %d", p.status)
	}
	e.clock.Advance(time.Second)
	if p := b.get("/ui/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
		t.Errorf("an expired session: %d %q, want a redirect to sign in", p.status, p.header.Get("Location"))
	}
}

// A wrong token gets one answer whatever is wrong with it; the page says
// the sign-in failed, and never why.
func TestWrongTokenIsRefusedWithoutReason(t *testing.T) {
	e := newEnv(t, envOptions{})
	var bodies []string
	for _, tok := range []string{"", "nope", token[:5], token + "x", strings.ToUpper(token)} {
		b := e.browser(t)
		p := b.signIn(tok)
		if p.status != http.StatusUnauthorized || b.cookie("hookstamp_session") != nil {
			t.Fatalf("token %q: %d, session cookie %v", tok, p.status, b.cookie("hookstamp_session"))
		}
		bodies = append(bodies, csrfField.ReplaceAllString(p.body, ""))
		e.clock.Advance(time.Hour) // past any backoff: this test is about the answer
	}
	for i, body := range bodies {
		if body != bodies[0] {
			t.Errorf("refusal %d differs from the first: the page tells wrong tokens apart", i)
		}
		for _, leak := range []string{"length", "prefix", "too short", "expected"} {
			if strings.Contains(strings.ToLower(body), leak) {
				t.Errorf("refusal mentions %q", leak)
			}
		}
	}
	if !strings.Contains(bodies[0], "Sign-in failed.") {
		t.Errorf("refusal page:\n%s", bodies[0])
	}
}

// After three wrong tokens from one address, each try waits: even the
// right token is not looked at until the wait is over.
func TestRepeatedWrongTokensAreSlowedDown(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	for i := range 4 {
		if p := b.signIn("wrong"); p.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, p.status)
		}
	}
	p := b.signIn(token)
	if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") != "1" || b.cookie("hookstamp_session") != nil {
		t.Fatalf("right token during the wait: %d Retry-After %q; want 429, 1 s, no session", p.status, p.header.Get("Retry-After"))
	}
	if !strings.Contains(p.body, "wait 1 second,") {
		t.Errorf("the page does not say how long to wait:\n%s", p.body)
	}
	e.clock.Advance(time.Second)
	if p := b.signIn("wrong"); p.status != http.StatusUnauthorized {
		t.Fatalf("wrong token after the wait: %d", p.status)
	}
	if p := b.signIn(token); p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") != "2" {
		t.Fatalf("the wait doubles: %d Retry-After %q, want 429 and 2", p.status, p.header.Get("Retry-After"))
	}
	e.clock.Advance(2 * time.Second)
	b.mustSignIn()
	// Signed in: the address starts afresh.
	other := e.browser(t)
	for i := range 3 {
		if p := other.signIn("wrong"); p.status != http.StatusUnauthorized {
			t.Fatalf("after a sign-in, wrong token %d: %d, want 401 (the count starts again)", i+1, p.status)
		}
	}
}

// Wrong tokens sent to the admin API count against the console's sign-in
// from the same address: guesses split between the two are slowed down as
// one.
func TestWrongAPITokensSlowDownTheSignIn(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 4 {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/admin/stats", nil)
		req.Header.Set("Authorization", "Bearer guess"+strconv.Itoa(i))
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong API token %d: %d, want 401", i, res.StatusCode)
		}
	}
	if p := e.browser(t).signIn(token); p.status != http.StatusTooManyRequests {
		t.Fatalf("sign-in after four wrong API tokens: %d, want 429", p.status)
	}
}

// The requests a page of another site makes the operator's browser send
// to the admin API carry no bearer token (or a proxy's Basic credentials,
// refused for their origin): they leave the operator's sign-in as it was.
func TestBrowserRequestsWithoutATokenDoNotSlowDownTheSignIn(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 10 {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/admin/x", nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if i%2 == 1 {
			req.SetBasicAuth("ops", "proxy-password")
		}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site request %d: %d, want 403", i, res.StatusCode)
		}
	}
	for range 10 {
		res, err := e.srv.Client().Get(e.srv.URL + "/admin/stats")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a request without a token: %d, want 401", res.StatusCode)
		}
	}
	e.browser(t).mustSignIn()
}

// Wrong tokens from more addresses than the throttle's table holds (10 000
// IPv6 /64s: one /48) make none but those addresses wait: the operator's
// right token from another address is taken, by the API and the sign-in,
// and after signing in the operator is not pooled with the guessers
// either. Wrong tokens from the operator's address are slowed down as
// ever.
func TestGuessesFromAFullTableDoNotLockTheOperatorOut(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 10005 {
		addr := fmt.Sprintf("[2001:db8:48:%x::1]:4000", i)
		for range 4 {
			e.throttle.Failed(addr)
		}
	}
	api := func(tok string) int {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/admin/stats", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := api(token); s != http.StatusOK {
		t.Fatalf("the right API token from a fresh address: %d, want 200", s)
	}
	e.browser(t).mustSignIn()
	e.browser(t).mustSignIn() // signed in once, still not pooled
	if s := api(token); s != http.StatusOK {
		t.Fatalf("the right API token after signing in: %d, want 200", s)
	}

	b := e.browser(t)
	for i := range 4 {
		if p := b.signIn("wrong"); p.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, p.status)
		}
	}
	if p := b.signIn(token); p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") != "1" {
		t.Fatalf("right token after four wrong ones: %d Retry-After %q, want 429 and 1", p.status, p.header.Get("Retry-After"))
	}
	if s := api(token); s != http.StatusTooManyRequests {
		t.Fatalf("the right API token while the address waits: %d, want 429", s)
	}
}

func TestSignInFormNeedsItsCSRFCookie(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	lp := b.get("/ui/login")
	tok := csrf(t, lp)
	fresh := e.browser(t) // no sign-in cookie
	if p := fresh.post("/ui/login", url.Values{"csrf": {tok}, "token": {token}}); p.status != http.StatusForbidden || fresh.cookie("hookstamp_session") != nil {
		t.Errorf("sign-in without the form's cookie: %d", p.status)
	}
	if p := b.post("/ui/login", url.Values{"csrf": {"forged"}, "token": {token}}); p.status != http.StatusForbidden {
		t.Errorf("sign-in with a forged csrf field: %d", p.status)
	}
}

func TestConsoleOff(t *testing.T) {
	for name, eo := range map[string]envOptions{"admin.console false": {noUI: true}, "no admin.token": {noToken: true}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, eo)
			if p := e.browser(t).get("/ui/login"); p.status != http.StatusNotFound {
				t.Errorf("/ui/login: %d, want 404", p.status)
			}
		})
	}
}

func setCookie(tb testing.TB, p page, name string) *http.Cookie {
	tb.Helper()
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	tb.Fatalf("no %s cookie set; Set-Cookie: %q", name, p.header.Values("Set-Cookie"))
	return nil
}

// A burst of wrong tokens sent at once gets the free tries and one more
// compared, as one after another would: the throttle checks and counts a
// try in one step.
func TestConcurrentWrongTokensAreThrottledAsOne(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 64
	wrong := strings.Repeat("w", 1<<19) // slow to read and digest: the tries overlap
	reqs := make([]*http.Request, n)
	browsers := make([]*browser, n)
	for i := range n {
		b := e.browser(t)
		form := url.Values{"csrf": {csrf(t, b.get("/ui/login"))}, "token": {wrong}}.Encode()
		reqs[i], _ = http.NewRequest(http.MethodPost, e.srv.URL+"/ui/login", strings.NewReader(form))
		reqs[i].Header.Set("Content-Type", "application/x-www-form-urlencoded")
		browsers[i] = b
	}
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := browsers[i].c.Do(reqs[i])
			if err != nil {
				return
			}
			statuses[i] = res.StatusCode
			res.Body.Close()
		})
	}
	wg.Wait()
	compared := 0
	for _, s := range statuses {
		switch s {
		case http.StatusUnauthorized:
			compared++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("statuses %v: want only 401 and 429", statuses)
		}
	}
	if compared != 4 {
		t.Fatalf("%d of %d concurrent wrong tokens were compared, want 4 (three free tries and the one that starts the wait)", compared, n)
	}
}
