package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// multipartBody is a multipart/form-data webhook (SendGrid Inbound Parse,
// Mailgun routes do this) with several fields, each with a part header of
// its own.
const multipartCT = "multipart/form-data; boundary=xYzZY"

func multipartBody() string {
	var b strings.Builder
	for _, f := range []string{"from", "to", "subject", "text", "envelope", "charsets", "spam_score"} {
		fmt.Fprintf(&b, "--xYzZY\r\nContent-Disposition: form-data; name=%q\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nvalue of %s\r\n", f, f)
	}
	b.WriteString("--xYzZY--\r\n")
	return b.String()
}

// SPEC §4: a forwarded request keeps its body. fasthttp parsed multipart
// bodies and rebuilt them from the parsed form (part headers lost, fields
// in map order): the upstream got other bytes, and every copy a different
// fingerprint, so the provider's identical retry was refused as key reuse.
func TestMultipartBodyForwardedAsSent(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := multipartBody()
	first := send(t, g, "/hooks", body, "Content-Type", multipartCT, "X-Event-Id", "mp_1")
	wantOutcome(t, first, 200, "forwarded")
	if got, _, _ := up.lastRequest(); got != body {
		t.Fatalf("the upstream got another body:\n--- sent (%d bytes)\n%q\n--- received (%d bytes)\n%q", len(body), body, len(got), got)
	}
	for i := 0; i < 5; i++ {
		r := send(t, g, "/hooks", body, "Content-Type", multipartCT, "X-Event-Id", "mp_1")
		wantOutcome(t, r, 200, "replayed")
		sameReply(t, first, r)
	}
	if n := up.count("mp_1"); n != 1 {
		t.Fatalf("upstream received %d copies, want 1", n)
	}
}

// A body that claims to be multipart and is not is still a delivery: the
// gateway never interprets it (fasthttp refused it with a bare 400).
func TestMalformedMultipartIsStillADelivery(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := "this is not multipart at all"
	wantOutcome(t, send(t, g, "/hooks", body, "Content-Type", multipartCT, "X-Event-Id", "mp_bad"), 200, "forwarded")
	if got, _, _ := up.lastRequest(); got != body {
		t.Fatalf("upstream got %q", got)
	}
}

// Methods beyond Fiber's nine: a registered one a route does not
// deduplicate passes through (SPEC §1); one a route lists is deduplicated;
// an unregistered token gets a 501 problem document, not Fiber's plain
// 400.
func TestMethodsBeyondFibersDefaults(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    methods: [POST, NOTIFY]", ""))

	wantOutcome(t, sendMethod(t, g, "PROPFIND", "/hooks", "", "X-Event-Id", "m1"), 200, "passthrough")
	first := sendMethod(t, g, "NOTIFY", "/hooks", `{"id":"n1"}`)
	wantOutcome(t, first, 200, "forwarded")
	sameReply(t, first, sendMethod(t, g, "NOTIFY", "/hooks", `{"id":"n1"}`))
	if n := up.count("n1"); n != 1 {
		t.Fatalf("NOTIFY n1 reached the upstream %d times, want 1", n)
	}

	r := sendMethod(t, g, "FROBNICATE", "/hooks", `{"id":"f1"}`)
	if r.status != http.StatusNotImplemented || r.header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(r.body), `"status":501`) {
		t.Fatalf("an unknown method got %d %s %s, want a 501 problem document", r.status, r.header.Get("Content-Type"), r.body)
	}
	if n := up.count("f1"); n != 0 {
		t.Fatalf("an unknown method was forwarded")
	}
}

