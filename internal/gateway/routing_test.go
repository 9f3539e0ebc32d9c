package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
)

// routingConfig is a configuration of the given routes YAML (each route's
// upstream URL is up + the route's own path) on SQLite.
func routingConfig(t *testing.T, routes string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
admin:
  listen: ""
store:
  driver: sqlite
  dsn: %q
routes:
%s
`, dbPath(t), routes)
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// SPEC §1: routes are matched by path and method. A PUT to /hooks/a is a
// delivery of the prefix route that deduplicates PUT, even though an
// exact route (for POST) covers that path: its repeat must be replayed,
// not forwarded a second time as the exact route's passthrough.
func TestRouteMatchedByPathAndMethodAcrossPaths(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routingConfig(t, fmt.Sprintf(`
  - name: exact
    path: /hooks/a
    methods: [POST]
    upstream: {url: "%[1]s/exact"}
    key: {sources: [{header: X-Event-Id}]}
  - name: hooks
    path: /hooks/*
    methods: [PUT]
    upstream: {url: "%[1]s/all"}
    key: {sources: [{header: X-Event-Id}]}
`, up.URL)))

	first := sendMethod(t, g, http.MethodPut, "/hooks/a", `{"n":1}`, "X-Event-Id", "evt-put")
	wantOutcome(t, first, http.StatusOK, "forwarded")
	if _, uri, _ := up.lastRequest(); uri != "/all/a" {
		t.Fatalf("upstream got %q, want /all/a (the prefix route's upstream)", uri)
	}
	again := sendMethod(t, g, http.MethodPut, "/hooks/a", `{"n":1}`, "X-Event-Id", "evt-put")
	wantOutcome(t, again, http.StatusOK, "replayed")
	if n := up.count("evt-put"); n != 1 {
		t.Fatalf("upstream saw the PUT delivery %d times, want 1", n)
	}

	// A method neither route deduplicates passes through the exact route.
	get := sendMethod(t, g, http.MethodGet, "/hooks/a", "")
	wantOutcome(t, get, http.StatusOK, "passthrough")
	if _, uri, _ := up.lastRequest(); uri != "/exact" {
		t.Fatalf("upstream got %q, want /exact", uri)
	}
}

// A route path written as it appears in the URL given to the provider,
// percent-escapes and all, is accepted at start-up (SPEC §3 routes[].path):
// it must then serve the requests to that URL. Requests are matched on
// their decoded path, so the configured one must be decoded too, or every
// delivery gets 404.
func TestEscapedRoutePathMatches(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routingConfig(t, fmt.Sprintf(`
  - name: spaced
    path: /hooks/order%%20paid
    methods: [POST]
    upstream: {url: "%[1]s/spaced"}
    key: {sources: [{header: X-Event-Id}]}
  - name: cafe
    path: /caf%%C3%%A9/*
    methods: [POST]
    upstream: {url: "%[1]s/cafe"}
    key: {sources: [{header: X-Event-Id}]}
`, up.URL)))
	for _, tc := range []struct{ path, uri string }{
		{"/hooks/order%20paid", "/spaced"},
		{"/caf%C3%A9/x%2Fy", "/cafe/x%2Fy"},
	} {
		r := send(t, g, tc.path, `{}`, "X-Event-Id", "evt"+tc.uri)
		wantOutcome(t, r, http.StatusOK, "forwarded")
		if _, uri, _ := up.lastRequest(); uri != tc.uri {
			t.Fatalf("POST %s: upstream got %q, want %q", tc.path, uri, tc.uri)
		}
	}
}

// SPEC §4: a /* route appends the rest of the path to upstream.url, and
// "a%2Fb" stays one segment (README, prefix routes' paths). That must
// hold also when upstream.url's own path has a byte that is escaped on
// the wire (a space, UTF-8): the sender's "%2F" must not become "/".
func TestPrefixRestKeepsEscapesUnderUnescapedBase(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routingConfig(t, fmt.Sprintf(`
  - name: hooks
    path: /hooks/*
    methods: [POST]
    upstream: {url: "%[1]s/my hooks/caf\u00e9/?v=1"}
    key: {sources: [{header: X-Event-Id}]}
`, up.URL)))
	r := send(t, g, "/hooks/files/a%2Fb?x=1", `{}`, "X-Event-Id", "evt-1")
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if _, uri, _ := up.lastRequest(); uri != "/my%20hooks/caf%C3%A9/files/a%2Fb?v=1&x=1" {
		t.Fatalf("upstream got %q, want /my%%20hooks/caf%%C3%%A9/files/a%%2Fb?v=1&x=1", uri)
	}
}

// A sender inside a trusted range (trusted_proxies 10.0.0.0/8, an internal
// service at 10.1.2.3 reaching the gateway through an ingress proxy) is
// the X-Forwarded-For entry, not the proxy: otherwise every delivery is
// recorded (ledger source, top duplicate sources) and forwarded as coming
// from the proxy. An untrusted entry to its right still wins.
func TestSenderInsideTrustedRangeIsTheSource(t *testing.T) {
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.TrustedProxies = []string{"127.0.0.0/8", "10.0.0.0/8"}
	g := startGateway(t, cfg)
	for key, tc := range map[string]struct{ xff, want string }{
		"evt-internal": {"10.1.2.3", "10.1.2.3"},
		"evt-chain":    {"10.1.2.3, 10.9.9.9", "10.1.2.3"},
		"evt-outside":  {"10.1.2.3, 203.0.113.7, 10.9.9.9", "203.0.113.7"},
		"evt-garbled":  {"unknown, 10.9.9.9", "10.9.9.9"},
	} {
		wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", key, "X-Forwarded-For", tc.xff), 200, "forwarded")
		if got := up.lastHeader().Get("X-Forwarded-For"); got != tc.want {
			t.Errorf("X-Forwarded-For %q: upstream got %q, want %q", tc.xff, got, tc.want)
		}
		if rec := lookup(t, g, "hooks", key); rec == nil {
			t.Errorf("X-Forwarded-For %q: no ledger record", tc.xff)
		} else if rec.Source != tc.want {
			t.Errorf("X-Forwarded-For %q: ledger source %q, want %q", tc.xff, rec.Source, tc.want)
		}
	}
}

// A prefix route's rest with a dot segment that the upstream, not the
// gateway, would resolve ("..;" to Tomcat and Spring, double escapes to a
// second decoder, "\" to IIS) reaches outside upstream.url: it gets 400
// and nothing is forwarded, whatever the method (GET passes through).
// Names holding dots or ";" are forwarded as sent.
func TestPrefixRestThatEscapesUpstreamURLIsRefused(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routingConfig(t, fmt.Sprintf(`
  - name: tc
    path: /tc/*
    methods: [POST]
    upstream: {url: "%s/app/hooks/"}
    key: {sources: [{header: X-Event-Id}]}
`, up.URL)))
	raw := func(method, path string) reply {
		t.Helper()
		req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: gw\r\nX-Event-Id: evt-%s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, path, path)
		out := rawExchange(t, g, req, 2*time.Second)
		if len(out) != 1 {
			t.Fatalf("%s %s: want one answer, got %+v", method, path, out)
		}
		return out[0].reply()
	}
	for _, path := range []string{
		"/tc/..;/..;/admin/secret.txt",
		"/tc/%2e%2e;/%2e%2e;/admin",
		"/tc/..%3B/..%3B/admin",
		"/tc/..%5C..%5Cadmin",
		"/tc/%252e%252e/admin",
		"/tc/a%00b",
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			wantProblem(t, raw(method, path), http.StatusBadRequest, "")
		}
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests, want none", n)
	}
	for _, tc := range []struct{ path, uri string }{
		{"/tc/a;b", "/app/hooks/a;b"},
		{"/tc/a.b", "/app/hooks/a.b"},
		{"/tc/...", "/app/hooks/..."},
	} {
		wantOutcome(t, raw(http.MethodPost, tc.path), http.StatusOK, "forwarded")
		if _, uri, _ := up.lastRequest(); uri != tc.uri {
			t.Errorf("POST %s: upstream got %q, want %q", tc.path, uri, tc.uri)
		}
	}
}

// Parameters upstream.url sets are the operator's: a sender's of the same
// name is not forwarded, so that an application reading the last of a
// repeated parameter reads the configured value. Others pass as sent.
func TestConfiguredQueryParametersWinOverTheSenders(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routingConfig(t, fmt.Sprintf(`
  - name: qs
    path: /qs
    methods: [POST]
    upstream: {url: "%s/qs?tenant=acme&api_key=K3Y"}
    key: {sources: [{header: X-Event-Id}]}
`, up.URL)))
	r := send(t, g, "/qs?tenant=evil&api_key=x&page=2", `{}`, "X-Event-Id", "evt-qs")
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if _, uri, _ := up.lastRequest(); uri != "/qs?tenant=acme&api_key=K3Y&page=2" {
		t.Fatalf("upstream got %q, want /qs?tenant=acme&api_key=K3Y&page=2", uri)
	}
}
