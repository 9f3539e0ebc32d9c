package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
)

// admin.console (default true) serves the console with a token; false,
// or no token, leaves /ui/ off while the rest of the listener answers.
func TestConsoleIsServedWithATokenUnlessTurnedOff(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		console bool
		want    int
	}{
		{"token, console on", adminToken, true, http.StatusOK},
		{"token, console off", adminToken, false, http.StatusNotFound},
		{"no token", "", true, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			s.token = tc.token
			s.mutate = func(c *config.Config) { c.Admin.Console = tc.console }
			g := s.start(t)
			a := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/ui/login", "")
			if a.status != tc.want {
				t.Fatalf("/ui/login: %d, want %d: %s", a.status, tc.want, a.body)
			}
			if tc.want == http.StatusOK && !strings.Contains(a.header.Get("Content-Security-Policy"), "default-src 'none'") {
				t.Errorf("console without its CSP: %v", a.header)
			}
			if h := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/healthz", ""); h.status != http.StatusOK {
				t.Errorf("/healthz: %d", h.status)
			}
		})
	}
}

// The console answers to the names of admin.console_hosts and to IP
// addresses; any other Host, as a page rebound to the listener's address
// by its DNS sends, is refused with 421. The rest of the listener
// answers whatever the name.
func TestConsoleAnswersToItsConfiguredHostNames(t *testing.T) {
	s := newSetup(t)
	s.mutate = func(c *config.Config) { c.Admin.ConsoleHosts = []string{"console.example.com"} }
	g := s.start(t)
	get := func(host, path string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+path, nil)
		req.Host = host
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for host, want := range map[string]int{
		g.AdminAddr(): http.StatusOK, "console.example.com": http.StatusOK, "localhost:9090": http.StatusOK,
		"rebound.evil.example:9090": http.StatusMisdirectedRequest,
	} {
		if got := get(host, "/ui/login"); got != want {
			t.Errorf("/ui/login as %q: %d, want %d", host, got, want)
		}
	}
	if got := get("rebound.evil.example", "/healthz"); got != http.StatusOK {
		t.Errorf("/healthz under another name: %d, want 200", got)
	}
}
