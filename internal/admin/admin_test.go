package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/stats"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const token = "s3cret-admin-token"

// env is an admin server over a real SQLite ledger.
type env struct {
	h      http.Handler
	srv    *httptest.Server
	ledger *sqlledger.Ledger
	stats  *stats.Memory
	mu     sync.Mutex
	forgot []idempotency.Ref
	held   map[string]int
}

func newEnv(tb testing.TB, mod func(*Options)) *env {
	tb.Helper()
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: filepath.Join(tb.TempDir(), "l.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	if err := l.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	e := &env{ledger: l, stats: stats.NewMemory(stats.MemoryOptions{}), held: map[string]int{}}
	o := Options{
		Token:  token,
		Routes: []string{"pay", "ship"},
		Ledger: l,
		Forget: func(_ context.Context, ref idempotency.Ref) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.forgot = append(e.forgot, ref)
			return nil
		},
		HeldChanged: func(route string, d int) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.held[route] += d
		},
		Stats:   e.stats,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "# metrics\n") }),
		Checks:  []Check{{Name: "ledger", Ping: l.Ping}},
		Logger:  slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&o)
	}
	e.h = New(o)
	e.srv = httptest.NewServer(e.h)
	tb.Cleanup(e.srv.Close)
	return e
}

// commit writes a ledger row directly.
func (e *env) commit(tb testing.TB, rec *idempotency.Record) {
	tb.Helper()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	now := rec.CreatedAt
	if rec.State == idempotency.StateDone {
		rec.CompletedAt = rec.CreatedAt
	}
	rec.ExpiresAt = now.Add(time.Hour)
	if err := e.ledger.Commit(context.Background(), rec, "owner", now); err != nil {
		tb.Fatalf("commit: %v", err)
	}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// do sends method to the escaped path with the token ("" = none).
func (e *env) do(tb testing.TB, method, path, tok, body string) resp {
	tb.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

func decode[T any](tb testing.TB, r resp) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		tb.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func wantProblem(tb testing.TB, r resp, status int) {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	p := decode[problemDoc](tb, r)
	if p.Status != status || p.Title == "" || p.Detail == "" {
		tb.Fatalf("problem %+v", p)
	}
}

func recordPath(route, key string) string {
	return "/admin/routes/" + route + "/records/" + url.PathEscape(key)
}

func TestAuth(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"token prefix", "Bearer " + token[:5], http.StatusUnauthorized},
		{"token and more", "Bearer " + token + "x", http.StatusUnauthorized},
		{"basic scheme", "Basic " + token, http.StatusUnauthorized},
		{"right token", "Bearer " + token, http.StatusOK},
		{"scheme case-insensitive", "bearer " + token, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil) // each its own throttle
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/admin/stats", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			res, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			r := resp{res.StatusCode, res.Header, b}
			if tc.want != http.StatusOK {
				wantProblem(t, r, tc.want)
				if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("WWW-Authenticate %q", got)
				}
				return
			}
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
		})
	}
}

// An address that keeps sending wrong tokens is made to wait, and while
// it waits even the right token is refused, so that its guesses tell it
// nothing; the wait ends.
func TestWrongTokensAreSlowedDown(t *testing.T) {
	clock := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	var mu sync.Mutex
	e := newEnv(t, func(o *Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	})
	for i := range 4 { // three free tries, then a second's wait
		wantProblem(t, e.do(t, http.MethodGet, "/admin/stats", "guess"+strconv.Itoa(i), ""), http.StatusUnauthorized)
	}
	r := e.do(t, http.MethodGet, "/admin/stats", token, "")
	wantProblem(t, r, http.StatusTooManyRequests)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	mu.Lock()
	clock = clock.Add(time.Second)
	mu.Unlock()
	if r := e.do(t, http.MethodGet, "/admin/stats", token, ""); r.status != http.StatusOK {
		t.Fatalf("the right token once the wait is over: %d %s", r.status, r.body)
	}
}

