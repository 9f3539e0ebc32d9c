package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func TestRepeatIsReplayedByteForByte(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))

		first := send(t, g, "/hooks", `{"id":"evt_1","amount":42}`)
		wantOutcome(t, first, 200, "forwarded")
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first delivery marked as replayed")
		}
		for i := 0; i < 2; i++ {
			again := send(t, g, "/hooks", `{"id":"evt_1","amount":42}`)
			wantOutcome(t, again, 200, "replayed")
			if again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat lacks Idempotent-Replayed: true: %v", again.header)
			}
			sameReply(t, first, again)
		}
		if n := up.count("evt_1"); n != 1 {
			t.Fatalf("upstream received evt_1 %d times, want 1", n)
		}
		if got := up.lastHeader().Get("Idempotency-Key"); got != "evt_1" {
			t.Fatalf("upstream Idempotency-Key = %q", got)
		}
		rec := lookup(t, g, "hooks", "evt_1")
		if rec.State != idempotency.StateDone || rec.Status != 200 || string(rec.Body) != string(first.body) ||
			rec.Headers["Content-Type"] != "application/json" || len(rec.Fingerprint) != 32 {
			t.Fatalf("ledger row = %+v", rec)
		}
		if _, kept := rec.Headers["X-Upstream-Seq"]; kept {
			t.Fatalf("header not listed in record.headers was recorded")
		}
	})
}

func TestConcurrentIdenticalDeliveriesWaitMode(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(300 * time.Millisecond) // keep the first in flight while the rest arrive
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"n":%d}`, n)
		})
		g := startGateway(t, s.config(t, up.URL, "    wait_timeout: 10s", ""))

		replies := race(t, 100, func(int) reply { return send(t, g, "/hooks", `{"id":"evt_c"}`) })
		if n := up.count("evt_c"); n != 1 {
			t.Fatalf("upstream received %d forwards, want exactly 1", n)
		}
		outcomes := map[string]int{}
		for _, r := range replies {
			outcomes[r.outcome()]++
			sameReply(t, replies[0], r)
			if r.status != 200 {
				t.Fatalf("status %d, want 200 for every delivery", r.status)
			}
		}
		if outcomes["forwarded"] != 1 || outcomes["replayed"] != 99 {
			t.Fatalf("outcomes %v, want 1 forwarded and 99 replayed", outcomes)
		}
	})
}

func TestConcurrentIdenticalDeliveriesRejectMode(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up, release := heldUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "    inflight: reject", ""))

		var first reply
		done := make(chan struct{})
		go func() { first = send(t, g, "/hooks", `{"id":"evt_r"}`); close(done) }()
		testenv.Eventually(t, 5*time.Second, "first delivery in flight upstream", func() bool { return up.total.Load() == 1 })

		replies := race(t, 99, func(int) reply { return send(t, g, "/hooks", `{"id":"evt_r"}`) })
		for _, r := range replies {
			wantOutcome(t, r, 409, "conflict")
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("409 without Retry-After")
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("conflict Content-Type %q", ct)
			}
		}
		close(release)
		<-done
		wantOutcome(t, first, 200, "forwarded")
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_r"}`), 200, "replayed")
		if n := up.count("evt_r"); n != 1 {
			t.Fatalf("upstream received %d forwards, want 1", n)
		}
	})
}

func TestKeyReuseWithDifferentBodyIsMismatch(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_m","amount":1}`), 200, "forwarded")
		r := send(t, g, "/hooks", `{"id":"evt_m","amount":1000}`)
		wantOutcome(t, r, 422, "mismatch")
		if !strings.Contains(string(r.body), `"outcome":"mismatch"`) {
			t.Fatalf("problem body %s", r.body)
		}
		if n := up.count("evt_m"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
		if rec := lookup(t, g, "hooks", "evt_m"); !strings.Contains(string(rec.Body), `"len":25`) {
			t.Fatalf("ledger holds %s, want the first delivery's answer", rec.Body)
		}
	})
}

