package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpstream is an upstream that answers every request with resp,
// written verbatim, and closes the connection.
func rawUpstream(tb testing.TB, resp string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, resp)
			}(c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// SPEC §1/§2: a HEAD the route does not deduplicate passes through, and
// its answer is the upstream's. A HEAD answer's Content-Length is the
// length of the body a GET would get (RFC 9110 §8.6); the gateway dropped
// it (fasthttp framed the empty body instead).
func TestHeadPassthroughKeepsUpstreamContentLength(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "{}")
			return
		}
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("Content-Length", "4096")
		w.WriteHeader(http.StatusOK)
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	r := sendMethod(t, g, http.MethodHead, "/hooks", "")
	wantOutcome(t, r, http.StatusOK, "passthrough")
	if got := r.header.Get("Content-Length"); got != "4096" {
		t.Fatalf("HEAD answer Content-Length = %q, want the upstream's 4096; headers %v", got, r.header)
	}
	// The connection still serves the next request (no body was expected).
	wantOutcome(t, send(t, g, "/hooks", `{"id":"after_head"}`), http.StatusOK, "forwarded")
}

// A replay to HEAD declares the Content-Length the upstream declared, as
// the first answer did: it had none, the length of the body a GET would
// get lost with the empty body recorded.
func TestHeadReplayKeepsTheFirstAnswersContentLength(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("Content-Length", "4096")
		w.WriteHeader(http.StatusOK)
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    methods: [POST, HEAD]\n", ""))
	head := func() rawReply {
		t.Helper()
		rs := rawExchange(t, g, "HEAD /hooks HTTP/1.1\r\nHost: gw\r\nX-Event-Id: evt_head\r\nConnection: close\r\n\r\n", 10*time.Second)
		if len(rs) != 1 || len(rs[0].body) != 0 {
			t.Fatalf("HEAD answers %+v, want one, without a body", rs)
		}
		return rs[0]
	}
	first, replay := head(), head()
	if first.status != http.StatusOK || first.reply().outcome() != "forwarded" || replay.status != http.StatusOK || replay.reply().outcome() != "replayed" {
		t.Fatalf("answers %d %v then %d %v, want 200 forwarded then replayed", first.status, first.header, replay.status, replay.header)
	}
	if got, want := replay.header.Values("Content-Length"), first.header.Values("Content-Length"); fmt.Sprint(got) != "[4096]" || fmt.Sprint(want) != "[4096]" {
		t.Fatalf("Content-Length: first answer %v, replay %v; want the upstream's [4096] on both", want, got)
	}
	if n := up.count("evt_head"); n != 1 {
		t.Fatalf("upstream got %d requests, want 1", n)
	}
	if rec := lookup(t, g, "hooks", "evt_head"); rec.Headers["Content-Length"] != "4096" || len(rec.Body) != 0 {
		t.Fatalf("the ledger holds headers %v and a body of %d bytes; want Content-Length 4096 and no body", rec.Headers, len(rec.Body))
	}
}

// A status line whose code is below 100 is no HTTP answer (RFC 9110 §15).
// Passed on, "000" reached the provider as 200 (fasthttp's default for a
// zero status): a success for a delivery the upstream never acknowledged,
// so the provider never retried it; "099" broke the provider's client.
// SPEC §2 released: 502 when the upstream failed.
func TestStatusBelow100IsNoAnswer(t *testing.T) {
	for _, code := range []string{"000", "099"} {
		t.Run(code, func(t *testing.T) {
			u := rawUpstream(t, "HTTP/1.1 "+code+" Odd\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
			g := startGateway(t, gwConfig(t, u, dbPath(t), "", ""))
			req, err := http.NewRequest(http.MethodPost, g.URL()+"/hooks", strings.NewReader(`{"id":"odd"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("the provider could not read the answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Hookstamp-Outcome") != "released" ||
				resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %q %s, want 502 released problem", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), b)
			}
		})
	}
}

// SPEC §4: forwarded requests keep their end-to-end headers. fasthttp
// rebuilt Cookie from its parse: lines merged into one, spaces moved and
// quotes stripped, so the upstream read another cookie value.
func TestCookieLinesForwardedAsSent(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"id":"cookie_1"}`
	fmt.Fprintf(conn, "POST /hooks HTTP/1.1\r\nHost: gw\r\nCookie: sess=\"a b\";theme=dark\r\ncookie: lang=en\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{`sess="a b";theme=dark`, "lang=en"}
	if got := up.lastHeader().Values("Cookie"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("upstream got Cookie %q, want %q as sent", got, want)
	}
}

// A 204 has no body (RFC 9110 §15.3.5), and a server must not send it
// Content-Length or Transfer-Encoding (RFC 9110 §8.6, RFC 9112 §6.1). An
// upstream whose 204 announces a body anyway, and then writes those bytes a
// moment later, left them on the pooled connection for the next delivery:
// the gateway read them as the start of that delivery's answer, called it
// no answer (502 released) although the upstream had processed it and
// answered 200, and the provider's retry reached the upstream a second
// time (SPEC §4: one forward per claim).
func TestBodyAnnouncedOnA204NeverAnswersTheNextDelivery(t *testing.T) {
	bodyAnnouncedNeverAnswersTheNextDelivery(t, http.StatusNoContent, "forwarded", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
}

// A 304 has no body either (RFC 9110 §15.4.5), and one to a delivery (not
// a conditional GET) must not announce any (§8.6): an upstream that
// answers a repeat with "304 Not Modified" and a late body did to the next
// delivery what the 204 above did (the 304 itself is released: not final).
func TestBodyAnnouncedOnA304NeverAnswersTheNextDelivery(t *testing.T) {
	bodyAnnouncedNeverAnswersTheNextDelivery(t, http.StatusNotModified, "released", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n")
}

// bodyAnnouncedNeverAnswersTheNextDelivery delivers evt_first, which the
// upstream answers with head (a status that has no body, announcing one)
// and, a moment later, 5 bytes of body (the provider gets status and
// outcome); then evt_next, which must reach
// the upstream once and be answered with its 200.
func bodyAnnouncedNeverAnswersTheNextDelivery(t *testing.T, status int, outcome, head string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					key := req.Header.Get("Idempotency-Key")
					mu.Lock()
					seen[key]++
					mu.Unlock()
					if key != "evt_first" {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
						continue
					}
					// The announced body, late: after the gateway has
					// answered the provider and pooled the connection.
					_, _ = io.WriteString(c, head)
					time.Sleep(300 * time.Millisecond)
					_, _ = io.WriteString(c, "hello")
				}
			})
		}
	})
	count := func(key string) int { mu.Lock(); defer mu.Unlock(); return seen[key] }
	g := startGateway(t, gwConfig(t, "http://"+ln.Addr().String(), dbPath(t), "", ""))

	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_first"}`), status, outcome)
	first := send(t, g, "/hooks", `{"id":"evt_next"}`)
	retry := send(t, g, "/hooks", `{"id":"evt_next"}`)
	if n := count("evt_next"); n != 1 || first.status != http.StatusOK || first.outcome() != "forwarded" {
		t.Fatalf("delivery after the %d: %d %q %s, upstream got it %d times; want 200 forwarded, once",
			status, first.status, first.outcome(), first.body, n)
	}
	wantOutcome(t, retry, http.StatusOK, "replayed")
}
