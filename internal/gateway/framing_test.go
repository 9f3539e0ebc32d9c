package gateway

import (
	"fmt"
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
			statuses(out), outcomeOf(out), up.lastKey(), up.lastHeaderGet("X-Smuggled"))
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

func (u *upstream) lastKey() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		return ""
	}
	return u.last.Get("X-Event-Id")
}

func (u *upstream) lastHeaderGet(name string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		return ""
	}
	return u.last.Get(name)
}

// "Idempotency_Key", which CGI-style upstreams (WSGI, Rack, PHP) read as
// the same HTTP_IDEMPOTENCY_KEY as the key header, never reaches the
// upstream: not on a passthrough, not beside the gateway's own key.
func TestUnderscoreKeyHeaderNeverPasses(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	wantOutcome(t, sendMethod(t, g, "PUT", "/hooks", `{"id":"evt_put"}`, "Idempotency_Key", "evt_victim"), 200, "passthrough")
	for name, v := range up.lastHeader() {
		if strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "Idempotency-Key") {
			t.Errorf("a passthrough carried the sender's %s: %q upstream", name, v)
		}
	}
}