// fingerprint.on_mismatch: replay answers a reused key with a different
// body with the first delivery's recorded answer instead of 422.
func TestKeyReuseWithDifferentBodyReplaysOnMismatchReplay(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    fingerprint: {on_mismatch: replay}\n", ""))
	first := send(t, g, "/hooks", `{"id":"evt_mr","amount":1}`)
	wantOutcome(t, first, 200, "forwarded")
	r := send(t, g, "/hooks", `{"id":"evt_mr","amount":1000}`)
	wantOutcome(t, r, 200, "replayed")
	if string(r.body) != string(first.body) {
		t.Fatalf("replayed %s, want the first answer %s", r.body, first.body)
	}
	if n := up.count("evt_mr"); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		t.Run("required", func(t *testing.T) {
			g := startGateway(t, s.config(t, up.URL, "", ""))
			r := send(t, g, "/hooks", `{"no_id":true}`)
			wantOutcome(t, r, 400, "missing_key")
			if up.total.Load() != 0 {
				t.Fatalf("forwarded a delivery without key")
			}
			r = send(t, g, "/hooks", `{"id": "unterminated`)
			wantOutcome(t, r, 400, "missing_key")
			if !strings.Contains(string(r.body), "not valid JSON") {
				t.Fatalf("malformed JSON not explained: %s", r.body)
			}
		})
		t.Run("optional", func(t *testing.T) {
			cfg := s.config(t, up.URL, "", "")
			cfg.Routes[0].Key.Required = false
			g2 := startGateway(t, cfg)
			before := up.total.Load()
			for i := 0; i < 2; i++ {
				wantOutcome(t, send(t, g2, "/hooks", `{"no_id":true}`), 200, "passthrough")
			}
			if got := up.total.Load() - before; got != 2 {
				t.Fatalf("optional key: upstream got %d, want 2 (no dedup without key)", got)
			}
		})
	})
}

func TestNonFinalThenFinal(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, "busy")
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "ok %d", n)
		})
		g := startGateway(t, s.config(t, up.URL, "", ""))
		r := send(t, g, "/hooks", `{"id":"evt_5"}`)
		wantOutcome(t, r, 503, "released")
		if string(r.body) != "busy" {
			t.Fatalf("released answer should be the upstream's, got %q", r.body)
		}
		if _, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_5"}); err == nil {
			t.Fatalf("a non-final answer was recorded")
		}
		second := send(t, g, "/hooks", `{"id":"evt_5"}`)
		wantOutcome(t, second, 200, "forwarded")
		third := send(t, g, "/hooks", `{"id":"evt_5"}`)
		wantOutcome(t, third, 200, "replayed")
		sameReply(t, second, third)
		if n := up.count("evt_5"); n != 2 {
			t.Fatalf("upstream received %d, want 2", n)
		}
	})
}

func TestUpstreamTimeoutIsReleased(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				time.Sleep(1500 * time.Millisecond)
			}
			fmt.Fprintf(w, "ok %d", n)
		})
		cfg := s.config(t, up.URL, "", "")
		cfg.Routes[0].Upstream.Timeout = 300 * time.Millisecond
		g := startGateway(t, cfg)
		r := send(t, g, "/hooks", `{"id":"evt_t"}`)
		wantOutcome(t, r, 504, "released")
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("504 Content-Type %q", ct)
		}
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_t"}`), 200, "forwarded")
		if n := up.count("evt_t"); n != 2 {
			t.Fatalf("upstream received %d, want 2 (the retry is forwarded)", n)
		}
	})
}

func TestUpstreamUnreachableIsReleased(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		url := up.URL
		up.Close()
		g := startGateway(t, s.config(t, url, "", ""))
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_u"}`), 502, "released")
		if _, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_u"}); err == nil {
			t.Fatalf("an unreachable upstream was recorded")
		}
	})
}

// A restarted gateway (or another replica) on the same ledger replays what
// the first one recorded.
func TestRestartOnSameLedgerStillReplays(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g1 := startGateway(t, s.config(t, up.URL, "", ""))
		first := send(t, g1, "/hooks", `{"id":"evt_restart"}`)
		wantOutcome(t, first, 200, "forwarded")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g1.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}

		g2 := startGateway(t, s.config(t, up.URL, "", ""))
		again := send(t, g2, "/hooks", `{"id":"evt_restart"}`)
		wantOutcome(t, again, 200, "replayed")
		sameReply(t, first, again)
		if n := up.count("evt_restart"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
	})
}

