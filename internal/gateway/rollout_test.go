package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Shadow mode forwards every repeat and counts it as shadowed; the records
// it made are used from the first enforced delivery on.
func TestShadowModeThenEnforce(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	scfg := gwConfig(t, up.URL, db, "    mode: shadow\n    source: header:X-Sender", "")
	scfg.Admin.Listen, scfg.Admin.Token = "127.0.0.1:0", "shadow-admin-token"
	shadow := startGateway(t, scfg)
	first := send(t, shadow, "/hooks", `{"id":"evt_s"}`, "X-Sender", "acme")
	wantOutcome(t, first, 200, "forwarded")
	for i := 0; i < 2; i++ {
		r := send(t, shadow, "/hooks", `{"id":"evt_s"}`, "X-Sender", "acme")
		wantOutcome(t, r, 200, "shadowed")
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("shadowed repeat marked as replayed")
		}
	}
	// A key reused with another body is forwarded too in shadow mode.
	wantOutcome(t, send(t, shadow, "/hooks", `{"id":"evt_s","other":1}`, "X-Sender", "acme"), 200, "shadowed")
	if n := up.count("evt_s"); n != 4 {
		t.Fatalf("shadow mode: upstream received %d, want 4 (every delivery)", n)
	}
	// Would-be duplicates are counted: in the metrics and in the stats.
	metrics := adminGet(t, shadow, "/metrics", "")
	if !strings.Contains(metrics, `hookstamp_duplicates_total{route="hooks",source="acme"} 3`) ||
		!strings.Contains(metrics, `hookstamp_requests_total{outcome="shadowed",route="hooks"} 3`) {
		t.Fatalf("shadowed repeats not counted in /metrics:\n%s", grepLines(metrics, "hookstamp_duplicates_total", "shadowed"))
	}
	stats := adminGet(t, shadow, "/admin/stats?window=1h", "shadow-admin-token")
	if !strings.Contains(stats, `"top_keys":[{"key":"evt_s","count":3}]`) || !strings.Contains(stats, `"shadowed":3`) {
		t.Fatalf("shadowed repeats not in /admin/stats: %s", stats)
	}
	rec := lookup(t, shadow, "hooks", "evt_s")
	if !bytes.Equal(rec.Body, first.body) {
		t.Fatalf("the record is the first delivery's answer: got %s", rec.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shadow.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	enforce := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	r := send(t, enforce, "/hooks", `{"id":"evt_s"}`)
	wantOutcome(t, r, 200, "replayed")
	sameReply(t, first, r)
	if n := up.count("evt_s"); n != 4 {
		t.Fatalf("enforce after shadow forwarded again (%d)", n)
	}
}

// record.ambiguous: hold keeps a key whose upstream gave no answer; every
// repeat gets 409 held, also after a restart.
func TestHoldOnAmbiguousTimeout(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(time.Second)
		fmt.Fprint(w, "late")
	})
	db := dbPath(t)
	hold := func() *Gateway {
		cfg := gwConfig(t, up.URL, db, "    record:\n      ambiguous: hold", "")
		cfg.Routes[0].Upstream.Timeout = 200 * time.Millisecond
		return startGateway(t, cfg)
	}
	g := hold()
	r := send(t, g, "/hooks", `{"id":"evt_h"}`)
	wantOutcome(t, r, 504, "held")
	for i := 0; i < 2; i++ {
		r := send(t, g, "/hooks", `{"id":"evt_h"}`)
		wantOutcome(t, r, 409, "held")
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("held repeat without Retry-After")
		}
	}
	if rec := lookup(t, g, "hooks", "evt_h"); rec.State != idempotency.StateHeld {
		t.Fatalf("ledger state %q, want held", rec.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := hold()
	wantOutcome(t, send(t, g2, "/hooks", `{"id":"evt_h"}`), 409, "held")
	if n := up.count("evt_h"); n != 1 {
		t.Fatalf("held key forwarded %d times, want 1", n)
	}
}

// With the default (release), the same timeout releases the key and the
// retry is forwarded: hold mode must not change that.
func TestReleaseModeUnchangedByHold(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			time.Sleep(time.Second)
		}
		fmt.Fprint(w, "ok")
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Routes[0].Upstream.Timeout = 200 * time.Millisecond
	g := startGateway(t, cfg)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_rel"}`), 504, "released")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_rel"}`), 200, "forwarded")
}

// A refused connection sent nothing: never held, even in hold mode.
func TestHoldNeverHoldsWhatWasNotSent(t *testing.T) {
	up := newUpstream(t)
	url := up.URL
	up.Close()
	g := startGateway(t, gwConfig(t, url, dbPath(t), "    record:\n      ambiguous: hold", ""))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_refused"}`), 502, "released")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_refused"}`), 502, "released")
}