// README, "Prefix routes' paths": the rest of the path reaches the upstream
// escaped as the sender escaped it, an escaped slash inside its segment,
// also when the path holds bytes the sender should have escaped.
func TestPrefixRouteKeepsEscapedSlashBesideRawBytes(t *testing.T) {
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Routes[0].Path = "/hooks/*"
	g := startGateway(t, cfg)
	for i, tc := range []struct{ path, want string }{
		{"/hooks/files/a%2Fb|c", "/files/a%2Fb%7Cc"},
		{"/hooks/f\xc3\xbcr/a%2Fb", "/f%C3%BCr/a%2Fb"},
	} {
		body := fmt.Sprintf(`{"id":"pr%d"}`, i)
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			tc.path, len(body), body)
		if out := rawExchange(t, g, req, 2*time.Second); len(out) != 1 || out[0].status != 200 {
			t.Fatalf("%q: no 200 answer: %+v", tc.path, out)
		}
		if _, uri, _ := up.lastRequest(); !strings.HasSuffix(uri, tc.want) {
			t.Errorf("%q reached the upstream as %q, want it to end in %q", tc.path, uri, tc.want)
		}
	}
}

// key_header carries the record's key (SPEC §4), and an HTTP field value
// cannot begin or end with a space: "evt" and " evt" would be two records
// sent upstream with one Idempotency-Key. Such keys are refused.
func TestKeyWithEdgeSpacesIsRefused(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_sp"}`), 200, "forwarded")
	for _, k := range []string{" evt_sp", "evt_sp "} {
		r := send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, k))
		wantOutcome(t, r, 400, "invalid_key")
	}
	if _, _, key := up.lastRequest(); key != "evt_sp" || up.total.Load() != 1 {
		t.Fatalf("upstream got %d requests, last key %q", up.total.Load(), key)
	}
}

// Bytes a query cannot carry as they are (a "|", a "%" that starts no
// escape) reach the upstream escaped, so that its parse of the request
// line cannot fail on them. A raw space ends the request target: the
// request line is malformed, 400, nothing forwarded.
func TestRawBytesInTheQueryAreEscaped(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"id":"evt_query"}`
	req := fmt.Sprintf("POST /hooks?a=1|2&b=%%zz HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if out := rawExchange(t, g, req, 2*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("want one 200 answer, got %+v", out)
	}
	if _, uri, _ := up.lastRequest(); uri != "/up?a=1%7C2&b=%25zz" || up.count("evt_query") != 1 {
		t.Fatalf("the upstream got %q (%d times), want /up?a=1%%7C2&b=%%25zz once", uri, up.count("evt_query"))
	}
	spaced := strings.Replace(req, "a=1|2", "a=1 2", 1)
	spaced = strings.Replace(spaced, "evt_query", "evt_spaced", 1)
	out := rawExchange(t, g, spaced, 2*time.Second)
	if len(out) != 1 {
		t.Fatalf("a raw space in the query: want one answer, got %+v", out)
	}
	wantProblem(t, out[0].reply(), http.StatusBadRequest, "")
	if n := up.total.Load(); n != 1 {
		t.Fatalf("the upstream got %d requests, want 1", n)
	}
}

// key_header is the gateway's word on a delivery's identity: a sender's own
// Idempotency-Key never reaches the upstream, also on a passthrough (here a
// method the route does not deduplicate), where the gateway has no key —
// nor does "Idempotency_Key", which CGI-style upstreams (WSGI, Rack, PHP)
// read as the same HTTP_IDEMPOTENCY_KEY.
func TestSendersKeyHeaderNeverPasses(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	for _, name := range []string{"Idempotency-Key", "Idempotency_Key"} {
		wantOutcome(t, sendMethod(t, g, "PUT", "/hooks", `{"id":"evt_put"}`, name, "evt_victim"), 200, "passthrough")
		for got, v := range up.lastHeader() {
			if strings.EqualFold(strings.ReplaceAll(got, "_", "-"), "Idempotency-Key") {
				t.Fatalf("a passthrough carried the sender's %s: %q upstream", got, v)
			}
		}
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_own"}`, "Idempotency-Key", "evt_victim"), 200, "forwarded")
	if got := up.lastHeader().Values("Idempotency-Key"); !slices.Equal(got, []string{"evt_own"}) {
		t.Fatalf("a delivery carried Idempotency-Key %q, want the extracted key only", got)
	}
}