// A claim whose owner died (here: a pending ledger row nobody will settle)
// is taken over once its lease expires, and the upstream sees the key once.
func TestAbandonedClaimIsTakenOverAfterLease(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		cfg := s.config(t, up.URL, "    wait_timeout: 10s", `screen:
  driver: none
  lease: 3s
  local_cache: 0`)
		cfg.Routes[0].Upstream.Timeout = 500 * time.Millisecond
		g := startGateway(t, cfg)
		ref := idempotency.Ref{Route: "hooks", Key: "evt_dead"}
		c, err := g.Ledger().Claim(context.Background(), idempotency.ClaimRequest{
			Ref: ref, Owner: "dead-replica", Lease: time.Second, Retention: time.Hour}, time.Now())
		if err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("seed claim: %v %v", c.Status, err)
		}
		start := time.Now()
		r := send(t, g, "/hooks", `{"id":"evt_dead"}`)
		wantOutcome(t, r, 200, "forwarded")
		if waited := time.Since(start); waited < 500*time.Millisecond {
			t.Fatalf("took over after %v, before the lease expired", waited)
		}
		if n := up.count("evt_dead"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
		if rec := lookup(t, g, "hooks", "evt_dead"); rec.State != idempotency.StateDone {
			t.Fatalf("ledger state %s after takeover", rec.State)
		}
	})
}

func TestHostileKeyNeverReachesAHeader(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		for _, body := range []string{
			`{"id":"evt\r\nSet-Cookie: stolen=1"}`,
			`{"id":"evt\u0000nul"}`,
			`{"id":"` + strings.Repeat("k", 300) + `"}`,
		} {
			r := send(t, g, "/hooks", body)
			wantOutcome(t, r, 400, "invalid_key")
			if r.header.Get("Set-Cookie") != "" {
				t.Fatalf("injected header reached the response")
			}
			for name, vals := range r.header {
				for _, v := range vals {
					if strings.Contains(v, "evt") || strings.Contains(name, "Cookie") {
						t.Fatalf("key bytes echoed in header %s: %q", name, v)
					}
				}
			}
			if strings.Contains(string(r.body), "stolen") || strings.Contains(string(r.body), "\x00") {
				t.Fatalf("key bytes echoed in the problem body: %s", r.body)
			}
		}
		// Invalid UTF-8 through a header source, on the wire.
		r := rawPost(t, g, "/hooks", "X-Event-Id: evt\xff\xfe\r\n", `{}`)
		if !strings.HasPrefix(r, "HTTP/1.1 400") || !strings.Contains(r, "Hookstamp-Outcome: invalid_key") {
			t.Fatalf("invalid UTF-8 key: %q", r)
		}
		if up.total.Load() != 0 {
			t.Fatalf("hostile keys were forwarded %d times", up.total.Load())
		}
	})
}

func TestBodyOverLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 70<<10) + `"}`
		// The gateway answers 413 and closes as soon as it knows, possibly
		// before the body is written: write it from the side and read the
		// answer, or the client sees a reset instead of the 413.
		honest := "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big))
		head, body := oversized(t, g, honest, func(w io.Writer) error {
			_, err := io.WriteString(w, big)
			return err
		})
		if !strings.HasPrefix(head, "HTTP/1.1 413") || !strings.Contains(head, "Hookstamp-Outcome: too_large") ||
			!strings.Contains(head, "Content-Type: application/problem+json") || !strings.Contains(body, `"outcome":"too_large"`) {
			t.Fatalf("oversized body: %q %q", head, body)
		}
		// Chunked, no Content-Length: the limit holds while streaming.
		chunked := "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
		head, _ = oversized(t, g, chunked, func(w io.Writer) error {
			for i := 0; i < len(big); i += 4096 {
				chunk := big[i:min(i+4096, len(big))]
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return err
				}
			}
			_, err := io.WriteString(w, "0\r\n\r\n")
			return err
		})
		if !strings.HasPrefix(head, "HTTP/1.1 413") {
			t.Fatalf("chunked oversized body: %q, want 413", head)
		}
		if up.total.Load() != 0 {
			t.Fatalf("an oversized body was forwarded")
		}
	})
}