// A request without Authorization guesses nothing: it gets 401 but does
// not count, so that requests a page makes the operator's browser send
// cannot make the operator's address wait. Wrong tokens still count.
func TestRequestsWithoutATokenAreNotSlowedDown(t *testing.T) {
	e := newEnv(t, nil)
	for range 10 {
		wantProblem(t, e.do(t, http.MethodGet, "/admin/stats", "", ""), http.StatusUnauthorized)
	}
	if r := e.do(t, http.MethodGet, "/admin/stats", token, ""); r.status != http.StatusOK {
		t.Fatalf("the right token after ten requests without one: %d %s", r.status, r.body)
	}
	for i := range 4 {
		wantProblem(t, e.do(t, http.MethodGet, "/admin/stats", "guess"+strconv.Itoa(i), ""), http.StatusUnauthorized)
	}
	wantProblem(t, e.do(t, http.MethodGet, "/admin/stats", token, ""), http.StatusTooManyRequests)
}

// Two Authorization fields: net/http's Get read the first, while a proxy
// in front may have checked the other. Refused 400 whichever is right,
// and nothing is done.
func TestTwoAuthorizationFieldsAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	ref := idempotency.Ref{Route: "pay", Key: "two_auth"}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
	for _, pair := range [][2]string{{"Bearer " + token, "Bearer nope"}, {"Bearer nope", "Bearer " + token}, {"Bearer " + token, "Bearer " + token}} {
		req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+recordPath("pay", ref.Key), nil)
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantProblem(t, resp{res.StatusCode, res.Header, b}, http.StatusBadRequest)
	}
	if rec, err := e.ledger.Lookup(context.Background(), ref); err != nil || rec.State != idempotency.StateDone {
		t.Fatalf("after the refused DELETEs: %v %v, want the record kept", rec, err)
	}
	// One field, the right token: the DELETE is done.
	if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE with one Authorization: %d %s", r.status, r.body)
	}
}

// TestAdminOff: no token, no admin API; health and metrics still answer.
func TestAdminOff(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Token = "" })
	for _, p := range []string{"/admin/stats", "/admin/routes/pay/held", recordPath("pay", "k")} {
		wantProblem(t, e.do(t, http.MethodGet, p, "", ""), http.StatusNotFound)
		wantProblem(t, e.do(t, http.MethodGet, p, "anything", ""), http.StatusNotFound)
	}
	if r := e.do(t, http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("/healthz %d", r.status)
	}
	if r := e.do(t, http.MethodGet, "/metrics", "", ""); r.status != http.StatusOK || string(r.body) != "# metrics\n" {
		t.Errorf("/metrics %d %q", r.status, r.body)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, http.MethodGet, "/healthz", "", "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Errorf("/healthz %d %s", r.status, r.body)
	}
	r = e.do(t, http.MethodGet, "/readyz", "", "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"ledger":{"ok":true}}` {
		t.Errorf("/readyz %d %s", r.status, r.body)
	}
	noMetrics := newEnv(t, func(o *Options) { o.Metrics = nil })
	wantProblem(t, noMetrics.do(t, http.MethodGet, "/metrics", "", ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodGet, "/nope", "", ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodPost, "/healthz", "", ""), http.StatusMethodNotAllowed)
}

// TestReadyzHidesErrors: a failing dependency is 503 with a summary, never
// the driver's error, which may quote a DSN with its password.
func TestReadyzHidesErrors(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.ReadyTimeout = 100 * time.Millisecond
		o.Checks = append(o.Checks,
			Check{Name: "screen", Ping: func(context.Context) error {
				return &url.Error{Op: "dial", URL: "redis://user:hunter2@10.0.0.1:6379", Err: io.ErrUnexpectedEOF}
			}},
			Check{Name: "slow", Ping: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		)
	})
	r := e.do(t, http.MethodGet, "/readyz", "", "")
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	got := decode[map[string]depStatus](t, r)
	want := map[string]depStatus{"ledger": {OK: true}, "screen": {Error: "unreachable"}, "slow": {Error: "no answer in time"}}
	if len(got) != len(want) || got["ledger"] != want["ledger"] || got["screen"] != want["screen"] || got["slow"] != want["slow"] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if bytes.Contains(r.body, []byte("hunter2")) {
		t.Errorf("readyz leaked the password: %s", r.body)
	}
}

