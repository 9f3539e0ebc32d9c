package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookstamp/hookstamp/internal/config"
)

// hostileRoutes are the routes of the hostile battery: JSON keys, form keys
// without a signature (so that the key checks are reached), a composed
// template key, Alipay's verified form, and Zoom, whose handshake check
// reads every body as JSON before any signature.
func hostileRoutes(upstreamURL string) string {
	return fmt.Sprintf(`  - name: hooks
    path: /hooks
    upstream:
      url: %[1]s/hooks
    key:
      sources:
        - header: X-Event-Id
        - json: id
        - query: event_id
  - name: form
    path: /form
    upstream:
      url: %[1]s/form
    key:
      sources:
        - form: notify_id
  - name: tpl
    path: /tpl
    upstream:
      url: %[1]s/tpl
    key:
      sources:
        - template: "{json:order_id}-{json:event}-{json:seq}"
      max_length: 64
  - name: alipay
    path: /alipay
    preset: alipay
    upstream:
      url: %[1]s/alipay
    verify:
      public_key: "${ALIPAY_PUBLIC_KEY}"
  - name: zoom
    path: /zoom
    preset: zoom
    upstream:
      url: %[1]s/zoom
    verify:
      secrets: [zoom-secret]
`, upstreamURL)
}

// rawRequest is a request as bytes: framing is the test's to get wrong.
// head holds extra header lines, each ending in "\r\n".
func rawRequest(path, contentType, head, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, contentType, head, len(body), body)
}

