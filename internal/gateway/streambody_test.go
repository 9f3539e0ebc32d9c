package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A declared Content-Length over body_limit is refused 413 at once, before
// any of the body arrives (README, docs/production.md: "refused 413 at
// once, unread"), and counted on its route, even when the client sends
// only the first bytes of its body and waits for the answer.
func TestDeclaredLengthOverLimitRefusedAtOnce(t *testing.T) {
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "") // body_limit 64KiB
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Server.ReadTimeout = 3 * time.Second
	g := startGateway(t, cfg)
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	fmt.Fprintf(c, "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"id\":\"evt_big\",", 1<<20)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if took := time.Since(start); resp.StatusCode != 413 || resp.Header.Get("Hookstamp-Outcome") != "too_large" || took > time.Second {
		t.Errorf("1 MiB declared over a 64 KiB limit: %d %q after %v, want 413 too_large at once",
			resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), took.Round(time.Millisecond))
	}
	metrics := adminGet(t, g, "/metrics", "")
	if !strings.Contains(metrics, `hookstamp_requests_total{outcome="too_large",route="hooks"} 1`) {
		t.Errorf("the 413 is not counted on its route:\n%s", grepLines(metrics, `outcome="too_large"`))
	}
}

// SIGTERM while a client is still sending a body (past what the server
// prefetches, or chunked and stalled before its first chunk): Run stops
// within shutdown_timeout, as with any delivery in flight
// (docs/production.md, "Rolling restarts").
func TestRunStopsWithinShutdownTimeoutWhileABodyArrives(t *testing.T) {
	for name, partial := range map[string]string{
		"Content-Length": fmt.Sprintf("Content-Length: %d\r\n\r\n", 60<<10) + `{"id":"evt_slow","pad":"` + strings.Repeat("s", 16<<10),
		"chunked":        "Transfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t)
			cfg := gwConfig(t, up.URL, dbPath(t), "", "")
			cfg.Server.ReadTimeout = 30 * time.Second
			cfg.Server.ShutdownTimeout = 300 * time.Millisecond
			g, addr, stopRun := runGateway(t, cfg)
			var c net.Conn
			testenv.Eventually(t, 5*time.Second, "listening", func() bool {
				var err error
				c, err = net.Dial("tcp", addr)
				return err == nil
			})
			defer c.Close()
			_, _ = io.WriteString(c, "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+partial)
			testenv.Eventually(t, 5*time.Second, "the request read", func() bool { _, used := g.server.Conns(); return used == 1 })
			time.Sleep(100 * time.Millisecond)
			stopRun()
		})
	}
}

// SIGTERM while a body past the prefetch is half sent, within
// shutdown_timeout: the body is still read, answered and recorded.
func TestShutdownReadsABodyHalfSentPastThePrefetch(t *testing.T) {
	g, _, half := patientGateway(t)
	body := `{"id":"evt_half","pad":"` + strings.Repeat("h", 40<<10) + `"}`
	req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	cut := len(req) - 10<<10
	_, _ = io.WriteString(half, req[:cut])
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- g.server.Shutdown(ctx) }()
	time.Sleep(300 * time.Millisecond)
	finishHalfSent(t, g, half, req[cut:], "evt_half", shut)
	g.closeAll()
}