// /readyz?optional=screen reports the screen down and still answers 200,
// for a replica that serves every delivery without Redis (on_unavailable:
// store); any other member down, or a shutting-down server, is still 503.
func TestReadyzOptionalMembers(t *testing.T) {
	var draining, ledgerDown atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.Checks = []Check{
			{Name: "ledger", Ping: func(context.Context) error {
				if ledgerDown.Load() {
					return io.ErrUnexpectedEOF
				}
				return nil
			}},
			{Name: "screen", Ping: func(context.Context) error { return io.ErrUnexpectedEOF }},
		}
		o.Draining = draining.Load
	})
	for _, c := range []struct {
		path              string
		ledgerDown, drain bool
		want              int
	}{
		{"/readyz", false, false, http.StatusServiceUnavailable},
		{"/readyz?optional=screen", false, false, http.StatusOK},
		{"/readyz?optional=tls,%20screen", false, false, http.StatusOK},
		{"/readyz?optional=screen", true, false, http.StatusServiceUnavailable},
		{"/readyz?optional=screen,server", false, true, http.StatusServiceUnavailable},
	} {
		ledgerDown.Store(c.ledgerDown)
		draining.Store(c.drain)
		r := e.do(t, http.MethodGet, c.path, "", "")
		if r.status != c.want {
			t.Errorf("%s (ledger down %v, draining %v): %d %s, want %d", c.path, c.ledgerDown, c.drain, r.status, r.body, c.want)
		}
		if got := decode[map[string]depStatus](t, r); got["screen"].OK {
			t.Errorf("%s: the screen reported ok: %s", c.path, r.body)
		}
	}
}

// TestKeysInPaths: any key, percent-encoded in the path, decoded exactly
// once.
func TestKeysInPaths(t *testing.T) {
	e := newEnv(t, nil)
	keys := []string{"plain", "a/b/c", "with space", "ünïcødé-支付-🧾", "100%25", "a//b", "../x", "ends/resolve", "+plus+", "%2F"}
	for _, k := range keys {
		e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: k}, State: idempotency.StateDone,
			Response: idempotency.Response{Status: 201, Body: []byte("body of " + k)}})
	}
	for _, k := range keys {
		t.Run(k, func(t *testing.T) {
			r := e.do(t, http.MethodGet, recordPath("pay", k), token, "")
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			rec := decode[Record](t, r)
			body, _ := base64.StdEncoding.DecodeString(rec.BodyBase64)
			if rec.Key != k || string(body) != "body of "+k {
				t.Errorf("got key %q body %q", rec.Key, body)
			}
		})
	}
	// Decoded once: %252F is the key "%2F", not "/".
	r := e.do(t, http.MethodGet, "/admin/routes/pay/records/%252F", token, "")
	if rec := decode[Record](t, r); rec.Key != "%2F" {
		t.Errorf("%%252F decoded to %q", rec.Key)
	}
	// A literal slash works too.
	if r := e.do(t, http.MethodGet, "/admin/routes/pay/records/a/b/c", token, ""); r.status != http.StatusOK {
		t.Errorf("literal slashes: %d", r.status)
	}
	wantProblem(t, e.do(t, http.MethodGet, recordPath("pay", "absent"), token, ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodGet, recordPath("ship", "plain"), token, ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodGet, recordPath("nope", "plain"), token, ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodGet, "/admin/routes/pay/records/", token, ""), http.StatusNotFound)
}

