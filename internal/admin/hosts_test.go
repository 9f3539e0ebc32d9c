package admin

import (
	"io"
	"net/http"
	"testing"
)

// A page rebound to the admin listener is same-origin to the operator's
// browser: its guesses are refused under the page's name before they
// count, so the operator's address never waits for them. Scripts, which
// send no browser marks, are served under any name.
func TestBrowsersCallTheAPIOnlyUnderKnownNames(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Hosts = []string{"ops.example.com"} })
	call := func(host, tok string, browser bool) int {
		t.Helper()
		if browser {
			return e.statsStatus(t, http.MethodGet, host, tok, "Sec-Fetch-Site", "same-origin")
		}
		return e.statsStatus(t, http.MethodGet, host, tok)
	}
	for range 10 {
		if got := call("rebound.attacker.example:9090", "guess", true); got != http.StatusMisdirectedRequest {
			t.Fatalf("a browser's guess under a rebound name: %d, want 421", got)
		}
	}
	for _, tc := range []struct {
		host    string
		browser bool
	}{
		{"127.0.0.1:9090", true},
		{"LOCALHOST:9090", true},
		{"ops.example.com.", true},
		{"[::1]:9090", true},
		{"hookstamp-admin.prod.svc:9090", false}, // a script by a Service name
	} {
		if got := call(tc.host, token, tc.browser); got != http.StatusOK {
			t.Errorf("the right token under %q (browser %v) after the rebound guesses: %d, want 200", tc.host, tc.browser, got)
		}
	}
	// A script's wrong tokens still count, whatever name it uses.
	for range 4 {
		call("hookstamp-admin.prod.svc", "guess", false)
	}
	if got := call("127.0.0.1", token, false); got != http.StatusTooManyRequests {
		t.Errorf("after four wrong tokens: %d, want 429", got)
	}
}

// A page of another site can make the operator's browser send requests to
// the API (an <img>, a form): the browser's marks refuse them with 403
// before the token is read, so their tokens, right or wrong, never count.
// The same origin, and requests no browser sent, are served.
func TestBrowsersCallTheAPIOnlyFromItsOrigin(t *testing.T) {
	e := newEnv(t, nil)
	host := e.srv.Listener.Addr().String()
	call := func(method, tok string, marks ...string) int {
		t.Helper()
		return e.statsStatus(t, method, host, tok, marks...)
	}
	for _, marks := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "http://attacker.example"},
		{"Origin", "null"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
			for _, tok := range []string{"guess", token} {
				if got := call(method, tok, marks...); got != http.StatusForbidden {
					t.Errorf("%s with %v and token %q: %d, want 403", method, marks, tok, got)
				}
			}
		}
	}
	for _, marks := range [][]string{
		{"Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "none"},
		{"Origin", "http://" + host},
		nil,
	} {
		if got := call(http.MethodGet, token, marks...); got != http.StatusOK {
			t.Errorf("GET with %v and the right token: %d, want 200", marks, got)
		}
	}
}

// statsStatus sends method to /admin/stats under host with the bearer
// token and the header fields given as name, value pairs, and returns the
// answer's status.
func (e *env) statsStatus(tb testing.TB, method, host, tok string, fields ...string) int {
	tb.Helper()
	req, err := http.NewRequest(method, e.srv.URL+"/admin/stats", nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}