// An upstream that switches protocols (101, never asked for: Upgrade is
// hop-by-hop and not forwarded) gave the delivery no final answer, like a
// malformed response or a cut connection after sending: on a hold route
// the key is held (502) and the retry is not forwarded; a 101 is never
// passed on to the provider as the answer.
func TestHoldOnUnsolicitedSwitchingProtocols(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		time.Sleep(100 * time.Millisecond)
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    record:\n      ambiguous: hold", ""))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_101"}`), 502, "held")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_101"}`), 409, "held")
	if n := up.count("evt_101"); n != 1 {
		t.Fatalf("upstream received %d copies on a hold route, want 1", n)
	}
}

// Two replicas sharing Redis and PostgreSQL agree on a held key.
func TestHoldAcrossReplicas(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(time.Second)
	})
	dsn := testenv.Postgres(t)
	addr, prefix := testenv.RedisPrefix(t)
	top := fmt.Sprintf("screen:\n  driver: redis\n  prefix: %q\n  redis:\n    addrs: [%q]\n", prefix, addr)
	replica := func() *Gateway {
		cfg := gwConfig(t, up.URL, "unused", "    record:\n      ambiguous: hold", top)
		cfg.Store.Driver, cfg.Store.DSN = "postgres", dsn
		cfg.Routes[0].Upstream.Timeout = 200 * time.Millisecond
		return startGateway(t, cfg)
	}
	a, b := replica(), replica()
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_hr"}`), 504, "held")
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_hr"}`), 409, "held")
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_hr"}`), 409, "held")
	if n := up.count("evt_hr"); n != 1 {
		t.Fatalf("held key forwarded %d times across replicas", n)
	}
}

// Dedup protection never depends on response size.
func TestLargeResponses(t *testing.T) {
	big := bytes.Repeat([]byte("z"), 2<<20)
	mid := bytes.Repeat([]byte("m"), 100<<10)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Header.Get("Idempotency-Key") == "evt_big" {
			_, _ = w.Write(big)
			return
		}
		_, _ = w.Write(mid)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "    record:\n      max_body: 1MiB", `screen:
  driver: memory
  max_cached_body: 64KiB
  local_cache: 0`)
	g := startGateway(t, cfg)

	first := send(t, g, "/hooks", `{"id":"evt_big"}`)
	wantOutcome(t, first, 200, "forwarded")
	if !bytes.Equal(first.body, big) {
		t.Fatalf("first answer carries %d bytes, want the upstream's 2 MiB", len(first.body))
	}
	r := send(t, g, "/hooks", `{"id":"evt_big"}`)
	wantOutcome(t, r, 200, "replayed")
	if len(r.body) != 0 || r.header.Get("Hookstamp-Body-Omitted") != "true" ||
		r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("oversized replay: %d bytes, headers %v", len(r.body), r.header)
	}
	if rec := lookup(t, g, "hooks", "evt_big"); !rec.BodyOmitted || len(rec.Body) != 0 {
		t.Fatalf("ledger row for the oversized answer: omitted=%v body=%d", rec.BodyOmitted, len(rec.Body))
	}

	// 100 KiB: over the screen's max_cached_body, replayed from the ledger.
	m1 := send(t, g, "/hooks", `{"id":"evt_mid"}`)
	m2 := send(t, g, "/hooks", `{"id":"evt_mid"}`)
	wantOutcome(t, m2, 200, "replayed")
	if !bytes.Equal(m2.body, mid) || !bytes.Equal(m1.body, m2.body) {
		t.Fatalf("100 KiB replay differs (%d bytes)", len(m2.body))
	}
	if up.count("evt_big") != 1 || up.count("evt_mid") != 1 {
		t.Fatalf("large responses weakened dedup: big %d, mid %d", up.count("evt_big"), up.count("evt_mid"))
	}
}

