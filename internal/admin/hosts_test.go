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
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/admin/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+tok)
		if browser {
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
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
