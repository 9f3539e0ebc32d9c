package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// A control character in a framing field (Transfer-Encoding,
// Content-Length, Host, Connection) is refused as in any other field:
// fasthttp keeps those fields out of the walk that found control
// characters, and the framing check trimmed them as white space, so
// "Transfer-Encoding: \x0cchunked" was read as chunked where a proxy in
// front may read it otherwise (a desync).
func TestControlCharacterInFramingFieldIsRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	const body = `{"id":"evt_ctl"}`
	chunkedBody := chunked(body, 5)
	head := "POST /hooks HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
	cases := []struct{ name, fields, body string }{
		{"form feed before chunked", "Host: gw\r\nTransfer-Encoding: \x0cchunked\r\n", chunkedBody},
		{"vertical tab after chunked", "Host: gw\r\nTransfer-Encoding: chunked\x0b\r\n", chunkedBody},
		{"form feed inside the coding list", "Host: gw\r\nTransfer-Encoding: \x0c, chunked\r\n", chunkedBody},
		{"vertical tab before a length", "Host: gw\r\nContent-Length: \x0b16\r\n", body},
		{"form feed after a length", fmt.Sprintf("Host: gw\r\nContent-Length: %d\x0c\r\n", len(body)), body},
		{"form feed in Host", fmt.Sprintf("Host: \x0cgw\r\nContent-Length: %d\r\n", len(body)), body},
		{"vertical tab in Connection", fmt.Sprintf("Host: gw\r\nConnection: \x0bkeep-alive\r\nContent-Length: %d\r\n", len(body)), body},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, rows := up.total.Load(), ledgerRows(t, db)
			out := rawExchange(t, g, head+c.fields+"\r\n"+c.body, 3*time.Second)
			if n := up.total.Load() - before; n != 0 {
				got, _, _ := up.lastRequest()
				t.Fatalf("forwarded %d time(s) (answers %v), the upstream got %q", n, statuses(out), got)
			}
			if len(out) != 1 {
				t.Fatalf("got %d answers %v, want one 400", len(out), statuses(out))
			}
			wantProblem(t, out[0].reply(), http.StatusBadRequest, "")
			if n := ledgerRows(t, db) - rows; n != 0 {
				t.Fatalf("%d ledger rows were written", n)
			}
		})
	}
	// Spaces and tabs around the value are optional white space.
	ok := head + "Host: gw\r\nTransfer-Encoding: \t chunked \t\r\n\r\n" + chunkedBody
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("chunked between spaces and tabs: %v, want 200", statuses(out))
	}
	if got, _, _ := up.lastRequest(); got != body || up.count("evt_ctl") != 1 {
		t.Fatalf("the upstream got %q %d time(s)", got, up.count("evt_ctl"))
	}
}

// A route that verifies signatures verifies every request it forwards,
// deduplicated or not: a PUT or PATCH, which the route passes through,
// reached the upstream unverified (and without a key). Signed, such a
// request is still passed through.
func TestVerifyingRouteVerifiesPassthroughMethods(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	routes := signedRoutes(up.URL)
	g := startGateway(t, routesConfig(t, db, "", "", routes, []string{"STRIPE_SECRET=" + sigCurrent, "GITHUB_SECRET=" + githubSecret}))
	body := []byte(`{"id":"evt_put","object":"event","type":"invoice.paid"}`)
	for _, path := range []string{"/webhooks/stripe", "/webhooks/github"} {
		for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet} {
			t.Run(path+"/"+method, func(t *testing.T) {
				before := up.total.Load()
				r := request(t, g, method, path, body, headers("X-GitHub-Delivery", "d-1", "Stripe-Signature", "t=1,v1=00"))
				if n := up.total.Load() - before; n != 0 {
					t.Fatalf("an unsigned %s reached the upstream %d time(s) (answer %d %s)", method, n, r.status, r.outcome())
				}
				wantProblem(t, r, http.StatusUnauthorized, "unverified")
			})
		}
	}
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("the ledger has %d rows", n)
	}
	// Signed, a PUT is passed through: forwarded once, recorded nowhere.
	r := request(t, g, http.MethodPut, "/webhooks/stripe", body, verifytest.Stripe(sigCurrent, body, time.Now()))
	wantOutcome(t, r, http.StatusOK, "passthrough")
	r = request(t, g, http.MethodPatch, "/webhooks/github", body, merged(verifytest.GitHub(githubSecret, body), headers("X-GitHub-Delivery", "d-2")))
	wantOutcome(t, r, http.StatusOK, "passthrough")
	if n := up.total.Load(); n != 2 {
		t.Fatalf("the upstream got %d requests, want the 2 signed ones", n)
	}
	if got, _, _ := up.lastRequest(); got != string(body) {
		t.Fatalf("the upstream got %q", got)
	}
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("a passthrough left %d ledger rows", n)
	}
}

// Headers a proxy in front writes about the request it received (its
// port, path prefix, TLS, the client's address, the URL before a rewrite)
// are a sender's claim from a peer that is not a trusted proxy, which
// frameworks behind a proxy believe (Rack's X-Forwarded-Ssl, Spring's and
// Werkzeug's -Prefix and -Port): they were forwarded unchanged. They are
// dropped from an untrusted peer, and passed on from a trusted one.
func TestSenderSetProxyHeadersAreDropped(t *testing.T) {
	spoofed := []string{
		"X-Forwarded-Port", "443", "X-Forwarded-Prefix", "/admin", "X-Forwarded-Ssl", "on",
		"X-Forwarded-Server", "internal", "X-Forwarded-Uri", "/admin/x", "X-Real-IP", "10.0.0.1",
		"True-Client-IP", "10.0.0.2", "X-Original-URL", "/admin", "X_Forwarded_Port", "8443",
	}
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			up := newUpstream(t)
			db := dbPath(t)
			cfg := gwConfig(t, up.URL, db, "", "")
			if trusted {
				cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
			}
			g := startGateway(t, cfg)
			key := fmt.Sprintf("evt_proxy_%v", trusted)
			wantOutcome(t, send(t, g, "/hooks", `{}`, append([]string{"X-Event-Id", key, "X-Note", "kept"}, spoofed...)...), 200, "forwarded")
			if n := up.count(key); n != 1 {
				t.Fatalf("the upstream got %s %d times", key, n)
			}
			h := up.lastHeader()
			if h.Get("X-Note") != "kept" {
				t.Fatalf("an ordinary header was dropped: %v", h)
			}
			for i := 0; i < len(spoofed); i += 2 {
				name, value := spoofed[i], spoofed[i+1]
				var got []string
				for k, vs := range h {
					if strings.EqualFold(k, name) {
						got = append(got, vs...)
					}
				}
				switch {
				case !trusted && len(got) != 0:
					t.Errorf("the untrusted peer's %s reached the upstream: %q", name, got)
				case trusted && (len(got) != 1 || got[0] != value):
					t.Errorf("the trusted proxy's %s reached the upstream as %q, want %q", name, got, value)
				}
			}
			if got := h.Get("X-Forwarded-Host"); got == "" {
				t.Errorf("X-Forwarded-Host, the gateway's own, is missing")
			}
			if rec := lookup(t, g, "hooks", key); rec.Status != 200 {
				t.Fatalf("recorded %d", rec.Status)
			}
		})
	}
}

// request sends body with method and every value of hdr.
func request(tb testing.TB, g *Gateway, method, path string, body []byte, hdr http.Header) reply {
	tb.Helper()
	req, err := http.NewRequest(method, g.URL()+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for name, vals := range hdr {
		for _, v := range vals {
			req.Header.Add(name, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}
