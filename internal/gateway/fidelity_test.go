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

// A chunked delivery's trailer fields are not header fields (RFC 9110
// §6.5.1), declared or not: fasthttp merges them into the header, where
// they reached the upstream as header fields, could supply the key, or —
// merely declared — made the forward drop the real header of that name.
func TestChunkedTrailersAreNotHeaderFields(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	chunked := func(head, body, trailer string) string {
		return "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + head +
			"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, trailer)
	}
	exchange := func(req string) rawReply {
		out := rawExchange(t, g, req, 2*time.Second)
		if len(out) != 1 {
			t.Fatalf("want one answer, got %+v", out)
		}
		return out[0]
	}

	// Declared and undeclared trailer fields, one of them shadowing a header.
	r := exchange(chunked("Trailer: X-Checksum\r\nX-Event-Id: evt_chunk\r\n", `{"n":1}`,
		"X-Checksum: abc\r\nX-Smuggled: yes\r\nX-Event-Id: evt_other\r\n"))
	if r.status != 200 {
		t.Fatalf("chunked delivery: %d", r.status)
	}
	body, _, key := up.lastRequest()
	h := up.lastHeader()
	if key != "evt_chunk" || body != `{"n":1}` || h.Get("X-Checksum") != "" || h.Get("X-Smuggled") != "" ||
		!slices.Equal(h.Values("X-Event-Id"), []string{"evt_chunk"}) {
		t.Fatalf("upstream got key %q body %q, X-Checksum %q X-Smuggled %q X-Event-Id %q", key, body,
			h.Get("X-Checksum"), h.Get("X-Smuggled"), h.Values("X-Event-Id"))
	}

	// A key that only the trailer carries is no key, also after an empty
	// body (which fasthttp reports as Content-Length 0).
	for _, body := range []string{`{"n":2}`, ""} {
		req := chunked("", body, "X-Event-Id: evt_trailer\r\nX-Smuggled: yes\r\n")
		if body == "" {
			req = strings.Replace(req, "0\r\n\r\n0\r\n", "0\r\n", 1) // no empty chunk before the last
		}
		if r := exchange(req); r.status != 400 || r.header.Get("Hookstamp-Outcome") != "missing_key" {
			t.Fatalf("a key in the trailer only (body %q): %d %q, want 400 missing_key", body, r.status, r.header.Get("Hookstamp-Outcome"))
		}
	}

	// Cookie lines are folded into one field: a Cookie trailer is still
	// told from them.
	exchange(chunked("Cookie: a=1\r\nCookie: b=2\r\nX-Event-Id: evt_cookie\r\n", `{"n":4}`, "Cookie: c=3\r\n"))
	if got := strings.Join(up.lastHeader().Values("Cookie"), "; "); strings.Contains(got, "c=3") || !strings.Contains(got, "a=1") || !strings.Contains(got, "b=2") {
		t.Fatalf("Cookie forwarded as %q, want a=1 and b=2 without the trailer's c=3", got)
	}

	// A field declared as a trailer but sent only as a header is forwarded.
	exchange(chunked("Trailer: X-Note\r\nX-Note: kept\r\nX-Event-Id: evt_declared\r\n", `{"n":3}`, ""))
	if got := up.lastHeader().Get("X-Note"); got != "kept" {
		t.Fatalf("X-Note %q, want the header's own value", got)
	}
}

// A raw space in the query (fasthttp takes the request line's last space
// as its end) must not reach the upstream's request line as it is: the
// upstream refused the broken line with 400 before its application ran,
// and that 400 was recorded as the event's answer.
func TestRawBytesInTheQueryAreEscaped(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"id":"evt_query"}`
	req := fmt.Sprintf("POST /hooks?a=1 2&b=%%zz HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if out := rawExchange(t, g, req, 2*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("want one 200 answer, got %+v", out)
	}
	if _, uri, _ := up.lastRequest(); uri != "/up?a=1%202&b=%25zz" || up.count("evt_query") != 1 {
		t.Fatalf("the upstream got %q (%d times), want /up?a=1%%202&b=%%25zz once", uri, up.count("evt_query"))
	}
}

// Ambiguous framing is refused with 400 and the connection closed (RFC 9112
// §6.1, §6.3): a proxy in front that framed the bytes the other way would
// see other requests than the gateway does. fasthttp accepted all three.
func TestAmbiguousFramingIsRefused(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	head := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	body := `{"id":"evt_framing"}`
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	behind := head + "X-Event-Id: evt_behind\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	for name, req := range map[string]string{
		"conflicting Content-Length values":                       head + fmt.Sprintf("Content-Length: 0\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body),
		"Content-Length with Transfer-Encoding, a request behind": head + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(body)+5) + chunk + behind,
		"Transfer-Encoding not ending in chunked":                 head + "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\n" + chunk,
	} {
		t.Run(name, func(t *testing.T) {
			out := rawExchange(t, g, req, 3*time.Second)
			if len(out) != 1 || out[0].status != 400 || out[0].header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("want one 400 problem and the connection closed, got %+v", out)
			}
		})
	}
	if up.count("evt_framing") != 0 || up.count("evt_behind") != 0 || up.total.Load() != 0 {
		t.Fatalf("the upstream got %d requests", up.total.Load())
	}
	// The same headers, unambiguous, still work.
	ok := head + fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), len(body), body)
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("repeated equal Content-Length values: %+v", out)
	}
}

// key_header is the gateway's word on a delivery's identity: a sender's own
// Idempotency-Key never reaches the upstream, also on a passthrough (here a
// method the route does not deduplicate), where the gateway has no key.
func TestSendersKeyHeaderNeverPasses(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	wantOutcome(t, sendMethod(t, g, "PUT", "/hooks", `{"id":"evt_put"}`, "Idempotency-Key", "evt_victim"), 200, "passthrough")
	if got := up.lastHeader().Values("Idempotency-Key"); len(got) != 0 {
		t.Fatalf("a passthrough carried the sender's Idempotency-Key %q upstream", got)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_own"}`, "Idempotency-Key", "evt_victim"), 200, "forwarded")
	if got := up.lastHeader().Values("Idempotency-Key"); !slices.Equal(got, []string{"evt_own"}) {
		t.Fatalf("a delivery carried Idempotency-Key %q, want the extracted key only", got)
	}
}