// chunked encodes body in chunks of n bytes.
func chunked(body string, n int) string {
	var b strings.Builder
	for i := 0; i < len(body); i += n {
		c := body[i:min(i+n, len(body))]
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

const (
	jsonCT = "application/json"
	formCT = "application/x-www-form-urlencoded"
)

// A refused key's problem says what is wrong with it, once.
func TestInvalidKeyDetailNamesTheReason(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	cases := []struct{ name, body, reason string }{
		{"CR/LF", `{"id":"evt\r\nX-Injected: 1"}`, "contains a control character"},
		{"invalid UTF-8", "{\"id\":\"evt\xff\"}", "not valid UTF-8"},
		{"too long", `{"id":"` + strings.Repeat("k", 5000) + `"}`, "longer than the maximum length"},
		{"trailing space", `{"id":"evt "}`, "begins or ends with a space"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := wantProblem(t, send(t, g, "/hooks", c.body), http.StatusBadRequest, "invalid_key", "X-Injected")
			if want := "invalid idempotency key: " + c.reason; p.Detail != want {
				t.Fatalf("detail %q, want %q", p.Detail, want)
			}
		})
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("forwarded %d requests", n)
	}
}

// Hostile input gets a clear problem answer, and changes nothing: nothing
// is forwarded, nothing recorded, and no goroutine outlives the gateway.
func TestHostileInputChangesNothing(t *testing.T) {
	baseline := goleak.IgnoreCurrent()
	p := newProviders(t)
	up := newUpstream(t)
	db := dbPath(t)
	cfg := routesConfig(t, db, "  body_limit: 1MiB\n  read_timeout: 1s", "", hostileRoutes(up.URL), p.environ)
	g := startGateway(t, cfg)

	overLimit := `{"id":"evt_big","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	deep := `{"id":"evt_deep","n":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	// 900 KiB, the key at the very end, one brace short.
	hugeMalformed := `{"pad":"` + strings.Repeat("y", 900<<10) + `","id":"evt_huge_bad"`
	manyFields := strings.Repeat("f=1&", 10000) + "notify_id=beyond_the_field_limit"
	alipayFlood := "notify_id=n1&" + strings.Repeat("junk=1&", 20000) + "sign_type=RSA2&sign=AAAA"
	enormous := `{"order_id":"` + strings.Repeat("9", 600<<10) + `","event":"CREATE","seq":"01"}`

	cases := []struct {
		name    string
		req     string
		status  int
		outcome string
	}{
		{"body over the limit, honest Content-Length", rawRequest("/hooks", jsonCT, "", overLimit), 413, "too_large"},
		{"body over the limit, chunked", "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunked(overLimit, 8192), 413, "too_large"},
		{"key with CR/LF in a form field", rawRequest("/form", formCT, "", "notify_id=n%0D%0ASet-Cookie:%20a=b"), 400, "invalid_key"},
		{"key with NUL in a form field", rawRequest("/form", formCT, "", "notify_id=n%00x"), 400, "invalid_key"},
		{"key with invalid UTF-8 in a form field", rawRequest("/form", formCT, "", "notify_id=n%FF%FE"), 400, "invalid_key"},
		{"key with CR/LF in the query", rawRequest("/hooks?event_id=q%0d%0aX-Injected:%201", jsonCT, "", `{}`), 400, "invalid_key"},
		{"key with a C1 control (NEL) in JSON", rawRequest("/hooks", jsonCT, "", `{"id":"evt\u0085nel"}`), 400, "invalid_key"},
		{"key with U+2028 in JSON", rawRequest("/hooks", jsonCT, "", `{"id":"evt\u2028ls"}`), 400, "invalid_key"},
		{"key with a lone surrogate escape in JSON", rawRequest("/hooks", jsonCT, "", `{"id":"evt\ud800"}`), 400, "invalid_key"},
		{"key with raw invalid UTF-8 in JSON", rawRequest("/hooks", jsonCT, "", "{\"id\":\"evt\xff\xfe\"}"), 400, "invalid_key"},
		{"key over max_length in a header", rawRequest("/hooks", jsonCT, "X-Event-Id: "+strings.Repeat("h", 256)+"\r\n", `{}`), 400, "invalid_key"},
		{"key over max_length in a form field", rawRequest("/form", formCT, "", "notify_id="+strings.Repeat("f", 300)), 400, "invalid_key"},
		{"template placeholder resolving to 600 KiB", rawRequest("/tpl", jsonCT, "", enormous), 400, "invalid_key"},
		{"JSON malformed", rawRequest("/hooks", jsonCT, "", `{"id": "evt_x",`), 400, "missing_key"},
		{"JSON empty body", rawRequest("/hooks", jsonCT, "", ``), 400, "missing_key"},
		{"JSON 900 KiB, malformed, key at the end", rawRequest("/hooks", jsonCT, "", hugeMalformed), 400, "missing_key"},
		{"JSON nested 10 000 deep", rawRequest("/hooks", jsonCT, "", deep), 400, "missing_key"},
		{"JSON nested a million deep, to a verified route", rawRequest("/zoom", jsonCT, "", strings.Repeat("[", 1<<20-1)), 401, "unverified"},
		{"form with 10 000 fields before the key", rawRequest("/form", formCT, "", manyFields), 400, "missing_key"},
		{"Alipay form with 20 000 fields and a bad sign", rawRequest("/alipay", formCT, "", alipayFlood), 401, "unverified"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forwarded := up.total.Load()
			start := time.Now()
			replies := rawExchange(t, g, c.req, 10*time.Second)
			// Each is answered at once, not when read_timeout (1s) runs out.
			if took := time.Since(start); took > 900*time.Millisecond {
				t.Errorf("answered after %v, want well within read_timeout", took)
			}
			if len(replies) != 1 {
				t.Fatalf("got %d answers, want 1", len(replies))
			}
			r := replies[0].reply()
			wantProblem(t, r, c.status, c.outcome, "Set-Cookie", "X-Injected", "evt_huge_bad", "\x00")
			if n := up.total.Load() - forwarded; n != 0 {
				t.Fatalf("forwarded %d requests", n)
			}
			if n := ledgerRows(t, db); n != 0 {
				t.Fatalf("ledger has %d rows", n)
			}
		})
	}

	t.Run("Content-Length smaller than the body", func(t *testing.T) {
		// The first 11 bytes are the body; the rest would be the next
		// request on this connection. It is not a request, and nothing of
		// it may be forwarded.
		body := `{"pad":"x","id":"evt_lie_short","more":"` + strings.Repeat("z", 200) + `"}`
		req := "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n" + body
		replies := rawExchange(t, g, req, 5*time.Second)
		if len(replies) == 0 {
			t.Fatalf("no answer")
		}
		wantProblem(t, replies[0].reply(), 400, "missing_key", "evt_lie_short")
		// The trailing bytes are no request line: 400, or 408 once the
		// gateway gives up waiting for the line's end.
		for _, r := range replies[1:] {
			if r.status != 400 && r.status != 408 {
				t.Fatalf("the trailing bytes got %d, want 400 or 408 (or nothing)", r.status)
			}
		}
		if up.total.Load() != 0 {
			t.Fatalf("the rest of a lying body was forwarded")
		}
	})

	t.Run("Content-Length larger than the body", func(t *testing.T) {
		// The gateway waits for bytes that never come, until read_timeout;
		// then the connection is closed with nothing forwarded.
		body := `{"id":"evt_lie_long"}`
		req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+1000, body)
		start := time.Now()
		replies := rawExchange(t, g, req, 5*time.Second)
		took := time.Since(start)
		if took < 900*time.Millisecond || took > 3*time.Second {
			t.Fatalf("connection ended after %v, want about read_timeout (1s)", took)
		}
		for _, r := range replies {
			wantProblem(t, r.reply(), http.StatusRequestTimeout, "")
		}
	})

	t.Run("body that stalls past what the server prefetches", func(t *testing.T) {
		// The gateway reads a body as it arrives (past fasthttp's first
		// 8 KiB): one that stops coming is answered 408 when read_timeout
		// runs out, once, and its connection closed.
		sent := `{"id":"evt_stall","pad":"` + strings.Repeat("s", 16<<10)
		req := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 64<<10, sent)
		start := time.Now()
		replies := rawExchange(t, g, req, 5*time.Second)
		if took := time.Since(start); took < 900*time.Millisecond || took > 3*time.Second {
			t.Fatalf("connection ended after %v, want about read_timeout (1s)", took)
		}
		if len(replies) != 1 {
			t.Fatalf("got %d answers, want 1", len(replies))
		}
		wantProblem(t, replies[0].reply(), http.StatusRequestTimeout, "")
	})

	t.Run("malformed chunk", func(t *testing.T) {
		// A chunk size that is not hex: the body cannot be read, so it is
		// 400 at once, and nothing after it on the connection is read.
		req := "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"13\r\n{\"id\":\"evt_chunk1\"}\r\nzz\r\nabc\r\n0\r\n\r\n" + rawRequest("/hooks", jsonCT, "", `{"id":"evt_behind"}`)
		start := time.Now()
		replies := rawExchange(t, g, req, 5*time.Second)
		if took := time.Since(start); took > 900*time.Millisecond {
			t.Errorf("answered after %v, want well within read_timeout", took)
		}
		if len(replies) != 1 {
			t.Fatalf("got %d answers, want 1 (the request behind a malformed chunk is not read)", len(replies))
		}
		wantProblem(t, replies[0].reply(), http.StatusBadRequest, "")
	})

	t.Run("bare LF in a chunk size line", func(t *testing.T) {
		// Read up to its CR, "2;\nxx" was one chunk size line to the
		// gateway; a proxy in front ending lines at a bare LF reads another
		// chunk there, and the bytes after are one request to it and two
		// to the gateway: the second, smuggled past the proxy, forwarded.
		smuggled := rawRequest("/hooks", jsonCT, "", `{"id":"evt_smuggled"}`)
		inner := "0\r\n\r\n" + smuggled
		req := "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"2;\nxx\r\n" + fmt.Sprintf("%x", len(inner)) + "\r\n" + inner + "\r\n0\r\n\r\n"
		replies := rawExchange(t, g, req, 5*time.Second)
		if len(replies) != 1 {
			t.Fatalf("got %d answers, want 1 (nothing behind a malformed chunk is read)", len(replies))
		}
		wantProblem(t, replies[0].reply(), http.StatusBadRequest, "")
		if up.total.Load() != 0 {
			t.Fatalf("forwarded %d requests", up.total.Load())
		}
	})

	t.Run("malformed header fields", func(t *testing.T) {
		// fasthttp keeps a field with an empty name or a control character
		// in its value; forwarded, the upstream's server (or the
		// forwarder) refused it, so every retry was answered 502 released,
		// for ever. Found by FuzzRawRequest.
		const name, value = "a field line is malformed", "a field's value holds a control character"
		for head, detail := range map[string]string{": v\r\n": name, ":\r\n": name, "X-Ev\x01nt: 1\r\n": name, "X-Note\r\n": name,
			"X-Note: a\x01b\r\n": value, "X-Note: a\x7fb\r\n": value} {
			req := rawRequest("/hooks", jsonCT, head, `{"id":"evt_field"}`)
			replies := rawExchange(t, g, req, 5*time.Second)
			if len(replies) != 1 {
				t.Fatalf("header %q: got %d answers, want 1", head, len(replies))
			}
			if p := wantProblem(t, replies[0].reply(), http.StatusBadRequest, ""); !strings.HasPrefix(p.Detail, detail) {
				t.Fatalf("header %q: detail %q, want it to say %q", head, p.Detail, detail)
			}
		}
	})

	t.Run("request trickled byte by byte", func(t *testing.T) {
		// A request sent slower than read_timeout allows is cut off: the
		// gateway holds no goroutine or connection for it afterwards.
		conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := rawRequest("/hooks", jsonCT, "", `{"id":"evt_trickle"}`)
		closed := make(chan []rawReply, 1)
		go func() { closed <- readReplies(conn) }()
		start := time.Now()
		var writeErr error
		for i := 0; i < len(req) && writeErr == nil; i++ {
			select {
			case replies := <-closed:
				closed <- replies
				writeErr = io.ErrClosedPipe
				continue
			case <-time.After(40 * time.Millisecond):
			}
			_, writeErr = conn.Write([]byte{req[i]})
		}
		var replies []rawReply
		select {
		case replies = <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("connection still open %v after the first byte", time.Since(start))
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("trickled request cut after %v, want about read_timeout (1s)", took)
		}
		for _, r := range replies {
			wantProblem(t, r.reply(), http.StatusRequestTimeout, "")
		}
	})

	if up.total.Load() != 0 {
		t.Fatalf("hostile input forwarded %d requests", up.total.Load())
	}
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("hostile input left %d ledger rows", n)
	}

	// Everything the battery started ends with the gateway.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	up.Close()
	client.CloseIdleConnections()
	goleak.VerifyNone(t, baseline,
		// fasthttp's process-wide Date header ticker, started once.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// fasthttp's worker-pool cleaner sleeps MaxIdleWorkerDuration (10s)
		// between passes and sees the stop only when it wakes; it holds no
		// connection and no request. Connection and handler goroutines
		// (serveConn, workerFunc) are still caught.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// A valid body just under the limit, with its key at the very end, is an
// ordinary delivery: forwarded once, replayed after.
func TestHugeBodyUnderLimit(t *testing.T) {
	up := newUpstream(t)
	cfg := routesConfig(t, dbPath(t), "  body_limit: 1MiB", "", hostileRoutes(up.URL), newProviders(t).environ)
	g := startGateway(t, cfg)
	body := `{"pad":"` + strings.Repeat("y", 900<<10) + `","id":"evt_huge_ok"}`
	first := send(t, g, "/hooks", body)
	wantOutcome(t, first, 200, "forwarded")
	again := send(t, g, "/hooks", body)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_huge_ok"); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}

// The upstream's Set-Cookie reaches the provider that caused it (the
// gateway is transparent for a first delivery) but is never recorded, so
// no replay hands it to whoever repeats the key.
func TestReplayNeverCarriesSetCookie(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Set-Cookie", fmt.Sprintf("session=secret-%d; HttpOnly", n))
		w.Header().Add("Set-Cookie", "tracking=1")
		fmt.Fprintf(w, `{"n":%d}`, n)
	})
	db := dbPath(t)
	// Record every header the route could: Set-Cookie is not one of them.
	cfg := gwConfig(t, up.URL, db, "    record:\n      headers: [Content-Type, Cache-Control, Cookie2, X-Set-Cookie]", "screen:\n  local_cache: 0")
	g := startGateway(t, cfg)

	first := send(t, g, "/hooks", `{"id":"evt_cookie"}`)
	wantOutcome(t, first, 200, "forwarded")
	if got := first.header.Values("Set-Cookie"); len(got) != 2 {
		t.Fatalf("first answer Set-Cookie %q, want the upstream's two", got)
	}
	rec := lookup(t, g, "hooks", "evt_cookie")
	for name := range rec.Headers {
		if strings.EqualFold(name, "Set-Cookie") {
			t.Fatalf("Set-Cookie was recorded: %v", rec.Headers)
		}
	}
	again := send(t, g, "/hooks", `{"id":"evt_cookie"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if got := again.header.Values("Set-Cookie"); len(got) != 0 {
		t.Fatalf("replay carries Set-Cookie %q", got)
	}

	// From the ledger too, once the screen has forgotten the key.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	fromLedger := send(t, g2, "/hooks", `{"id":"evt_cookie"}`)
	wantOutcome(t, fromLedger, 200, "replayed")
	if got := fromLedger.header.Values("Set-Cookie"); len(got) != 0 {
		t.Fatalf("replay from the ledger carries Set-Cookie %q", got)
	}

	// Naming it is refused at load time.
	for _, name := range []string{"Set-Cookie", "set-cookie"} {
		y := fmt.Sprintf("routes:\n  - name: r\n    path: /r\n    upstream:\n      url: http://127.0.0.1:1/\n    key:\n      sources: [header: X]\n    record:\n      headers: [%s]\n", name)
		if _, err := config.LoadFromBytes([]byte(y), nil); err == nil || !strings.Contains(err.Error(), "routes[0].record.headers[0]") {
			t.Fatalf("record.headers [%s]: err %v, want a config error naming the key path", name, err)
		}
	}
}

// A header field's value is what lies between the optional whitespace
// around it, spaces and tabs alike (RFC 9110 §5.5, RFC 9112 §5). fasthttp
// trims spaces only: a key header written with a tab after the colon was
// refused 400 invalid_key ("control character") though its value is a
// valid key, and a value of whitespace alone was a key, not the absent
// value that lets the next source yield one (SPEC §1).
func TestHeaderKeyWithoutSurroundingWhitespace(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	req := func(head, body string) reply {
		out := rawExchange(t, g, rawRequest("/hooks", jsonCT, head, body), 3*time.Second)
		if len(out) != 1 {
			t.Fatalf("head %q: got %d answers", head, len(out))
		}
		return out[0].reply()
	}
	r := req("X-Event-Id:\tevt_tab \t\r\n", `{}`)
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if _, _, key := up.lastRequest(); key != "evt_tab" {
		t.Fatalf("upstream Idempotency-Key %q, want evt_tab", key)
	}
	// The same key written plainly is a repeat of it.
	wantOutcome(t, req("X-Event-Id: evt_tab\r\n", `{}`), http.StatusOK, "replayed")

	// Whitespace alone: the header yields nothing, the JSON id is the key.
	r = req("X-Event-Id: \t \r\n", `{"id":"evt_from_json"}`)
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if _, _, key := up.lastRequest(); key != "evt_from_json" {
		t.Fatalf("upstream Idempotency-Key %q, want evt_from_json", key)
	}
	if n := up.total.Load(); n != 2 {
		t.Fatalf("upstream got %d deliveries, want 2", n)
	}
}