// A chunked body over the limit is counted on its route like any other
// 413, also after many chunked deliveries that went through (fasthttp,
// reading such a body itself, reset the request before its error handler
// ran, and the gateway kept a bounded set of notes to name its route).
func TestOversizedChunkedBodyCountedOnItsRoute(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Admin.Listen = "127.0.0.1:0"
	g := startGateway(t, cfg)
	const through = 300 // more than the notes held at once
	for i := range through {
		// A reader of unknown length: net/http sends it chunked.
		body := io.MultiReader(strings.NewReader(fmt.Sprintf(`{"id":"evt_chunked_%d"}`, i)))
		resp, err := client.Post("http://"+g.Addr()+"/hooks", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != "forwarded" {
			t.Fatalf("chunked delivery %d: %d %s", i, resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
		}
	}
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 70<<10) + `"}`
	head, _ := oversized(t, g, "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
		func(w io.Writer) error {
			_, err := io.WriteString(w, chunked(big, 4096))
			return err
		})
	if !strings.HasPrefix(head, "HTTP/1.1 413") || !strings.Contains(head, "Hookstamp-Outcome: too_large") {
		t.Fatalf("chunked oversized body: %q", head)
	}
	metrics := adminGet(t, g, "/metrics", "")
	if !strings.Contains(metrics, `hookstamp_requests_total{outcome="too_large",route="hooks"} 1`) ||
		!strings.Contains(metrics, fmt.Sprintf(`hookstamp_requests_total{outcome="forwarded",route="hooks"} %d`, through)) {
		t.Fatalf("the chunked 413 is not counted on its route:\n%s", grepLines(metrics, "hookstamp_requests_total"))
	}
	if n := up.total.Load(); n != through {
		t.Fatalf("upstream received %d, want %d", n, through)
	}
}

// Chunked requests racing on many connections, some over the limit on
// one route while the others go through on another: every 413 is counted
// on the route it was sent to, and nothing else is.
func TestChunkedOverflowsRacingAcrossRoutes(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	route := func(name string) string {
		return fmt.Sprintf(`
  - name: %[1]s
    path: /%[1]s
    upstream:
      url: %[2]s/up
      timeout: 2s
    key:
      sources:
        - json: id`, name, up.URL)
	}
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
  body_limit: 64KiB
admin:
  listen: "127.0.0.1:0"
store:
  driver: sqlite
  dsn: %q
routes:%s%s
`, dbPath(t), route("big"), route("small"))
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	g := startGateway(t, cfg)
	big := chunked(`{"id":"evt_big","pad":"`+strings.Repeat("x", 70<<10)+`"}`, 4096)
	const workers, each = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if w%2 == 0 {
					head, _, err := sendOversized(g, "POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
						func(wr io.Writer) error { _, err := io.WriteString(wr, big); return err })
					if err != nil {
						errs <- err
					} else if !strings.HasPrefix(head, "HTTP/1.1 413") {
						errs <- fmt.Errorf("oversized chunked body: %q", head)
					}
					continue
				}
				body := io.MultiReader(strings.NewReader(fmt.Sprintf(`{"id":"evt_%d_%d"}`, w, i)))
				resp, err := client.Post("http://"+g.Addr()+"/small", "application/json", body)
				if err != nil {
					errs <- err
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("chunked delivery: %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := workers / 2 * each
	metrics := adminGet(t, g, "/metrics", "")
	for _, want := range []string{
		fmt.Sprintf(`hookstamp_requests_total{outcome="too_large",route="big"} %d`, n),
		fmt.Sprintf(`hookstamp_requests_total{outcome="forwarded",route="small"} %d`, n),
		`hookstamp_requests_total{outcome="too_large",route="small"} 0`,
		`hookstamp_requests_total{outcome="forwarded",route="big"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "hookstamp_requests_total"))
		}
	}
	if got := up.total.Load(); got != int64(n) {
		t.Errorf("upstream received %d, want %d", got, n)
	}
}

