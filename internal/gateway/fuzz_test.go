package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzRawRequest sends arbitrary bytes to a running gateway (SQLite and the
// memory screen, as `make run`) as one TCP connection's request stream,
// and checks what a provider and the upstream would notice: the gateway's
// own refusals are RFC 9457 documents whose status matches the answer's,
// nothing is a 500 (a handler's error or a recovered panic), and the
// gateway still forwards and records a well-formed delivery afterwards.
// The seeds are the framing and header attacks the hostile tests make one
// by one — cut-off chunked bodies and control characters in every framing
// field among them (the connection is half-closed after the input, so
// whatever the input leaves unfinished is cut off); `go test -fuzz
// FuzzRawRequest ./internal/gateway/` mutates them.
func FuzzRawRequest(f *testing.F) {
	post := func(head, body string) string {
		return "POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + head +
			fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	}
	for _, seed := range []string{
		post("", `{"id":"evt_1"}`),
		post("X-Event-Id: evt_h\r\n", `{}`),
		post("X-Event-Id: a\rb\r\n", `{}`),
		post("", `{"id":"\ud800"}`),
		post("", "{\"id\":\"\xff\xfe\"}"),
		post("", `{"id":`),
		post("", `{"id":"`+strings.Repeat("k", 3000)+`"}`),
		post("X-Event-Id: evt_d\r\nX-Event-Id: evt_e\r\n", `{}`),
		post("Expect: 100-continue\r\n", `{"id":"evt_c"}`),
		"POST /hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"id\"\r\n9\r\n:\"evt_t\"}\r\n0\r\nX-Event-Id: trailer\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 14\r\n\r\n{\"id\":\"evt_x\"}",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /hooks HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\n Folded: yes\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks HTTP/1.1\nHost: x\nX-Event-Id: evt_lf\nContent-Length: 2\n\n{}",
		post("", `{"id":"evt_p1"}`) + post("", `{"id":"evt_p1"}`),
		"GET /hooks HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /hooks HTTP/1.1\r\nHost: x\r\n\r\n",
		"NOTAMETHOD /hooks HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /nowhere/../hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST http://evil/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks HTTP/2.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n",
		"\x00\x01\x02 garbage\r\n\r\n",
		// Chunked bodies cut off: at a chunk boundary, after the header,
		// after the last chunk's size line, inside the trailer section.
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_cut\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"amount\": 42\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_cut\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_cut\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_cut\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_cut\r\nContent-Length: 14\r\n\r\n{\"id\":",
		// Control characters in every framing field.
		"POST /hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \x0cchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\x0b\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Length: \x0b2\r\n\r\n{}",
		"POST /hooks HTTP/1.1\r\nHost: \x0cx\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nConnection: \x0bkeep-alive\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nTrailer: \x00X-T\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n",
		"POST /hooks HTTP/1.1\r\nHost: x\r\nExpect: \x0c100-continue\r\nContent-Length: 2\r\n\r\n{}",
		// Request lines of other versions, or none.
		"POST /hooks HTTP/1.2\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks http/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /hooks\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
	} {
		f.Add([]byte(seed))
	}

	up := newUpstream(f)
	cfg := gwConfig(f, up.URL, dbPath(f), "", "")
	cfg.Server.ReadTimeout = 2 * time.Second
	// Not testLogger(f): f.Log panics when it is called while the fuzz
	// function runs (testing's checkFuzzFn), and the gateway logs its
	// warnings from its own goroutines, during an input: the panic ended
	// the fuzzing worker ("terminated unexpectedly").
	g := startGatewayWith(f, cfg, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, raw []byte) {
		conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(raw); err != nil {
			return // the gateway closed first (it refused the start of it)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(conn)
		if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("reading the answer: %v (read %q)", err, got)
		}
		checkFirstAnswer(t, raw, got)

		// The gateway still works: a well-formed delivery is forwarded
		// once and recorded.
		key := fmt.Sprintf("fuzz-alive-%d-%d", time.Now().UnixNano(), n.Add(1))
		wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", key), 200, "forwarded")
		if c := up.count(key); c != 1 {
			t.Fatalf("the upstream received %s %d times, want 1", key, c)
		}
		if rec := lookup(t, g, "hooks", key); rec == nil || rec.Response.Status != 200 {
			t.Fatalf("no record of %s after the fuzz input", key)
		}
	})
}

// checkFirstAnswer checks the first answer to raw, if the gateway sent one
// (a request cut short may get none). The upstream answers 200 to
// everything, so any other final status is the gateway's own.
func checkFirstAnswer(t *testing.T, raw, got []byte) {
	t.Helper()
	if len(got) == 0 {
		return
	}
	method := http.MethodGet
	if m, _, ok := bytes.Cut(raw, []byte(" ")); ok && string(m) == http.MethodHead {
		method = http.MethodHead
	}
	br := bufio.NewReader(bytes.NewReader(got))
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the answer is not HTTP/1.1: %v\n%q", err, got)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("the answer's body: %v\n%q", err, got)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue // 100 Continue; the final answer follows
		}
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented &&
			resp.StatusCode != http.StatusHTTPVersionNotSupported {
			t.Fatalf("answered %d:\n%q", resp.StatusCode, got)
		}
		if resp.StatusCode < 400 || method == http.MethodHead {
			return
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("a %d answered with Content-Type %q, want application/problem+json:\n%q", resp.StatusCode, ct, got)
		}
		var p struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Status != resp.StatusCode || p.Title == "" {
			t.Fatalf("a %d answered with problem %q (%v)", resp.StatusCode, body, err)
		}
		return
	}
}

// isReset reports a connection the gateway reset (it closes a connection
// it refused while bytes it did not read were still arriving).
func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}