// A record.max_body above the forwarder's default 10 MiB is read whole:
// the forwarder stopped at 10 MiB, so an 11 MiB answer went out empty
// with Hookstamp-Body-Omitted even on the first delivery, and was
// recorded without its body.
func TestMaxBodyAboveTenMiBIsReadWhole(t *testing.T) {
	huge := bytes.Repeat([]byte("h"), 11<<20)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(huge)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "    record:\n      max_body: 20MiB", "")
	cfg.Routes[0].Upstream.Timeout = 20 * time.Second // 11 MiB each way, on a shared machine
	g := startGateway(t, cfg)

	first := send(t, g, "/hooks", `{"id":"evt_huge"}`)
	wantOutcome(t, first, 200, "forwarded")
	replay := send(t, g, "/hooks", `{"id":"evt_huge"}`)
	wantOutcome(t, replay, 200, "replayed")
	for _, r := range []reply{first, replay} {
		if !bytes.Equal(r.body, huge) || r.header.Get("Hookstamp-Body-Omitted") != "" {
			t.Fatalf("%s answer: %d bytes, Hookstamp-Body-Omitted %q; want the upstream's 11 MiB", r.outcome(), len(r.body), r.header.Get("Hookstamp-Body-Omitted"))
		}
	}
	if rec := lookup(t, g, "hooks", "evt_huge"); rec.BodyOmitted || !bytes.Equal(rec.Body, huge) {
		t.Fatalf("the ledger holds %d bytes (omitted %v), want the 11 MiB answer", len(rec.Body), rec.BodyOmitted)
	}
	if n := up.count("evt_huge"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
}

func TestSetCookieNeverReplayed(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "ok")
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	send(t, g, "/hooks", `{"id":"evt_cookie"}`)
	r := send(t, g, "/hooks", `{"id":"evt_cookie"}`)
	wantOutcome(t, r, 200, "replayed")
	if r.header.Get("Set-Cookie") != "" {
		t.Fatalf("replay set a cookie")
	}
	if !strings.Contains(strings.Join(r.header.Values("Content-Type"), ""), "text/plain") {
		t.Fatalf("replay lost its Content-Type")
	}
}