func TestUnknownPathAndPassthroughMethod(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		r := send(t, g, "/nowhere", `{"id":"x"}`)
		if r.status != 404 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("unknown path: %d %s", r.status, r.body)
		}
		req, _ := http.NewRequest(http.MethodGet, g.URL()+"/hooks?probe=1", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != "passthrough" {
			t.Fatalf("GET on a POST route: %d %q", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
		}
		if up.total.Load() != 1 {
			t.Fatalf("passthrough forwarded %d times", up.total.Load())
		}
	})
}

// Two routes on one path with different methods (SPEC §1: routes are
// matched by path and method): each deduplicates its own method and
// forwards to its own upstream.
func TestRoutesSharingAPathSplitByMethod(t *testing.T) {
	t.Parallel()
	upA, upB := newUpstream(t), newUpstream(t)
	cfg := gwConfig(t, upA.URL, dbPath(t), "    methods: [POST]\n", "")
	b := cfg.Routes[0]
	b.Name, b.Methods, b.Upstream.URL = "puts", []string{"PUT"}, upB.URL+"/b"
	cfg.Routes = append(cfg.Routes, b)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("two routes on one path with different methods refused: %v", err)
	}
	g := startGateway(t, cfg)
	for _, m := range []string{http.MethodPost, http.MethodPut} {
		wantOutcome(t, sendMethod(t, g, m, "/hooks", `{"id":"evt_m"}`), 200, "forwarded")
		wantOutcome(t, sendMethod(t, g, m, "/hooks", `{"id":"evt_m"}`), 200, "replayed")
	}
	if a, b := upA.count("evt_m"), upB.count("evt_m"); a != 1 || b != 1 {
		t.Fatalf("upstreams received POST route %d, PUT route %d; want 1 each", a, b)
	}
	for route, want := range map[string]string{"hooks": "evt_m", "puts": "evt_m"} {
		if rec := lookup(t, g, route, want); rec.State != idempotency.StateDone {
			t.Fatalf("route %s: %+v", route, rec)
		}
	}
}

// X-Forwarded-For and X-Forwarded-Proto are the gateway's word: a sender's
// own values are believed only from server.trusted_proxies.
func TestForwardedHeadersBelieveOnlyTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, trusted, xff, wantFor, wantProto string
	}{
		{"untrusted peer", "", "203.0.113.7", "127.0.0.1", "http"},
		{"trusted proxy", "127.0.0.1/32", "203.0.113.7", "203.0.113.7", "https"},
		// Some proxies (Azure Application Gateway) write ip:port.
		{"trusted proxy writing ports", "127.0.0.1/32", "203.0.113.7:52011", "203.0.113.7", "https"},
		{"trusted proxy writing IPv6 and port", "127.0.0.1/32", "[2001:db8::7]:52011", "2001:db8::7", "https"},
		// A single IP is what `gateway check` accepts, so it must serve.
		{"trusted proxy as a single IP", "127.0.0.1", "203.0.113.7", "203.0.113.7", "https"},
		{"trusted proxy as an IPv4-mapped IP", "::ffff:127.0.0.1", "203.0.113.7", "203.0.113.7", "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t)
			cfg := gwConfig(t, up.URL, dbPath(t), "", "")
			if tc.trusted != "" {
				cfg.Server.TrustedProxies = []string{tc.trusted}
			}
			g := startGateway(t, cfg)
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_xf"}`,
				"X-Forwarded-For", tc.xff, "X-Forwarded-Proto", "https"), 200, "forwarded")
			h := up.lastHeader()
			if got := h.Get("X-Forwarded-For"); got != tc.wantFor {
				t.Errorf("upstream X-Forwarded-For %q, want %q", got, tc.wantFor)
			}
			if got := h.Get("X-Forwarded-Proto"); got != tc.wantProto {
				t.Errorf("upstream X-Forwarded-Proto %q, want %q", got, tc.wantProto)
			}
		})
	}
}

