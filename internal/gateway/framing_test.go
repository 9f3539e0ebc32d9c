package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Framing is judged on the fields as fasthttp's parser read them: a bare LF
// ends a line there, so a Transfer-Encoding or a second Content-Length
// behind one is seen (a walk splitting on CRLF only missed them).
func TestFramingSeenThroughBareLF(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"id":"evt_framing"}`
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	behind := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_behind\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	// Same as TestAmbiguousFramingIsRefused's CL+TE case, but the line
	// before Transfer-Encoding ends in a bare LF.
	req := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\n" +
		fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n", len(body)+5) + chunk + behind
	out := rawExchange(t, g, req, 3*time.Second)
	if len(out) != 1 || out[0].status != 400 {
		t.Errorf("CL+TE with a bare LF: want one 400 and the connection closed, got %d answers: %v (upstream got %d, evt_behind %d)",
			len(out), statuses(out), up.total.Load(), up.count("evt_behind"))
	}
	// Conflicting Content-Length values, the same way.
	req2 := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\nContent-Length: 0\r\n" +
		fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if out := rawExchange(t, g, req2, 3*time.Second); len(out) != 1 || out[0].status != 400 {
		t.Errorf("conflicting CL with a bare LF: want one 400, got %v", statuses(out))
	}
}

// Behind a bare LF, a chunked body is still known as one, so its trailer
// neither supplies the key nor reaches the upstream.
func TestTrailerBehindBareLFIsNoHeader(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"n":2}`
	req := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\n" +
		"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Event-Id: evt_trailer\r\nX-Smuggled: yes\r\n\r\n", len(body), body)
	out := rawExchange(t, g, req, 3*time.Second)
	if len(out) != 1 || out[0].status != 400 || out[0].header.Get("Hookstamp-Outcome") != "missing_key" {
		t.Errorf("key only in the trailer: want 400 missing_key, got %v %q; upstream key %q X-Smuggled %q",
			statuses(out), outcomeOf(out), up.lastHeader().Get("X-Event-Id"), up.lastHeader().Get("X-Smuggled"))
	}
}

// Nothing on a connection is served behind a request whose framing was
// faulty or not checked: an unknown method's 501 comes before the handler
// checks the framing, and an HTTP/1.0 message with Transfer-Encoding has
// faulty framing (RFC 9112 §6.1), "Connection: keep-alive" or not. Either
// way the connection is closed, and the request behind never reaches the
// upstream.
func TestNothingIsServedBehindFaultyFraming(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"id":"evt_framing"}`
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	behind := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_behind\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	for name, head := range map[string]string{
		"unknown method with CL+TE": "FROB /hooks HTTP/1.1\r\nHost: gw\r\n" +
			fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(body)+5),
		"HTTP/1.0 chunked, keep-alive": "POST /hooks HTTP/1.0\r\nHost: gw\r\nContent-Type: application/json\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			out := rawExchange(t, g, head+chunk+behind, 3*time.Second)
			if len(out) != 1 || up.count("evt_behind") != 0 {
				t.Errorf("want one answer and the connection closed, got %v; the request behind reached the upstream %d times",
					statuses(out), up.count("evt_behind"))
			}
		})
	}
}

// A folded Transfer-Encoding ("chunked" continued by " gzip") is read as
// fasthttp and RFC 9112 §5.2 proxies read it, "chunked gzip", which does
// not end in chunked: refused.
func TestObsFoldedTransferEncodingIsRefused(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"id":"evt_fold"}`
	req := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n gzip\r\nConnection: close\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	out := rawExchange(t, g, req, 3*time.Second)
	if len(out) != 1 || out[0].status != 400 {
		t.Errorf("folded TE 'chunked gzip': want 400, got %v (upstream got %d)", statuses(out), up.count("evt_fold"))
	}
}