func TestGetRecordShape(t *testing.T) {
	e := newEnv(t, nil)
	created := time.Date(2026, 6, 12, 10, 0, 0, 0, time.UTC)
	fp := bytes.Repeat([]byte{0xab}, 32)
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "evt_1"}, State: idempotency.StateDone,
		Fingerprint: fp, TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Source: "10.0.0.1",
		CreatedAt: created,
		Response: idempotency.Response{Status: 200, Headers: map[string]string{"Content-Type": "application/json"},
			Body: []byte(`{"ok":true}`)}})
	r := e.do(t, http.MethodGet, recordPath("pay", "evt_1"), token, "")
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"route": "pay", "key": "evt_1", "state": "done", "status": float64(200),
		"headers":     map[string]any{"Content-Type": "application/json"},
		"body_base64": base64.StdEncoding.EncodeToString([]byte(`{"ok":true}`)),
		"fingerprint": strings.Repeat("ab", 32), "trace_id": "0af7651916cd43dd8448eb211c80319c",
		"span_id": "b7ad6b7169203331", "source": "10.0.0.1",
		"created_at": "2026-06-12T10:00:00Z", "completed_at": "2026-06-12T10:00:00Z",
	}
	for k, v := range want {
		if gv, _ := json.Marshal(got[k]); string(gv) != mustJSON(v) {
			t.Errorf("%s = %s, want %s", k, gv, mustJSON(v))
		}
	}
	if _, ok := got["expires_at"].(string); !ok {
		t.Errorf("expires_at %v", got["expires_at"])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	ref := idempotency.Ref{Route: "pay", Key: "a/b c"}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
	heldRef := idempotency.Ref{Route: "pay", Key: "held-1"}
	e.commit(t, &idempotency.Record{Ref: heldRef, State: idempotency.StateHeld})

	if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE %d: %s", r.status, r.body)
	}
	if _, err := e.ledger.Lookup(context.Background(), ref); err == nil {
		t.Fatal("the ledger row survived DELETE")
	}
	// Again: nothing left in the ledger, the key is forgotten all the same
	// (a screen entry can outlive a failed commit), and 204 (SPEC §8).
	if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE of a key the ledger does not hold: %d %s, want 204", r.status, r.body)
	}
	if r := e.do(t, http.MethodDelete, recordPath("pay", heldRef.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE held %d: %s", r.status, r.body)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Forgotten each time, also when the ledger had nothing.
	if want := []idempotency.Ref{ref, ref, heldRef}; !equalRefs(e.forgot, want) {
		t.Errorf("forgot %v, want %v", e.forgot, want)
	}
	if e.held["pay"] != -1 {
		t.Errorf("held gauge moved by %d, want -1", e.held["pay"])
	}
}

// A DELETE first stops this replica's background retry of a failed commit
// of the key (Options.Deleting), while the row is still there: a retry
// landing after the row is deleted would write the record back.
func TestDeleteStopsCommitRetriesFirst(t *testing.T) {
	var e *env
	var rowThere []bool
	e = newEnv(t, func(o *Options) {
		o.Deleting = func(ref idempotency.Ref) {
			_, err := e.ledger.Lookup(context.Background(), ref)
			rowThere = append(rowThere, err == nil)
		}
	})
	ref := idempotency.Ref{Route: "pay", Key: "evt_retried"}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
	if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE %d: %s", r.status, r.body)
	}
	if len(rowThere) != 1 || !rowThere[0] {
		t.Fatalf("Deleting called %d times, the row there each time: %v; want once, before the row was deleted", len(rowThere), rowThere)
	}
}

// A DELETE whose screen (or the replicas' caches) did not forget the key
// is not reported done: repeats may still be replayed from the screen, so
// the operator gets 503 + Retry-After and retries, never a 204 that
// promises the next delivery is forwarded.
func TestDeleteWhoseScreenDidNotForgetIsNotDone(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Forget = func(context.Context, idempotency.Ref) error {
			return fmt.Errorf("forget in screen: %w: connection refused", idempotency.ErrUnavailable)
		}
	})
	ref := idempotency.Ref{Route: "pay", Key: "evt_screen_down"}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
	r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, "")
	wantProblem(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After")
	}
}

