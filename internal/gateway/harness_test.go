package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// upstream is a test upstream that counts what it receives, per
// Idempotency-Key, and answers as its handler says.
type upstream struct {
	*httptest.Server
	total atomic.Int64
	mu    sync.Mutex
	byKey map[string]int
	// reply answers request n (1-based) of a key; nil = 200 JSON receipt.
	reply func(w http.ResponseWriter, r *http.Request, n int)
	last  http.Header
	// lastBody and lastURI are the last request's body and request-URI.
	lastBody, lastURI string
}

func newUpstream(tb testing.TB) *upstream {
	tb.Helper()
	u := &upstream{byKey: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		u.total.Add(1)
		u.mu.Lock()
		u.byKey[key]++
		n := u.byKey[key]
		u.last = r.Header.Clone()
		u.lastBody, u.lastURI = string(body), r.RequestURI
		reply := u.reply
		u.mu.Unlock()
		if reply != nil {
			reply(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream-Seq", fmt.Sprint(u.total.Load()))
		fmt.Fprintf(w, `{"key":%q,"n":%d,"len":%d,"at":%q}`, key, n, len(body), time.Now().Format(time.RFC3339Nano))
	}))
	tb.Cleanup(u.Close)
	return u
}

// heldUpstream is an upstream that answers {"n":N} (N the request's
// number) only once release is closed: deliveries stay in flight until
// then.
func heldUpstream(tb testing.TB) (up *upstream, release chan struct{}) {
	up, release = newUpstream(tb), make(chan struct{})
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"n":%d}`, n)
	})
	return up, release
}

func (u *upstream) setReply(f func(w http.ResponseWriter, r *http.Request, n int)) {
	u.mu.Lock()
	u.reply = f
	u.mu.Unlock()
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byKey[key]
}

// lastRequest is the last request's body, request-URI and Idempotency-Key.
func (u *upstream) lastRequest() (body, uri, key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastBody, u.lastURI, u.last.Get("Idempotency-Key")
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// gwConfig is a test configuration: SQLite in dir, memory screen unless
// overridden, one route "hooks" at /hooks keyed on X-Event-Id then json id.
// route is YAML appended to the route (indented four spaces); top is YAML
// merged at the top level (whole sections).
func gwConfig(tb testing.TB, upstreamURL, dbPath, route, top string) *config.Config {
	tb.Helper()
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
  body_limit: 64KiB
  shutdown_timeout: 5s
admin:
  listen: ""
store:
  driver: sqlite
  dsn: %q
  sweep_interval: 1h
%s
routes:
  - name: hooks
    path: /hooks
    upstream:
      url: %s/up
      timeout: 2s
    key:
      sources:
        - header: X-Event-Id
        - json: id
%s
`, dbPath, top, upstreamURL, route)
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// startGateway starts a gateway on a free port; it is shut down when the
// test ends.
func startGateway(tb testing.TB, cfg *config.Config) *Gateway {
	tb.Helper()
	return startGatewayWith(tb, cfg, Options{Logger: testLogger(tb)})
}

// startGatewayWith is startGateway with o.
func startGatewayWith(tb testing.TB, cfg *config.Config, o Options) *Gateway {
	tb.Helper()
	ctx := context.Background()
	g, err := New(ctx, cfg, o)
	if err != nil {
		tb.Fatalf("gateway.New: %v", err)
	}
	if err := g.Start(); err != nil {
		tb.Fatalf("gateway.Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(&tbWriter{tb: tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// lastLogLine is the last line of logs that contains s, or "".
func lastLogLine(logs *testenv.Buffer, s string) string {
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, s) {
			line = l
		}
	}
	return line
}

type tbWriter struct {
	tb testing.TB
	mu sync.Mutex
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// reply is what a provider got back.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) outcome() string { return r.header.Get("Hookstamp-Outcome") }

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// send POSTs body to the gateway with optional headers ("Name", "value", …).
func send(tb testing.TB, g *Gateway, path, body string, hdr ...string) reply {
	tb.Helper()
	return sendMethod(tb, g, http.MethodPost, path, body, hdr...)
}

// sendMethod is send with another method.
func sendMethod(tb testing.TB, g *Gateway, method, path, body string, hdr ...string) reply {
	tb.Helper()
	req, err := http.NewRequest(method, g.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("send: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read reply: %v", err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func wantOutcome(tb testing.TB, r reply, status int, outcome string) {
	tb.Helper()
	if r.status != status || r.outcome() != outcome {
		tb.Fatalf("got %d %q, want %d %q; body %s", r.status, r.outcome(), status, outcome, r.body)
	}
}

func sameReply(tb testing.TB, a, b reply) {
	tb.Helper()
	if a.status != b.status || !bytes.Equal(a.body, b.body) || a.header.Get("Content-Type") != b.header.Get("Content-Type") {
		tb.Fatalf("replies differ:\n%d %s %q\n%d %s %q", a.status, a.header.Get("Content-Type"), a.body,
			b.status, b.header.Get("Content-Type"), b.body)
	}
}

func lookup(tb testing.TB, g *Gateway, route, key string) *idempotency.Record {
	tb.Helper()
	rec, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: route, Key: key})
	if err != nil {
		tb.Fatalf("ledger lookup %s/%s: %v", route, key, err)
	}
	return rec
}

func dbPath(tb testing.TB) string { return filepath.Join(tb.TempDir(), "ledger.db") }

// shutdownGateway stops g as SIGTERM would, before the test restarts on
// the same stores.
func shutdownGateway(tb testing.TB, g *Gateway) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
}