// fasthttp keeps User-Agent and Content-Type in one slot each, so a
// repeated line and a trailer of that name cannot be told apart by
// counting: the trailer must not reach the upstream all the same.
func TestTrailerBesideRepeatedSpecialHeader(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	body := `{"n":1}`
	req := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_ua\r\n" +
		"User-Agent: a\r\nUser-Agent: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\nUser-Agent: from-trailer\r\n\r\n", len(body), body)
	out := rawExchange(t, g, req, 3*time.Second)
	if len(out) != 1 || out[0].status != 200 {
		t.Fatalf("got %v", statuses(out))
	}
	if got := up.lastHeader().Values("User-Agent"); slices.Contains(got, "from-trailer") {
		t.Errorf("the trailer's User-Agent reached the upstream: %q", got)
	}
}

func statuses(out []rawReply) []int {
	var s []int
	for _, r := range out {
		s = append(s, r.status)
	}
	return s
}

func outcomeOf(out []rawReply) string {
	var s []string
	for _, r := range out {
		s = append(s, r.header.Get("Hookstamp-Outcome"))
	}
	return strings.Join(s, ",")
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

	// Cookie lines are folded into one field; a trailer does not change
	// them.
	exchange(chunked("Cookie: a=1\r\nCookie: b=2\r\nX-Event-Id: evt_cookie\r\n", `{"n":4}`, "X-Checksum: abc\r\n"))
	if got := strings.Join(up.lastHeader().Values("Cookie"), "; "); !strings.Contains(got, "a=1") || !strings.Contains(got, "b=2") {
		t.Fatalf("Cookie forwarded as %q, want a=1 and b=2", got)
	}
	// A field no sender may put in a trailer (RFC 9110 §6.5.1) makes the
	// request malformed: nothing is forwarded.
	forwarded := up.total.Load()
	for _, trailer := range []string{"Cookie: c=3\r\n", "Authorization: Bearer x\r\n", "Content-Length: 5\r\n"} {
		r := exchange(chunked("X-Event-Id: evt_forbidden\r\n", `{"n":5}`, trailer))
		if p := wantProblem(t, r.reply(), http.StatusBadRequest, ""); !strings.Contains(p.Detail, "RFC 9110 §6.5.1") {
			t.Fatalf("trailer %q: detail %q, want it to name the forbidden trailer field", trailer, p.Detail)
		}
	}
	r = exchange(chunked("X-Event-Id: evt_forbidden\r\n", `{"n":5}`, "X-Sig\r\n"))
	if p := wantProblem(t, r.reply(), http.StatusBadRequest, ""); !strings.HasPrefix(p.Detail, "a field line is malformed") {
		t.Fatalf("a trailer line without a colon: detail %q, want it named", p.Detail)
	}
	if n := up.total.Load() - forwarded; n != 0 {
		t.Fatalf("forwarded %d requests with forbidden or malformed trailer fields", n)
	}

	// A field declared as a trailer but sent only as a header is forwarded.
	exchange(chunked("Trailer: X-Note\r\nX-Note: kept\r\nX-Event-Id: evt_declared\r\n", `{"n":3}`, ""))
	if got := up.lastHeader().Get("X-Note"); got != "kept" {
		t.Fatalf("X-Note %q, want the header's own value", got)
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
		// Equal values may be merged or refused (RFC 9110 §8.6); the
		// parser refuses them.
		"repeated equal Content-Length values": head + fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), len(body), body),
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
	ok := head + fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("one Content-Length: %+v", out)
	}
}