// On a kept-alive connection the next request is parsed where it starts,
// whatever the answer before it: a body that is itself a request is never
// served as one.
func TestNextRequestParsedWhereItStarts(t *testing.T) {
	up := newUpstream(t)
	routes := fmt.Sprintf(`  - name: hooks
    path: /hooks
    methods: [POST, PUT]
    upstream:
      url: %[1]s/hooks
    key:
      sources:
        - header: X-Event-Id
        - json: id
  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    upstream:
      url: %[1]s/stripe
    verify:
      secrets: ["${STRIPE_SECRET}"]
`, up.URL)
	g := startGateway(t, routesConfig(t, dbPath(t), "  body_limit: 64KiB\n  read_timeout: 2s", "", routes, []string{"STRIPE_SECRET=" + sigCurrent}))
	smuggled := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_smuggled\r\nContent-Length: 2\r\n\r\n{}"
	pad := func(n int) string { return strings.Repeat(smuggled, n/len(smuggled)+1)[:n] }
	cl := func(method, target, proto, head, body string) string {
		return fmt.Sprintf("%s %s %s\r\nHost: gw\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", method, target, proto, head, len(body), body)
	}
	te := func(target, head, chunks string) string {
		return "POST " + target + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + head + "Transfer-Encoding: chunked\r\n\r\n" + chunks
	}
	for _, c := range []struct {
		name, first string
		closes      bool // the connection ends after the first answer
	}{
		{"404 no route", cl("POST", "/nowhere", "HTTP/1.1", "", smuggled), false},
		{"401 bad signature", cl("POST", "/webhooks/stripe", "HTTP/1.1", "Stripe-Signature: t=1,v1=00\r\n", smuggled), false},
		{"400 missing key", cl("POST", "/hooks", "HTTP/1.1", "", smuggled), false},
		{"GET with a body", cl("GET", "/hooks", "HTTP/1.1", "", smuggled), false},
		{"DELETE with a body", cl("DELETE", "/hooks", "HTTP/1.1", "", smuggled), false},
		{"OPTIONS * with a body", cl("OPTIONS", "*", "HTTP/1.1", "", smuggled), false},
		{"CONNECT with a body", cl("CONNECT", "gw:443", "HTTP/1.1", "", smuggled), false},
		{"absolute URI with a body", cl("POST", "http://gw/nowhere", "HTTP/1.1", "", smuggled), false},
		// Closed: an HTTP/1.0 answer ends its connection, so that a
		// request line without a version is always a connection's first.
		{"HTTP/1.0 keep-alive with a body", cl("POST", "/nowhere", "HTTP/1.0", "Connection: keep-alive\r\n", smuggled), true},
		{"Expect: 100-continue", cl("POST", "/nowhere", "HTTP/1.1", "Expect: 100-continue\r\n", smuggled), false},
		{"Content-Length: 0", cl("POST", "/hooks", "HTTP/1.1", "X-Event-Id: evt_cl0\r\n", ""), false},
		{"32 KiB", cl("POST", "/nowhere", "HTTP/1.1", "", pad(32<<10)), false},
		{"exactly the limit", cl("POST", "/nowhere", "HTTP/1.1", "", pad(64<<10)), false},
		{"chunked, exactly the limit", te("/nowhere", "", chunked(pad(64<<10), 4096)), false},
		// Closed: a folded trailer line misplaces what follows it
		// (TestNothingIsReadBehindAFoldedTrailer).
		{"chunked with trailers", te("/hooks", "X-Event-Id: evt_trailers\r\n", "2\r\n{}\r\n0\r\nX-A: a\r\nX-B: "+smuggled[:20]+"\r\n\r\n"), true},
		{"limit+1", cl("POST", "/hooks", "HTTP/1.1", "", pad(64<<10+1)), true},
		{"chunked, limit+1", te("/hooks", "", chunked(pad(64<<10+1), 4096)), true},
		{"unknown method", cl("FROB", "/hooks", "HTTP/1.1", "", smuggled), true},
		{"431 header too large", cl("POST", "/hooks", "HTTP/1.1", "X-Big: "+strings.Repeat("b", 20<<10)+"\r\n", smuggled), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "evt_next_" + strings.NewReplacer(" ", "_", "/", "_").Replace(c.name)
			next := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: " + key + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
			out := rawExchange(t, g, c.first+next, 6*time.Second)
			if n := up.count("evt_smuggled"); n != 0 {
				t.Fatalf("a body was served as a request (%d times); answers %v", n, statuses(out))
			}
			if want := map[bool]int{false: 1, true: 0}[c.closes]; up.count(key) != want {
				t.Fatalf("the request behind reached the upstream %d times, want %d; answers %v %q", up.count(key), want, statuses(out), outcomeOf(out))
			}
		})
	}
}

// Bodies of many sizes in both framings, on kept-alive connections at once
// (run with -race): each reaches the upstream as sent, and each repeat is
// replayed, not taken for a mismatch, so no fingerprint was taken over a
// pooled buffer another request had refilled.
func TestPooledBodiesStayTheirRequests(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(2 * time.Millisecond)
		sum := sha256.Sum256(b)
		fmt.Fprint(w, hex.EncodeToString(sum[:]))
	}))
	defer up.Close()
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    fingerprint: {mode: body}\n", ""))
	sizes := []int{0, 30, 4 << 10, 5000, 9 << 10, 20 << 10, 60 << 10}
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", g.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := range each {
				key, n := fmt.Sprintf("evt_%d_%d", w, i), sizes[(w+i)%len(sizes)]
				body := strings.Repeat(string(rune('a'+(w+i)%26)), n)
				sum := sha256.Sum256([]byte(body))
				for rep, outcome := range []string{"forwarded", "replayed"} {
					req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nX-Event-Id: %s\r\nContent-Length: %d\r\n\r\n%s", key, n, body)
					if (w+i+rep)%2 == 1 {
						req = fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nX-Event-Id: %s\r\nTransfer-Encoding: chunked\r\n\r\n%s", key, chunked(body, 3000))
					}
					_ = c.SetDeadline(time.Now().Add(20 * time.Second))
					if _, err := io.WriteString(c, req); err != nil {
						errs <- err
						return
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						errs <- fmt.Errorf("%s: %v", key, err)
						return
					}
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != outcome || string(got) != hex.EncodeToString(sum[:]) {
						errs <- fmt.Errorf("%s (%d bytes): %d %q, want 200 %s with the body's digest", key, n, resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), outcome)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