func equalRefs(a, b []idempotency.Ref) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHeldAndResolve(t *testing.T) {
	e := newEnv(t, nil)
	base := time.Now().Add(-time.Hour)
	for i, k := range []string{"h2", "h1", "h3"} {
		e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: k}, State: idempotency.StateHeld,
			CreatedAt: base.Add(time.Duration([]int{2, 1, 3}[i]) * time.Minute), Source: "src"})
	}
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "done"}, State: idempotency.StateDone,
		Response: idempotency.Response{Status: 200}})

	list := decode[heldList](t, e.do(t, http.MethodGet, "/admin/routes/pay/held", token, ""))
	var keys []string
	for _, r := range list.Held {
		keys = append(keys, r.Key)
	}
	if strings.Join(keys, ",") != "h1,h2,h3" || list.Truncated || list.Route != "pay" {
		t.Errorf("held %v truncated %v, want h1,h2,h3 oldest first", keys, list.Truncated)
	}
	if l := decode[heldList](t, e.do(t, http.MethodGet, "/admin/routes/pay/held?limit=2", token, "")); len(l.Held) != 2 || !l.Truncated {
		t.Errorf("limit 2: %d held, truncated %v", len(l.Held), l.Truncated)
	}
	if l := decode[heldList](t, e.do(t, http.MethodGet, "/admin/routes/ship/held", token, "")); len(l.Held) != 0 || l.Held == nil {
		t.Errorf("ship held %v, want []", l.Held)
	}

	// release
	r := e.do(t, http.MethodPost, recordPath("pay", "h1")+"/resolve", token, `{"action":"release"}`)
	if r.status != http.StatusOK || decode[Record](t, r).State != "released" {
		t.Fatalf("release %d %s", r.status, r.body)
	}
	if _, err := e.ledger.Lookup(context.Background(), idempotency.Ref{Route: "pay", Key: "h1"}); err == nil {
		t.Error("released row still in the ledger")
	}
	// record
	r = e.do(t, http.MethodPost, recordPath("pay", "h2")+"/resolve", token,
		`{"action":"record","status":202,"headers":{"content-type":"text/plain"},"body":"settled by hand"}`)
	if r.status != http.StatusOK {
		t.Fatalf("record %d %s", r.status, r.body)
	}
	rec := decode[Record](t, r)
	body, _ := base64.StdEncoding.DecodeString(rec.BodyBase64)
	if rec.State != "done" || rec.Status != 202 || string(body) != "settled by hand" ||
		rec.Headers["Content-Type"] != "text/plain" || rec.Source != "src" || rec.CompletedAt == nil {
		t.Errorf("resolved record %+v body %q", rec, body)
	}
	// body_base64
	r = e.do(t, http.MethodPost, recordPath("pay", "h3")+"/resolve", token,
		`{"action":"record","status":422,"body_base64":"AAEC/w=="}`)
	if rec := decode[Record](t, r); r.status != http.StatusOK || rec.BodyBase64 != "AAEC/w==" {
		t.Errorf("base64 record %d %s", r.status, r.body)
	}

	e.mu.Lock()
	if e.held["pay"] != -3 {
		t.Errorf("held gauge moved by %d, want -3", e.held["pay"])
	}
	e.mu.Unlock()

	// Not held any more: 404; the gauge does not move.
	for _, k := range []string{"h1", "h2", "done", "absent"} {
		wantProblem(t, e.do(t, http.MethodPost, recordPath("pay", k)+"/resolve", token, `{"action":"release"}`), http.StatusNotFound)
	}
	e.mu.Lock()
	if e.held["pay"] != -3 {
		t.Errorf("held gauge moved by %d after failed resolves, want -3", e.held["pay"])
	}
	e.mu.Unlock()
}

func TestResolveBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "h"}, State: idempotency.StateHeld})
	tests := []struct {
		name, body string
	}{
		{"not json", `release`},
		{"two objects", `{"action":"release"}{}`},
		{"unknown field", `{"action":"release","why":"x"}`},
		{"unknown action", `{"action":"forget"}`},
		{"release with status", `{"action":"release","status":200}`},
		{"release with body", `{"action":"release","body":"ok"}`},
		{"release with body_base64", `{"action":"release","body_base64":"b2s="}`},
		{"release with headers", `{"action":"release","headers":{"X-A":"1"}}`},
		{"record without status", `{"action":"record","body":"x"}`},
		{"status 1xx", `{"action":"record","status":101}`},
		{"status 600", `{"action":"record","status":600}`},
		{"status 503, never final", `{"action":"record","status":503}`},
		{"status 429, never final", `{"action":"record","status":429}`},
		{"both bodies", `{"action":"record","status":200,"body":"a","body_base64":"YQ=="}`},
		{"bad base64", `{"action":"record","status":200,"body_base64":"***"}`},
		{"set-cookie", `{"action":"record","status":200,"headers":{"set-cookie":"s=1"}}`},
		{"content-length", `{"action":"record","status":200,"headers":{"Content-Length":"3"}}`},
		{"hookstamp header", `{"action":"record","status":200,"headers":{"Hookstamp-Outcome":"forwarded"}}`},
		{"CRLF in value", `{"action":"record","status":200,"headers":{"X-A":"a\r\nX-B: b"}}`},
		{"bad name", `{"action":"record","status":200,"headers":{"X A":"a"}}`},
		{"duplicate name", `{"action":"record","status":200,"headers":{"x-a":"1","X-A":"2"}}`},
		{"status 304", `{"action":"record","status":304}`},
		{"status 204 with a body", `{"action":"record","status":204,"body":"x"}`},
		{"status 204 with a base64 body", `{"action":"record","status":204,"body_base64":"eA=="}`},
		{"status 205 with a body", `{"action":"record","status":205,"body":"x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, e.do(t, http.MethodPost, recordPath("pay", "h")+"/resolve", token, tc.body), http.StatusBadRequest)
		})
	}
	rec, err := e.ledger.Lookup(context.Background(), idempotency.Ref{Route: "pay", Key: "h"})
	if err != nil || rec.State != idempotency.StateHeld {
		t.Errorf("after bad requests: %v %v, want still held", rec, err)
	}
	wantProblem(t, e.do(t, http.MethodPost, recordPath("pay", "h"), token, `{"action":"release"}`), http.StatusMethodNotAllowed)
	wantProblem(t, e.do(t, http.MethodPut, recordPath("pay", "h"), token, ``), http.StatusMethodNotAllowed)
}

func TestStats(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, ev := range []struct {
		o           idempotency.Outcome
		key, source string
	}{
		{"forwarded", "k1", "a"}, {"forwarded", "k2", "a"}, {"replayed", "k1", "a"}, {"replayed", "k1", "b"},
		{"conflict", "k2", "b"}, {"mismatch", "k1", "c"}, {"released", "k3", "a"},
	} {
		e.stats.Record(ctx, "pay", ev.o, ev.key, ev.source)
	}
	r := e.do(t, http.MethodGet, "/admin/stats?window=15m", token, "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	got := decode[StatsAnswer](t, r)
	if got.Window != "15m" {
		t.Errorf("window %q", got.Window)
	}
	pay, ship := got.Routes["pay"], got.Routes["ship"]
	if pay == nil || ship == nil {
		t.Fatalf("routes %v", got.Routes)
	}
	wantOutcomes := map[string]int64{}
	for _, o := range idempotency.Outcomes {
		wantOutcomes[string(o)] = 0
	}
	wantOutcomes["forwarded"], wantOutcomes["replayed"], wantOutcomes["conflict"], wantOutcomes["mismatch"], wantOutcomes["released"] = 2, 2, 1, 1, 1
	if mustJSON(pay.Outcomes) != mustJSON(wantOutcomes) {
		t.Errorf("outcomes %v, want %v", pay.Outcomes, wantOutcomes)
	}
	if pay.DuplicateRate != 0.5 {
		t.Errorf("duplicate rate %v", pay.DuplicateRate)
	}
	if want := `[{"key":"k1","count":3},{"key":"k2","count":1}]`; mustJSON(pay.TopKeys) != want {
		t.Errorf("top keys %s, want %s", mustJSON(pay.TopKeys), want)
	}
	if want := `[{"source":"b","count":2},{"source":"a","count":1},{"source":"c","count":1}]`; mustJSON(pay.TopSources) != want {
		t.Errorf("top sources %s, want %s", mustJSON(pay.TopSources), want)
	}
	if mustJSON(ship.TopKeys) != "[]" || ship.Outcomes["forwarded"] != 0 {
		t.Errorf("ship %+v", ship)
	}
	if top1 := decode[StatsAnswer](t, e.do(t, http.MethodGet, "/admin/stats?top=1", token, "")); len(top1.Routes["pay"].TopKeys) != 1 || top1.Window != "1h" {
		t.Errorf("top=1: %+v", top1)
	}
	for _, q := range []string{"window=25h", "window=0s", "window=-1m", "window=fortnight", "top=0", "top=x", "top=101"} {
		wantProblem(t, e.do(t, http.MethodGet, "/admin/stats?"+q, token, ""), http.StatusBadRequest)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 15 * time.Minute: "15m", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s",
		24 * time.Hour: "24h", 30 * time.Second: "30s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// A route that is not configured is 404 on every record endpoint, and
// nothing is forgotten: a DELETE with a misspelt route must not answer 204
// ("forgotten") while the real key stays.
func TestUnknownRouteIs404(t *testing.T) {
	e := newEnv(t, nil)
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "k"}, State: idempotency.StateHeld})
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, recordPath("payy", "k"), ""},
		{http.MethodDelete, recordPath("payy", "k"), ""},
		{http.MethodGet, "/admin/routes/payy/held", ""},
		{http.MethodPost, recordPath("payy", "k") + "/resolve", `{"action":"release"}`},
	} {
		wantProblem(t, e.do(t, tc.method, tc.path, token, tc.body), http.StatusNotFound)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.forgot) != 0 || len(e.held) != 0 {
		t.Errorf("calls on an unknown route forgot %v and moved the held gauge %v", e.forgot, e.held)
	}
}

// A route that saw requests but neither forwarded nor replayed one (say,
// only forgeries: unverified) has a duplicate rate of 0, and the answer is
// still a JSON document (encoding/json refuses NaN).
func TestStatsRouteWithoutForwardsOrReplays(t *testing.T) {
	e := newEnv(t, nil)
	for range 3 {
		e.stats.Record(context.Background(), "pay", idempotency.Unverified, "", "a")
	}
	r := e.do(t, http.MethodGet, "/admin/stats", token, "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	pay := decode[StatsAnswer](t, r).Routes["pay"]
	if pay == nil || pay.Outcomes["unverified"] != 3 || pay.DuplicateRate != 0 {
		t.Fatalf("pay %+v, want 3 unverified and duplicate rate 0", pay)
	}
}

// readBackFails is a ledger whose Lookups fail once a Resolve has been
// made: the resolve's read-back fails.
type readBackFails struct {
	Ledger
	resolved atomic.Bool
}

func (l *readBackFails) Resolve(ctx context.Context, ref idempotency.Ref, rec *idempotency.Record) error {
	err := l.Ledger.Resolve(ctx, ref, rec)
	l.resolved.Store(true)
	return err
}

func (l *readBackFails) Lookup(ctx context.Context, ref idempotency.Ref) (*idempotency.Record, error) {
	if l.resolved.Load() {
		return nil, fmt.Errorf("lookup: %w", idempotency.ErrUnavailable)
	}
	return l.Ledger.Lookup(ctx, ref)
}

// A resolve whose read-back fails answers from what it wrote, its
// completed_at on the gateway's clock (the one the ledger writes by), not
// the host's.
func TestResolveReadBackFailureUsesTheGatewayClock(t *testing.T) {
	clock := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	e := newEnv(t, func(o *Options) {
		o.Ledger = &readBackFails{Ledger: o.Ledger}
		o.Now = func() time.Time { return clock }
	})
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "h"}, State: idempotency.StateHeld})
	r := e.do(t, http.MethodPost, recordPath("pay", "h")+"/resolve", token, `{"action":"record","status":200,"body":"ok"}`)
	if r.status != http.StatusOK {
		t.Fatalf("resolve %d %s", r.status, r.body)
	}
	if rec := decode[Record](t, r); rec.State != "done" || rec.CompletedAt == nil || !rec.CompletedAt.Equal(clock) {
		t.Errorf("resolved record %+v, want done, completed_at %s", rec, clock)
	}
}

// A client that gave up is no ledger failure: its canceled request fails
// the ledger call, which is logged at info level, while a closed ledger
// is logged as an error.
func TestLedgerCallOfAGoneClientIsNoError(t *testing.T) {
	for _, gone := range []bool{true, false} {
		t.Run(fmt.Sprint("gone=", gone), func(t *testing.T) {
			var out bytes.Buffer
			e := newEnv(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&out, nil)) })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if gone {
				cancel()
			} else {
				e.ledger.Close()
			}
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, recordPath("pay", "evt_1"), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, req)
			if w.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", w.Code, w.Body)
			}
			logged := out.String()
			if got := strings.Contains(logged, `"level":"ERROR"`); got == gone {
				t.Errorf("logged an error: %v, want %v; the log: %s", got, !gone, logged)
			}
			if gone && !strings.Contains(logged, "abandoned by its client") {
				t.Errorf("the abandoned request was not logged: %s", logged)
			}
		})
	}
}

// A redrive's key list is checked before the ledger sees it: a key the
// ledger cannot hold names no dead record (on PostgreSQL a NUL failed the
// statement, answered 503 as an outage that Retry-After says to retry), a
// list longer than a statement's parameters is refused, and so is data
// after the object.
func TestRedriveRefusesWhatNoLedgerCanRun(t *testing.T) {
	pg, err := sqlledger.Open(context.Background(), sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: testenv.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	if err := pg.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Redeliver, o.Stores = pg, map[string]time.Duration{"pay": time.Hour} })
	many := `{"keys":["k` + strings.Repeat(`","k`, maxRedriveKeys) + `"]}`
	for _, c := range []struct {
		name, body string
		status     int
		answer     string
	}{
		{"a NUL in a key", `{"keys":["evt\u0000x","evt_ok"]}`, http.StatusOK, `{"requeued":0}`},
		{"only keys no record can have", `{"keys":["","evt\u0000x"]}`, http.StatusOK, `{"requeued":0}`},
		{"data after the object", `{"keys":["evt_ok"]} trailing`, http.StatusBadRequest, ""},
		{"a second object", `{"keys":["evt_ok"]}{}`, http.StatusBadRequest, ""},
		{"more keys than a request may list", many, http.StatusBadRequest, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, http.MethodPost, "/admin/routes/pay/dead/redrive", token, c.body)
			if c.status != http.StatusOK {
				wantProblem(t, r, c.status)
				return
			}
			if r.status != c.status || strings.TrimSpace(string(r.body)) != c.answer {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, c.status, c.answer)
			}
		})
	}
}

// keptRequeues records what each Requeue was asked to keep.
type keptRequeues struct {
	Redeliverer
	mu   sync.Mutex
	keep []time.Time
}

func (k *keptRequeues) Requeue(_ context.Context, _ idempotency.Ref, _ bool, keep time.Time) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keep = append(k.keep, keep)
	return true, nil
}

// A redelivery keeps its record the route's retention from the gateway's
// now: a record past its expiry would otherwise be swept before its job
// ran.
func TestRedeliveryKeepsTheRecordARetention(t *testing.T) {
	clock := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	k := &keptRequeues{}
	e := newEnv(t, func(o *Options) {
		o.Redeliver, o.Stores = k, map[string]time.Duration{"pay": 72 * time.Hour}
		o.Now = func() time.Time { return clock }
	})
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "k"}, State: idempotency.StateDone})
	if r := e.do(t, http.MethodPost, recordPath("pay", "k")+"/redeliver", token, ""); r.status != http.StatusAccepted {
		t.Fatalf("redeliver %d %s", r.status, r.body)
	}
	if want := clock.Add(72 * time.Hour); len(k.keep) != 1 || !k.keep[0].Equal(want) {
		t.Fatalf("requeued to keep %v, want [%s]", k.keep, want)
	}
}