// A Transfer-Encoding other than chunked alone is refused: fasthttp reads
// any list ending in chunked as chunked alone, so "gzip, chunked" reached
// the upstream still gzip-coded, and "chunked, chunked" (also spread over
// two lines) still chunk-framed, as a plain body with a Content-Length
// and a 200 forwarded: a corrupted delivery, recorded as done.
func TestTransferCodingsBesideChunkedAreRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	head := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	gzipped := func(s string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return b.String()
	}
	for i, c := range []struct {
		name, te string
		code     func(string) string
		status   int
	}{
		{"gzip, chunked", "Transfer-Encoding: gzip, chunked\r\n", gzipped, http.StatusNotImplemented},
		// Two lines are one list (RFC 9110 §5.3), "gzip, chunked", but the
		// parser refuses the first line before it reads the second: 400,
		// still a refusal.
		{"gzip then chunked on two lines", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", gzipped, http.StatusBadRequest},
		{"chunked then gzip on two lines", "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", gzipped, http.StatusBadRequest},
		{"chunked, chunked", "Transfer-Encoding: chunked, chunked\r\n", func(s string) string { return chunked(s, 5) }, http.StatusBadRequest},
		{"chunked on two lines", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", func(s string) string { return chunked(s, 5) }, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"id":"evt_coded_%d"}`, i)
			forwarded, rows := up.total.Load(), ledgerRows(t, db)
			// The key in a header: the coded body is still forwarded.
			key := fmt.Sprintf("X-Event-Id: evt_coded_%d\r\n", i)
			out := rawExchange(t, g, head+key+c.te+"Connection: close\r\n\r\n"+chunked(c.code(body), 7), 3*time.Second)
			if len(out) != 1 {
				t.Fatalf("got %d answers %v, want 1", len(out), statuses(out))
			}
			if n := up.total.Load() - forwarded; n != 0 {
				got, _, _ := up.lastRequest()
				t.Fatalf("forwarded %d (%d %s), the upstream got the body %q for %q", n, out[0].status, outcomeOf(out), got, body)
			}
			wantProblem(t, out[0].reply(), c.status, "")
			if n := ledgerRows(t, db) - rows; n != 0 {
				t.Fatalf("%d ledger rows were written", n)
			}
		})
	}
	// chunked alone, in any case, is still a delivery.
	body := `{"id":"evt_chunked"}`
	ok := head + "Transfer-Encoding: Chunked\r\nConnection: close\r\n\r\n" + chunked(body, 7)
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("chunked alone: %v", statuses(out))
	}
	if b, _, _ := up.lastRequest(); b != body {
		t.Fatalf("upstream got %q, want %q", b, body)
	}
}

// A request with two Host fields is refused (RFC 9112 §3.2): fasthttp kept
// the last, so a proxy in front that routed on the first and the upstream,
// which got the other as X-Forwarded-Host (SPEC §4: the Host the client
// used), saw two different requests.
func TestRepeatedHostIsRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	req := "POST /hooks HTTP/1.1\r\nHost: shop.example\r\nHost: evil.example\r\nContent-Type: application/json\r\n" +
		"X-Event-Id: evt_hosts\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	out := rawExchange(t, g, req, 3*time.Second)
	if len(out) != 1 {
		t.Fatalf("got %d answers, want 1", len(out))
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("forwarded %d (%d %s) with X-Forwarded-Host %q", n, out[0].status, outcomeOf(out), up.lastHeader().Get("X-Forwarded-Host"))
	}
	wantProblem(t, out[0].reply(), http.StatusBadRequest, "", "evil.example")
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("ledger has %d rows", n)
	}
	// One Host, as every client sends, is a delivery.
	ok := strings.Replace(req, "Host: evil.example\r\n", "", 1)
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("one Host: %v", statuses(out))
	}
	if h := up.lastHeader().Get("X-Forwarded-Host"); h != "shop.example" {
		t.Fatalf("X-Forwarded-Host %q", h)
	}
}

// An HTTP/1.1 request without Host is refused too (RFC 9112 §3.2: a server
// MUST answer 400): passed on, the upstream got an empty X-Forwarded-Host
// (SPEC §4: the Host the client used). HTTP/1.0 has no Host requirement,
// and is a delivery still.
func TestHTTP11WithoutHostIsRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	const rest = "Content-Type: application/json\r\nX-Event-Id: evt_no_host\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	out := rawExchange(t, g, "POST /hooks HTTP/1.1\r\n"+rest, 3*time.Second)
	if len(out) != 1 {
		t.Fatalf("got %d answers, want 1", len(out))
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("forwarded %d (%d %s) with X-Forwarded-Host %q", n, out[0].status, outcomeOf(out), up.lastHeader().Get("X-Forwarded-Host"))
	}
	wantProblem(t, out[0].reply(), http.StatusBadRequest, "")
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("ledger has %d rows", n)
	}
	if out := rawExchange(t, g, "POST /hooks HTTP/1.0\r\n"+rest, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("HTTP/1.0 without Host: %v, want 200", statuses(out))
	}
	if n := up.count("evt_no_host"); n != 1 {
		t.Fatalf("upstream received evt_no_host %d times, want 1", n)
	}
}