// A proxy that adds its own X-Forwarded-For line (HAProxy's option
// forwardfor) rather than appending to the sender's leaves two lines; they
// are one list (RFC 9110 §5.3), and the entry a trusted proxy wrote is the
// last one. Reading the first line alone would believe the sender's own
// claim.
func TestForwardedForReadsEveryLine(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
	g := startGateway(t, cfg)
	// The sender's forged line first, then the line the trusted proxy added.
	wantOutcome(t, post(t, g, "/hooks", []byte(`{"id":"evt_xff_lines"}`),
		headers("X-Forwarded-For", "198.51.100.66", "X-Forwarded-For", "203.0.113.7")), 200, "forwarded")
	if got := up.lastHeader().Get("X-Forwarded-For"); got != "203.0.113.7" {
		t.Fatalf("upstream X-Forwarded-For %q, want 203.0.113.7 (the entry the trusted proxy wrote)", got)
	}
}

// X-Forwarded-Proto as X-Forwarded-For: a trusted proxy that adds a line
// of its own (HAProxy http-request add-header) rather than replacing the
// sender's puts its word last. Reading the first line alone believes the
// sender's claim that a plain-HTTP request came over TLS.
func TestForwardedProtoReadsTheLastLine(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
	g := startGateway(t, cfg)
	// The sender's forged line first, then the line the trusted proxy added.
	wantOutcome(t, post(t, g, "/hooks", []byte(`{"id":"evt_xfp_lines"}`),
		headers("X-Forwarded-Proto", "https", "X-Forwarded-Proto", "http")), 200, "forwarded")
	if got := up.lastHeader().Get("X-Forwarded-Proto"); got != "http" {
		t.Fatalf("upstream X-Forwarded-Proto %q, want http (the line the trusted proxy wrote)", got)
	}
}

func TestPrefixRouteForwardsRestOfPath(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		var gotPath string
		var mu sync.Mutex
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			mu.Lock()
			gotPath = r.URL.RequestURI()
			mu.Unlock()
			fmt.Fprint(w, "ok")
		})
		cfg := s.config(t, up.URL, "", "")
		cfg.Routes[0].Path = "/hooks/*"
		g := startGateway(t, cfg)
		for i, tc := range []struct{ path, want string }{
			{"/hooks/shop/a%20b?x=1", "/up/shop/a%20b?x=1"},
			// An escaped slash is part of a segment, not a separator.
			{"/hooks/files/a%2Fb", "/up/files/a%2Fb"},
			// Dot segments are resolved before matching; the upstream
			// gets the path that was matched.
			{"/hooks/x/../shop/c", "/up/shop/c"},
		} {
			wantOutcome(t, send(t, g, tc.path, fmt.Sprintf(`{"id":"p%d"}`, i)), 200, "forwarded")
			mu.Lock()
			got := gotPath
			mu.Unlock()
			if got != tc.want {
				t.Fatalf("%s: upstream path %q, want %q", tc.path, got, tc.want)
			}
		}
	})
}

// race runs n calls of f at once and returns their results.
func race(tb testing.TB, n int, f func(i int) reply) []reply {
	tb.Helper()
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			out[i] = f(i)
		}(i)
	}
	close(start)
	wg.Wait()
	return out
}

// rawPost writes a request by hand (for bytes net/http refuses to send)
// and returns the raw response head.
func rawPost(tb testing.TB, g *Gateway, path, extraHeaders, body string) string {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, extraHeaders, len(body), body)
	var sb strings.Builder
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		sb.WriteString(line)
		if err != nil || line == "\r\n" {
			break
		}
	}
	return sb.String()
}

// oversized sends head, then writes the body from the side while it reads
// the answer: the response head and body.
func oversized(tb testing.TB, g *Gateway, head string, writeBody func(io.Writer) error) (string, string) {
	tb.Helper()
	h, b, err := sendOversized(g, head, writeBody)
	if err != nil {
		tb.Fatal(err)
	}
	return h, b
}

// sendOversized is oversized for goroutines other than the test's.
func sendOversized(g *Gateway, head string, writeBody func(io.Writer) error) (string, string, error) {
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		if _, err := io.WriteString(conn, head); err == nil {
			_ = writeBody(conn)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", "", fmt.Errorf("reading the answer to an oversized body: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sb strings.Builder
	fmt.Fprintf(&sb, "HTTP/1.1 %s\r\n", resp.Status)
	_ = resp.Header.Write(&sb)
	return sb.String(), string(b), nil
}