// A compressed answer replays with its Content-Encoding. An upstream
// compresses for a provider whose client asks it to (Go's net/http sends
// Accept-Encoding: gzip by default); with the default record.headers
// ([Content-Type]) the record kept the gzip bytes but not the header that
// says what they are, so the first delivery's client read the JSON and the
// replay's got a gzip blob as its body.
func TestCompressedAnswerReplaysWithItsEncoding(t *testing.T) {
	const answer = `{"received":true}`
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(w, answer)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, answer)
		_ = zw.Close()
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))

	// client's Transport asks for gzip and decodes what is marked as such.
	first := send(t, g, "/hooks", `{"id":"evt_gz"}`)
	wantOutcome(t, first, 200, "forwarded")
	if string(first.body) != answer {
		t.Fatalf("first answer %q, want %q", first.body, answer)
	}
	again := send(t, g, "/hooks", `{"id":"evt_gz"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_gz"); n != 1 {
		t.Fatalf("upstream received evt_gz %d times, want 1", n)
	}
}

// adminGet reads an admin-listener path, with a bearer token when given.
func adminGet(tb testing.TB, g *Gateway, path, token string) string {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		tb.Fatalf("admin %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// SPEC §3 record.max_body: "larger bodies: recorded without body,
// replayed with status and headers and `Hookstamp-Body-Omitted: true`";
// §4: "A record whose body exceeded record.max_body replays with its
// status and kept headers, an empty body and Hookstamp-Body-Omitted:
// true". With `max_body: 0` every non-empty body is larger: none is
// recorded (0 is not "no limit": someone setting it to keep answers out of
// the ledger must not get them all kept).
func TestRecordMaxBodyZeroRecordsNoBody(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("card=4242; answer body"))
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    record: {max_body: 0}", ""))

	first := send(t, g, "/hooks", `{"id":"evt_z"}`)
	wantOutcome(t, first, 200, "forwarded")
	again := send(t, g, "/hooks", `{"id":"evt_z"}`)
	wantOutcome(t, again, 200, "replayed")
	if len(again.body) != 0 || again.header.Get("Hookstamp-Body-Omitted") != "true" {
		t.Errorf("record.max_body 0: replay body %q, Hookstamp-Body-Omitted %q; want an empty body and \"true\"",
			again.body, again.header.Get("Hookstamp-Body-Omitted"))
	}
	if rec := lookup(t, g, "hooks", "evt_z"); len(rec.Body) != 0 || !rec.BodyOmitted {
		t.Errorf("record.max_body 0: ledger kept %d body bytes (omitted=%v)", len(rec.Body), rec.BodyOmitted)
	}
}

// A record kept without its body keeps no Content-Encoding either: the
// header describes body bytes the replay does not carry, and an empty body
// marked gzip is not a gzip stream.
func TestOmittedBodyKeepsNoContentEncoding(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, `{"received":true}`)
		_ = zw.Close()
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "    record: {max_body: 0, headers: [Content-Type, Content-Encoding]}", ""))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_gz_omitted"}`), 200, "forwarded")
	rec := lookup(t, g, "hooks", "evt_gz_omitted")
	if !rec.BodyOmitted || rec.Headers["Content-Encoding"] != "" || rec.Headers["Content-Type"] != "application/json" {
		t.Errorf("record: body omitted %v, headers %v; want omitted, Content-Type kept, no Content-Encoding", rec.BodyOmitted, rec.Headers)
	}
}

// An answer larger than the forwarder reads (forward.DefaultMaxResponseBody)
// is still the upstream's answer: the delivery was processed, so it is
// recorded (without its body) and its repeat replayed, never released and
// forwarded again because the answer was big (SPEC §3: "dedup protection
// never depends on response size").
func TestResponseOverTheForwarderLimitIsStillRecorded(t *testing.T) {
	t.Parallel()
	huge := bytes.Repeat([]byte("h"), forward.DefaultMaxResponseBody+1)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(huge)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	// 10 MiB through an httptest upstream under the race detector, beside
	// the package's parallel tests, took the harness's 2 s at times: a
	// timeout (504 released) is not what this test is about.
	cfg.Routes[0].Upstream.Timeout = 20 * time.Second
	g := startGateway(t, cfg)

	first := send(t, g, "/hooks", `{"id":"evt_huge"}`)
	wantOutcome(t, first, 200, "forwarded")
	if len(first.body) != 0 || first.header.Get("Hookstamp-Body-Omitted") != "true" {
		t.Errorf("first answer: %d bytes, Hookstamp-Body-Omitted %q; want none and \"true\"",
			len(first.body), first.header.Get("Hookstamp-Body-Omitted"))
	}
	again := send(t, g, "/hooks", `{"id":"evt_huge"}`)
	wantOutcome(t, again, 200, "replayed")
	if again.header.Get("Hookstamp-Body-Omitted") != "true" {
		t.Errorf("replay lacks Hookstamp-Body-Omitted: true: %v", again.header)
	}
	if n := up.count("evt_huge"); n != 1 {
		t.Fatalf("a delivery with a huge answer reached the upstream %d times, want 1", n)
	}
}
