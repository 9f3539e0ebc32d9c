package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// getAs GETs path from the console with Host set to host.
func (b *browser) getAs(host, path string) page {
	b.tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.e.srv.URL+path, nil)
	req.Host = host
	return b.do(req)
}

// The console answers to IP addresses, localhost and the names it is
// given, whatever the port; any other name is refused (421) before
// anything is served, as a page rebound to the listener's address by its
// DNS would send it.
func TestConsoleAnswersOnlyToItsHostNames(t *testing.T) {
	e := newEnv(t, envOptions{hosts: []string{"console.example.com", "hookstamp_admin"}})
	b := e.browser(t)
	for _, host := range []string{
		"127.0.0.1", "127.0.0.1:9090", "10.1.2.3:8080", "[::1]:9090", "[fe80::1%25eth0]:9090",
		"localhost", "LocalHost:9090", "localhost.:9090",
		"console.example.com", "Console.Example.COM.:443", "hookstamp_admin:9090",
	} {
		if p := b.getAs(host, "/ui/login"); p.status != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", host, p.status)
		}
	}
	for _, host := range []string{
		"evil.example:9090", "localhost.evil.example", "127.0.0.1.nip.io", "example.com", "console.example.com.evil.example",
	} {
		p := b.getAs(host, "/ui/login")
		if p.status != http.StatusMisdirectedRequest || !strings.Contains(p.body, "admin.console_hosts") {
			t.Errorf("Host %q: %d, want 421 saying what to configure", host, p.status)
		}
		if p.header.Get("Set-Cookie") != "" || strings.Contains(p.body, `name="token"`) {
			t.Errorf("Host %q: the refusal sets a cookie or shows the sign-in form", host)
		}
	}
	if p := b.getAs("evil.example", "/ui/static/console.css"); p.status != http.StatusMisdirectedRequest {
		t.Errorf("a static file under an unknown name: %d, want 421", p.status)
	}
}

// Sign-in attempts sent under another name, as a rebinding page would
// drive the operator's browser to send them, compare no token and count
// nothing: the operator's address is not made to wait by them.
func TestSignInUnderAnotherNameCountsNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	form := url.Values{"csrf": {csrf(t, b.get("/ui/login"))}}
	for i := range 6 {
		form.Set("token", "guess")
		if i == 5 {
			form.Set("token", token)
		}
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Host = "rebound.evil.example:9090"
		if p := b.do(req); p.status != http.StatusMisdirectedRequest || b.cookie("hookstamp_session") != nil {
			t.Fatalf("sign-in %d under another name: %d, want 421 and no session", i+1, p.status)
		}
	}
	b.mustSignIn()
}
