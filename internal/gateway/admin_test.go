package gateway_test

// End-to-end tests of the admin listener: a real gateway on 127.0.0.1:0,
// its admin listener on 127.0.0.1:0, a counting upstream, real SQLite,
// PostgreSQL and Redis. They live in package gateway_test, with helpers of
// their own, so that they depend on the gateway's exported API only.

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
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const adminToken = "admin-t0ken-for-tests"

// countingUpstream answers 200 with a body naming the event, counts
// deliveries per X-Event-Id, and holds a delivery whose event is gated
// until the gate opens (or the gateway gives up on it).
type countingUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	counts  map[string]int
	gates   map[string]chan struct{}
	arrived chan string
}

func newCountingUpstream(tb testing.TB) *countingUpstream {
	tb.Helper()
	u := &countingUpstream{counts: map[string]int{}, gates: map[string]chan struct{}{}, arrived: make(chan string, 16)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.counts[key]++
		n := u.counts[key]
		gate := u.gates[key]
		u.mu.Unlock()
		if gate != nil {
			u.arrived <- key
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "processed %s #%d", key, n)
	}))
	tb.Cleanup(u.Close)
	return u
}

func (u *countingUpstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[key]
}

// gate makes deliveries of key wait; the returned func lets them through.
func (u *countingUpstream) gate(key string) func() {
	ch := make(chan struct{})
	u.mu.Lock()
	u.gates[key] = ch
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			delete(u.gates, key)
			u.mu.Unlock()
			close(ch)
		})
	}
}

// setup is where a test's gateways keep their state.
type setup struct {
	store, dsn         string
	screen, redis, pfx string
	token              string
	adminOff           bool
	logs               *testenv.Buffer
	localCache         string
	upstream           *countingUpstream
	mutate             func(*config.Config) // applied last, if set
}

// config is a gateway with three routes:
//   - hooks: /hooks, key header X-Event-Id or json id, source header
//     X-Sender, a repeat in flight gets 409 (conflict);
//   - held: /held, record.ambiguous: hold, upstream timeout 300ms;
//   - shadow: /shadow, mode shadow.
func (s *setup) config(tb testing.TB) *config.Config {
	tb.Helper()
	screen := "screen:\n  driver: " + s.screen + "\n"
	if s.screen == "redis" {
		screen = fmt.Sprintf("screen:\n  driver: redis\n  prefix: %q\n  redis:\n    addrs: [%q]\n", s.pfx, s.redis)
	}
	if s.localCache != "" {
		screen += "  local_cache: " + s.localCache + "\n"
	}
	// The admin listener is set after validation: config refuses an
	// admin.listen equal to server.listen, even "127.0.0.1:0" twice.
	listen := ""
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 5s
admin:
  listen: %q
  token: %q
store:
  driver: %s
  dsn: %q
  sweep_interval: 1h
%s
routes:
  - name: hooks
    path: /hooks
    source: header:X-Sender
    inflight: reject
    upstream: {url: %q, timeout: 5s}
    key:
      sources: [{header: X-Event-Id}, {json: id}]
  - name: held
    path: /held
    source: header:X-Sender
    upstream: {url: %q, timeout: 300ms}
    key:
      sources: [{json: id}]
    record: {ambiguous: hold}
  - name: shadow
    path: /shadow
    mode: shadow
    source: header:X-Sender
    upstream: {url: %q, timeout: 5s}
    key:
      sources: [{json: id}]
`, listen, s.token, s.store, s.dsn, screen, s.upstream.URL+"/hooks", s.upstream.URL+"/held", s.upstream.URL+"/shadow")
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, y)
	}
	if !s.adminOff {
		cfg.Admin.Listen = "127.0.0.1:0"
	}
	if s.mutate != nil {
		s.mutate(cfg)
	}
	return cfg
}

func newSetup(tb testing.TB) *setup {
	tb.Helper()
	return &setup{store: "sqlite", dsn: filepath.Join(tb.TempDir(), "ledger.db"), screen: "memory",
		token: adminToken, upstream: newCountingUpstream(tb), logs: &testenv.Buffer{}}
}

// sharedSetup is two replicas' common PostgreSQL and Redis.
func sharedSetup(tb testing.TB) *setup {
	tb.Helper()
	s := newSetup(tb)
	s.store, s.dsn = "postgres", testenv.Postgres(tb)
	s.screen = "redis"
	s.redis, s.pfx = testenv.RedisPrefix(tb)
	return s
}

func (s *setup) start(tb testing.TB) *gateway.Gateway {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := gateway.New(context.Background(), s.config(tb), gateway.Options{Logger: log})
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

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) outcome() string { return a.header.Get("Hookstamp-Outcome") }

var httpClient = &http.Client{Timeout: 20 * time.Second}

func exchange(tb testing.TB, method, u, body string, hdr ...string) answer {
	tb.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := httpClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return answer{res.StatusCode, res.Header, b}
}

// deliver POSTs a webhook: body is JSON, hdr extra headers.
func deliver(tb testing.TB, g *gateway.Gateway, path, body string, hdr ...string) answer {
	tb.Helper()
	return exchange(tb, http.MethodPost, g.URL()+path, body, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

func want(tb testing.TB, a answer, status int, outcome string) {
	tb.Helper()
	if a.status != status || a.outcome() != outcome {
		tb.Fatalf("got %d %q, want %d %q: %s", a.status, a.outcome(), status, outcome, a.body)
	}
}

// adminDo calls the admin API of g with the right token.
func adminDo(tb testing.TB, g *gateway.Gateway, method, path, body string) answer {
	tb.Helper()
	return exchange(tb, method, "http://"+g.AdminAddr()+path, body, "Authorization", "Bearer "+adminToken)
}

func recordURL(route, key string) string {
	return "/admin/routes/" + route + "/records/" + url.PathEscape(key)
}

func decodeJSON[T any](tb testing.TB, a answer) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(a.body, &v); err != nil {
		tb.Fatalf("decode %d %s: %v", a.status, a.body, err)
	}
	return v
}

func wantAdminProblem(tb testing.TB, a answer, status int) {
	tb.Helper()
	if a.status != status || a.header.Get("Content-Type") != "application/problem+json" {
		tb.Fatalf("got %d %q, want %d problem: %s", a.status, a.header.Get("Content-Type"), status, a.body)
	}
}

func TestAdminAuth(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	base := "http://" + g.AdminAddr()
	tests := []struct {
		name string
		hdr  []string
		want int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"wrong token", []string{"Authorization", "Bearer wrong"}, http.StatusUnauthorized},
		{"right token", []string{"Authorization", "Bearer " + adminToken}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := exchange(t, http.MethodGet, base+"/admin/stats", "", tc.hdr...)
			if tc.want == http.StatusUnauthorized {
				wantAdminProblem(t, a, http.StatusUnauthorized)
				if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q", a.header.Get("WWW-Authenticate"))
				}
				return
			}
			if a.status != tc.want {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
		})
	}
	if a := exchange(t, http.MethodGet, base+"/healthz", ""); a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != `{"status":"ok"}` {
		t.Errorf("/healthz %d %s", a.status, a.body)
	}
	if a := exchange(t, http.MethodGet, base+"/metrics", ""); a.status != http.StatusOK || !strings.Contains(string(a.body), "hookstamp_") {
		t.Errorf("/metrics %d, no hookstamp_ series", a.status)
	}
	if logs := s.logs.String(); strings.Contains(logs, "admin.token is empty") {
		t.Errorf("warned about a token of %d bytes:\n%s", len(adminToken), logs)
	}
}

// A token short enough to guess from many addresses is only warned about
// (config.Warnings, by check and at start): it is still served.
func TestShortAdminTokenIsServed(t *testing.T) {
	s := newSetup(t)
	s.token = "t0ken"
	g := s.start(t)
	if a := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/admin/stats", "", "Authorization", "Bearer t0ken"); a.status != http.StatusOK {
		t.Errorf("/admin/stats with the short token: %d %s", a.status, a.body)
	}
}

// TestAdminOffWithoutToken: no token, no /admin/*, a warning at start-up;
// health still answers. No listen address, no listener.
func TestAdminOffWithoutToken(t *testing.T) {
	s := newSetup(t)
	s.token = ""
	g := s.start(t)
	for _, tok := range []string{"", adminToken} {
		a := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/admin/stats", "", "Authorization", "Bearer "+tok)
		wantAdminProblem(t, a, http.StatusNotFound)
	}
	if a := exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/healthz", ""); a.status != http.StatusOK {
		t.Errorf("/healthz %d", a.status)
	}
	if !strings.Contains(s.logs.String(), "admin.token is empty") {
		t.Errorf("no start-up warning; logs:\n%s", s.logs)
	}

	off := newSetup(t)
	off.adminOff = true
	if g := off.start(t); g.AdminAddr() != "" {
		t.Errorf("admin.listen \"\": AdminAddr %q", g.AdminAddr())
	}
}

type recordJSON struct {
	Route       string            `json:"route"`
	Key         string            `json:"key"`
	State       string            `json:"state"`
	Status      int               `json:"status"`
	Headers     map[string]string `json:"headers"`
	BodyBase64  string            `json:"body_base64"`
	Fingerprint *string           `json:"fingerprint"`
	Source      string            `json:"source"`
	CreatedAt   *time.Time        `json:"created_at"`
	CompletedAt *time.Time        `json:"completed_at"`
	ExpiresAt   *time.Time        `json:"expires_at"`
}

// TestAdminRecordAndDelete: the record of a forward, under a key with a
// slash, spaces and non-ASCII characters sent percent-encoded; DELETE makes
// the next delivery go upstream again, and repeats replay after that.
func TestAdminRecordAndDelete(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	const key = "order/42 paid ünï 支付"
	body := fmt.Sprintf(`{"id":%q}`, key)
	first := deliver(t, g, "/hooks", body, "X-Sender", "psp-1")
	want(t, first, http.StatusOK, "forwarded")

	a := adminDo(t, g, http.MethodGet, recordURL("hooks", key), "")
	if a.status != http.StatusOK {
		t.Fatalf("GET record %d %s", a.status, a.body)
	}
	rec := decodeJSON[recordJSON](t, a)
	got, err := base64.StdEncoding.DecodeString(rec.BodyBase64)
	if err != nil || !bytes.Equal(got, first.body) {
		t.Errorf("body_base64 decodes to %q (%v), want the upstream's %q", got, err, first.body)
	}
	if rec.Route != "hooks" || rec.Key != key || rec.State != "done" || rec.Status != 200 || rec.Source != "psp-1" ||
		rec.Headers["Content-Type"] != "text/plain" || rec.CreatedAt == nil || rec.CompletedAt == nil || rec.ExpiresAt == nil {
		t.Errorf("record %+v", rec)
	}
	if rec.Fingerprint == nil || len(*rec.Fingerprint) != 64 || strings.Trim(*rec.Fingerprint, "0123456789abcdef") != "" {
		t.Errorf("fingerprint %v, want 64 hex digits", rec.Fingerprint)
	}
	wantAdminProblem(t, adminDo(t, g, http.MethodGet, recordURL("hooks", "absent"), ""), http.StatusNotFound)
	wantAdminProblem(t, adminDo(t, g, http.MethodGet, recordURL("nope", key), ""), http.StatusNotFound)

	want(t, deliver(t, g, "/hooks", body), http.StatusOK, "replayed")
	if a := adminDo(t, g, http.MethodDelete, recordURL("hooks", key), ""); a.status != http.StatusNoContent {
		t.Fatalf("DELETE %d %s", a.status, a.body)
	}
	wantAdminProblem(t, adminDo(t, g, http.MethodGet, recordURL("hooks", key), ""), http.StatusNotFound)
	again := deliver(t, g, "/hooks", body)
	want(t, again, http.StatusOK, "forwarded")
	if n := s.upstream.count(key); n != 2 {
		t.Fatalf("upstream saw the key %d times, want 2", n)
	}
	replay := deliver(t, g, "/hooks", body)
	want(t, replay, http.StatusOK, "replayed")
	if !bytes.Equal(replay.body, again.body) {
		t.Errorf("replay %q, want the second forward's %q", replay.body, again.body)
	}
	// A key nothing holds: forgotten all the same, 204 (SPEC §8).
	if a := adminDo(t, g, http.MethodDelete, recordURL("hooks", "absent"), ""); a.status != http.StatusNoContent {
		t.Fatalf("DELETE of an absent key: %d %s, want 204", a.status, a.body)
	}
}

type heldJSON struct {
	Route string       `json:"route"`
	Held  []recordJSON `json:"held"`
}

// TestAdminHeldAndResolve: an upstream that times out holds the key; the
// held list shows it; release lets the next delivery through; record makes
// repeats replay exactly the operator's response.
func TestAdminHeldAndResolve(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	up := s.upstream
	for _, k := range []string{"h-release", "h-record"} {
		open := up.gate(k)
		t.Cleanup(open)
		want(t, deliver(t, g, "/held", fmt.Sprintf(`{"id":%q}`, k)), http.StatusGatewayTimeout, "held")
		<-up.arrived
		open()
		want(t, deliver(t, g, "/held", fmt.Sprintf(`{"id":%q}`, k)), http.StatusConflict, "held")
	}
	list := decodeJSON[heldJSON](t, adminDo(t, g, http.MethodGet, "/admin/routes/held/held", ""))
	var keys []string
	for _, r := range list.Held {
		keys = append(keys, r.Key)
	}
	if strings.Join(keys, ",") != "h-release,h-record" {
		t.Fatalf("held %v, want [h-release h-record] (oldest first)", keys)
	}
	if n := heldGauge(t, g); n != "2" {
		t.Errorf("hookstamp_held_keys{route=held} = %v, want 2", n)
	}

	a := adminDo(t, g, http.MethodPost, recordURL("held", "h-release")+"/resolve", `{"action":"release"}`)
	if a.status != http.StatusOK {
		t.Fatalf("release %d %s", a.status, a.body)
	}
	want(t, deliver(t, g, "/held", `{"id":"h-release"}`), http.StatusOK, "forwarded")
	if n := up.count("h-release"); n != 2 {
		t.Errorf("released key reached the upstream %d times, want 2", n)
	}

	a = adminDo(t, g, http.MethodPost, recordURL("held", "h-record")+"/resolve",
		`{"action":"record","status":201,"headers":{"Content-Type":"application/json","X-Resolved":"by-hand"},"body":"{\"ok\":true}"}`)
	if a.status != http.StatusOK {
		t.Fatalf("record %d %s", a.status, a.body)
	}
	if rec := decodeJSON[recordJSON](t, a); rec.State != "done" || rec.Status != 201 {
		t.Errorf("resolved record %+v", rec)
	}
	for range 2 {
		r := deliver(t, g, "/held", `{"id":"h-record"}`)
		want(t, r, http.StatusCreated, "replayed")
		if string(r.body) != `{"ok":true}` || r.header.Get("X-Resolved") != "by-hand" || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("replay %q %v", r.body, r.header)
		}
	}
	if n := up.count("h-record"); n != 1 {
		t.Errorf("recorded key reached the upstream %d times, want 1", n)
	}
	if l := decodeJSON[heldJSON](t, adminDo(t, g, http.MethodGet, "/admin/routes/held/held", "")); len(l.Held) != 0 {
		t.Errorf("still held: %+v", l.Held)
	}
	if n := heldGauge(t, g); n != "0" {
		t.Errorf("hookstamp_held_keys{route=held} = %v after resolving, want 0", n)
	}
	wantAdminProblem(t, adminDo(t, g, http.MethodPost, recordURL("held", "h-record")+"/resolve", `{"action":"release"}`), http.StatusNotFound)
	wantAdminProblem(t, adminDo(t, g, http.MethodPost, recordURL("held", "x")+"/resolve", `{"action":"sideways"}`), http.StatusBadRequest)
}

// heldGauge scrapes /metrics for hookstamp_held_keys of route "held".
func heldGauge(tb testing.TB, g *gateway.Gateway) string {
	tb.Helper()
	a := exchange(tb, http.MethodGet, "http://"+g.AdminAddr()+"/metrics", "")
	for _, line := range strings.Split(string(a.body), "\n") {
		if strings.HasPrefix(line, "hookstamp_held_keys{") && strings.Contains(line, `route="held"`) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	tb.Fatalf("no hookstamp_held_keys for route held in /metrics:\n%s", a.body)
	return ""
}

// script delivers a fixed mix of outcomes through gs in turn (one gateway,
// or replicas sharing their stores): forwards, replays from several
// sources, a mismatch, a conflict, a missing key, and a shadowed repeat.
func script(t *testing.T, up *countingUpstream, gs ...*gateway.Gateway) {
	t.Helper()
	i := 0
	next := func() *gateway.Gateway { g := gs[i%len(gs)]; i++; return g }
	send := func(path, body, sender string, status int, outcome string) {
		t.Helper()
		want(t, deliver(t, next(), path, body, "X-Sender", sender), status, outcome)
	}
	send("/hooks", `{"id":"k1"}`, "s1", 200, "forwarded")
	send("/hooks", `{"id":"k1"}`, "s1", 200, "replayed")
	send("/hooks", `{"id":"k1"}`, "s2", 200, "replayed")
	send("/hooks", `{"id":"k2"}`, "s1", 200, "forwarded")
	send("/hooks", `{"id":"k2","amount":2}`, "s3", 422, "mismatch")
	// k3: a repeat while the first is in flight.
	open := up.gate("k3")
	defer open()
	first := make(chan answer, 1)
	g := next()
	go func() { first <- deliver(t, g, "/hooks", `{"id":"k3"}`, "X-Sender", "s2") }()
	<-up.arrived
	send("/hooks", `{"id":"k3"}`, "s3", 409, "conflict")
	open()
	want(t, <-first, 200, "forwarded")
	send("/hooks", `{"nothing":"here"}`, "s1", 400, "missing_key")
	send("/hooks", `{"id":"k1"}`, "s3", 200, "replayed")
	send("/shadow", `{"id":"z1"}`, "s1", 200, "forwarded")
	send("/shadow", `{"id":"z1"}`, "s2", 200, "shadowed")
}

// scriptStats is what /admin/stats must say after script, counted by
// scope ("replica" or "cluster").
func scriptStats(scope string) map[string]any {
	outcomes := func(kv ...any) map[string]any {
		m := map[string]any{}
		for _, o := range []string{"forwarded", "replayed", "released", "conflict", "mismatch", "missing_key",
			"invalid_key", "unverified", "too_large", "passthrough", "shadowed", "held", "unavailable", "challenge", "accepted"} {
			m[o] = 0
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	type kc = map[string]any
	return map[string]any{
		"window": "1h",
		"scope":  scope,
		"routes": map[string]any{
			"hooks": map[string]any{
				"outcomes":       outcomes("forwarded", 3, "replayed", 3, "mismatch", 1, "conflict", 1, "missing_key", 1),
				"duplicate_rate": 0.5,
				"top_keys":       []any{kc{"key": "k1", "count": 3}, kc{"key": "k2", "count": 1}, kc{"key": "k3", "count": 1}},
				"top_sources":    []any{kc{"source": "s3", "count": 3}, kc{"source": "s1", "count": 1}, kc{"source": "s2", "count": 1}},
				"top_keys_exact": true,
			},
			"shadow": map[string]any{
				"outcomes":       outcomes("forwarded", 1, "shadowed", 1),
				"duplicate_rate": 0,
				"top_keys":       []any{kc{"key": "z1", "count": 1}},
				"top_sources":    []any{kc{"source": "s2", "count": 1}},
				"top_keys_exact": true,
			},
			"held": map[string]any{
				"outcomes": outcomes(), "duplicate_rate": 0, "top_keys": []any{}, "top_sources": []any{}, "top_keys_exact": true,
			},
		},
	}
}

// normalized is v through JSON, so that numbers compare as numbers.
func normalized(tb testing.TB, v any) any {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatal(err)
	}
	return out
}

func adminStats(tb testing.TB, g *gateway.Gateway) any {
	tb.Helper()
	a := adminDo(tb, g, http.MethodGet, "/admin/stats?window=1h", "")
	if a.status != http.StatusOK {
		tb.Fatalf("/admin/stats %d %s", a.status, a.body)
	}
	var v any
	if err := json.Unmarshal(a.body, &v); err != nil {
		tb.Fatal(err)
	}
	return v
}

// TestAdminStatsMemory: exact counts, top keys and top sources for the
// scripted scenario on one process.
func TestAdminStatsMemory(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	script(t, s.upstream, g)
	got, wantStats := adminStats(t, g), normalized(t, scriptStats("replica"))
	if !reflect.DeepEqual(got, wantStats) {
		t.Fatalf("stats\n got %v\nwant %v", got, wantStats)
	}
}

// TestAdminStatsReplicas: two replicas sharing PostgreSQL and Redis, the
// scenario delivered through both in turn; either one's /admin/stats gives
// the exact numbers of both (recording is flushed every second, so poll).
func TestAdminStatsReplicas(t *testing.T) {
	s := sharedSetup(t)
	a, b := s.start(t), s.start(t)
	script(t, s.upstream, a, b)
	wantStatsOn(t, normalized(t, scriptStats("cluster")), a, b)
}

// /admin/stats says whose deliveries it counts: with a Redis screen every
// replica's, otherwise (the memory screen, or none, beside a shared
// ledger) only the replica's that answers.
func TestAdminStatsScope(t *testing.T) {
	for screen, want := range map[string]string{"none": "replica", "memory": "replica", "redis": "cluster"} {
		t.Run(screen, func(t *testing.T) {
			s := newSetup(t)
			s.screen = screen
			if screen == "redis" {
				s.redis, s.pfx = testenv.RedisPrefix(t)
			}
			got, ok := adminStats(t, s.start(t)).(map[string]any)
			if !ok || got["scope"] != want {
				t.Fatalf("/admin/stats scope %v, want %q: %v", got["scope"], want, got)
			}
		})
	}
}

// Two deployments sharing one Redis under different screen.prefix values
// keep their statistics apart: the prefix namespaces the stats keys too.
func TestAdminStatsKeptApartByPrefix(t *testing.T) {
	s := sharedSetup(t)
	a := s.start(t)
	other := newSetup(t)
	other.store, other.dsn = "postgres", testenv.Postgres(t)
	other.screen = "redis"
	other.redis, other.pfx = testenv.RedisPrefix(t)
	b := other.start(t)
	script(t, s.upstream, a)
	wantStats := normalized(t, scriptStats("cluster"))
	if !testenv.Poll(5*time.Second, func() bool { return reflect.DeepEqual(adminStats(t, a), wantStats) }) {
		t.Fatalf("stats of the scripted deployment: %v", adminStats(t, a))
	}
	got, _ := json.Marshal(adminStats(t, b))
	var st struct {
		Routes map[string]struct {
			Outcomes map[string]int `json:"outcomes"`
		} `json:"routes"`
	}
	if err := json.Unmarshal(got, &st); err != nil {
		t.Fatal(err)
	}
	for route, r := range st.Routes {
		for o, n := range r.Outcomes {
			if n != 0 {
				t.Fatalf("deployment with prefix %q counts %s %s=%d it never saw (prefix %q's): %s", other.pfx, route, o, n, s.pfx, got)
			}
		}
	}
}

// TestAdminReadyz: 200 while ledger and screen answer; 503 naming the
// screen, without its error, when a dedicated Redis stops; 200 again once
// it is back.
func TestAdminReadyz(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := newSetup(t)
	s.screen, s.redis, s.pfx = "redis", srv.Addr, "hs:"
	g := s.start(t)
	ready := func() answer { return exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/readyz", "") }
	if a := ready(); a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != `{"ledger":{"ok":true},"screen":{"ok":true}}` {
		t.Fatalf("/readyz %d %s", a.status, a.body)
	}
	srv.Stop()
	a := ready()
	if a.status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with Redis stopped: %d %s", a.status, a.body)
	}
	if body := strings.TrimSpace(string(a.body)); body != `{"ledger":{"ok":true},"screen":{"ok":false,"error":"unreachable"}}` {
		t.Errorf("/readyz body %s", body)
	}
	srv.Start()
	testenv.Eventually(t, 10*time.Second, "/readyz 200 after Redis came back", func() bool { return ready().status == http.StatusOK })

	mem := newSetup(t)
	mg := mem.start(t)
	if a := exchange(t, http.MethodGet, "http://"+mg.AdminAddr()+"/readyz", ""); a.status != http.StatusOK {
		t.Errorf("memory screen /readyz %d %s", a.status, a.body)
	}
}

// TestAdminReadyzWithoutSchema: with store.auto_migrate false and the
// ledger table not created yet (`gateway migrate` not run for this
// release), the database answers but every delivery is refused 503:
// /readyz must say so (naming the ledger), or a load balancer sends the
// replica every delivery. Once the schema exists it is ready, without a
// restart.
func TestAdminReadyzWithoutSchema(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    func(testing.TB) *setup
	}{{"sqlite", newSetup}, {"postgres", sharedSetup}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s(t)
			s.mutate = func(c *config.Config) { c.Store.AutoMigrate = false }
			g := s.start(t)
			ready := func() answer { return exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/readyz", "") }
			want(t, deliver(t, g, "/hooks", `{"id":"evt_noschema"}`), http.StatusServiceUnavailable, "unavailable")
			a := ready()
			if a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), `"ledger":{"ok":false`) {
				t.Fatalf("/readyz without the ledger table: %d %s, want 503 naming the ledger (deliveries are refused 503)", a.status, a.body)
			}
			if err := g.Ledger().Migrate(context.Background()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			if a := ready(); a.status != http.StatusOK {
				t.Fatalf("/readyz once the schema exists: %d %s", a.status, a.body)
			}
			want(t, deliver(t, g, "/hooks", `{"id":"evt_noschema"}`), http.StatusOK, "forwarded")
		})
	}
}

// TestAdminReadyzWhileTheLedgerRefusesWrites: a replica starts while its
// role's sessions are read-only (default_transaction_read_only, as on a
// hot standby): reads answer, writes fail. /readyz says so, and the first
// delivery is refused 503 with nothing forwarded, not forwarded to fail
// its commit. Once the role takes writes again, /readyz turns ready by
// itself, with no delivery needed: a replica out of rotation gets none.
func TestAdminReadyzWhileTheLedgerRefusesWrites(t *testing.T) {
	s := newSetup(t)
	s.store, s.dsn = "postgres", testenv.Postgres(t)
	s.start(t) // migrates, as the admin user
	role := testenv.PostgresRole(t, "hs_ro_")
	u, err := url.Parse(s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	testenv.PostgresExec(t, "GRANT USAGE ON SCHEMA "+schema+" TO "+role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+schema+" TO "+role,
		"ALTER ROLE "+role+" SET default_transaction_read_only = on")
	s.dsn = testenv.AsRole(t, s.dsn, role)
	g := s.start(t)

	ready := func() answer { return exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/readyz", "") }
	if a := ready(); a.status != http.StatusServiceUnavailable || strings.TrimSpace(string(a.body)) != `{"ledger":{"ok":false,"error":"refusing writes"},"screen":{"ok":true}}` {
		t.Fatalf("/readyz while the ledger refuses writes: %d %s, want 503 naming the ledger refusing writes", a.status, a.body)
	}
	want(t, deliver(t, g, "/hooks", `{"id":"evt_ro_first"}`), http.StatusServiceUnavailable, "unavailable")
	if n := s.upstream.count("evt_ro_first"); n != 0 {
		t.Fatalf("upstream received the first delivery after a start on a ledger refusing writes %d times, want 0 (it could not be recorded)", n)
	}

	testenv.PostgresExec(t, "ALTER ROLE "+role+" RESET default_transaction_read_only")
	testenv.Eventually(t, 10*time.Second, "/readyz 200 once the role takes writes", func() bool { return ready().status == http.StatusOK })
	want(t, deliver(t, g, "/hooks", `{"id":"evt_ro_first"}`), http.StatusOK, "forwarded")
	want(t, deliver(t, g, "/hooks", `{"id":"evt_ro_first"}`), http.StatusOK, "replayed")
	if n := s.upstream.count("evt_ro_first"); n != 1 {
		t.Fatalf("upstream received evt_ro_first %d times, want 1", n)
	}
}

// TestAdminDeleteReachesOtherReplicas: replica A forwards and keeps the
// record in its local cache; an operator deletes it through replica B; A's
// cache drops it (Redis pub/sub), so the next delivery to A is forwarded —
// also when B keeps no cache of its own (an admin-serving replica, say),
// whose deletes were not published at all.
func TestAdminDeleteReachesOtherReplicas(t *testing.T) {
	for _, bCache := range []string{"1MiB", "0"} {
		t.Run("B's local_cache "+bCache, func(t *testing.T) { deleteReachesOtherReplicas(t, sharedSetup(t), bCache) })
	}
}

// deleteReachesOtherReplicas: a DELETE through replica B makes replica A,
// which has the record in its local cache, forward the next delivery.
func deleteReachesOtherReplicas(t *testing.T, s *setup, bCache string) {
	s.localCache = "1MiB"
	a := s.start(t)
	s.localCache = bCache
	b := s.start(t)
	body := `{"id":"evt_x"}`
	want(t, deliver(t, a, "/hooks", body), http.StatusOK, "forwarded")
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed")
	want(t, deliver(t, a, "/hooks", body), http.StatusOK, "replayed")

	if r := adminDo(t, b, http.MethodDelete, recordURL("hooks", "evt_x"), ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE via B: %d %s", r.status, r.body)
	}
	// The invalidation reaches A within milliseconds; until then A may
	// still replay from its cache.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := deliver(t, a, "/hooks", body)
		if r.outcome() == "forwarded" {
			break
		}
		want(t, r, http.StatusOK, "replayed")
		if time.Now().After(deadline) {
			t.Fatal("replica A kept replaying a deleted record from its cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.upstream.count("evt_x"); n != 2 {
		t.Fatalf("upstream saw evt_x %d times, want 2", n)
	}
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed")
	want(t, deliver(t, a, "/hooks", body), http.StatusOK, "replayed")
}

// With screen.driver none, replicas share PostgreSQL but no channel for
// invalidations: a DELETE through one replica must still make the next
// delivery at another forwarded (SPEC §8), not replayed from that
// replica's in-process cache for minutes.
func TestAdminDeleteReachesOtherReplicasWithoutScreen(t *testing.T) {
	s := sharedSetup(t)
	s.screen = "none" // and the default local_cache
	a, b := s.start(t), s.start(t)
	body := `{"id":"evt_none"}`
	want(t, deliver(t, a, "/hooks", body), http.StatusOK, "forwarded")
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed")
	if r := adminDo(t, a, http.MethodDelete, recordURL("hooks", "evt_none"), ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE via A: %d %s", r.status, r.body)
	}
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "forwarded")
	want(t, deliver(t, a, "/hooks", body), http.StatusOK, "replayed")
	if n := s.upstream.count("evt_none"); n != 2 {
		t.Fatalf("upstream saw evt_none %d times, want 2", n)
	}
}

// With telemetry.metrics.prometheus off, /metrics answers 404 with a
// problem document, like every other refusal of the admin listener.
func TestAdminMetricsOff(t *testing.T) {
	s := newSetup(t)
	s.mutate = func(c *config.Config) { c.Telemetry.Metrics.Prometheus = false }
	g := s.start(t)
	wantAdminProblem(t, adminDo(t, g, http.MethodGet, "/metrics", ""), http.StatusNotFound)
}

// While a replica drains after SIGTERM, /readyz answers 503 ("server":
// shutting down) so that a load balancer stops sending it deliveries; the
// delivery in flight is still answered.
func TestAdminReadyzWhileDraining(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	release := s.upstream.gate("evt_drain")
	defer release()
	first := make(chan answer, 1)
	go func() { first <- deliver(t, g, "/hooks", `{"id":"evt_drain"}`) }()
	<-s.upstream.arrived
	ready := func() answer { return exchange(t, http.MethodGet, "http://"+g.AdminAddr()+"/readyz", "") }
	if a := ready(); a.status != http.StatusOK {
		t.Fatalf("/readyz before shutdown: %d %s", a.status, a.body)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- g.Shutdown(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a := ready()
		if a.status == http.StatusServiceUnavailable {
			if !strings.Contains(string(a.body), `"server":{"ok":false,"error":"shutting down"}`) {
				t.Errorf("/readyz while draining: %s", a.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d while the replica drains", a.status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	want(t, <-first, http.StatusOK, "forwarded")
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// SPEC §1: 408, 425, 429 and 5xx are never final. An operator recording
// one for a held key would have every repeat replay a "try again" for the
// record's whole retention, a retry loop the provider cannot leave: the
// resolve is refused (400) and the key stays held.
func TestAdminResolveRefusesNeverFinalStatus(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	up := s.upstream
	open := up.gate("h-503")
	t.Cleanup(open)
	want(t, deliver(t, g, "/held", `{"id":"h-503"}`), http.StatusGatewayTimeout, "held")
	<-up.arrived
	open()
	for _, status := range []int{408, 425, 429, 500, 503} {
		body := fmt.Sprintf(`{"action":"record","status":%d,"body":"try later"}`, status)
		wantAdminProblem(t, adminDo(t, g, http.MethodPost, recordURL("held", "h-503")+"/resolve", body), http.StatusBadRequest)
	}
	want(t, deliver(t, g, "/held", `{"id":"h-503"}`), http.StatusConflict, "held")
	if n := up.count("h-503"); n != 1 {
		t.Errorf("held key reached the upstream %d times, want 1", n)
	}
}

// TestAdminKeysNoDeliveryCanHave: a key that is not valid UTF-8 or holds a
// NUL cannot name a record (ingress refuses it, invalid_key), so on
// PostgreSQL — which refuses such text — GET still answers 404 and DELETE
// 204 (SPEC §8), not a 503 "retry later" that a script would retry forever.
func TestAdminKeysNoDeliveryCanHave(t *testing.T) {
	s := sharedSetup(t)
	g := s.start(t)
	for _, esc := range []string{"%FF", "a%C3", "nul%00byte"} {
		t.Run(esc, func(t *testing.T) {
			path := "/admin/routes/hooks/records/" + esc
			wantAdminProblem(t, adminDo(t, g, http.MethodGet, path, ""), http.StatusNotFound)
			if a := adminDo(t, g, http.MethodDelete, path, ""); a.status != http.StatusNoContent {
				t.Errorf("DELETE %s: %d %s, want 204", esc, a.status, a.body)
			}
			wantAdminProblem(t, adminDo(t, g, http.MethodPost, path+"/resolve", `{"action":"release"}`), http.StatusNotFound)
		})
	}
	if strings.Contains(s.logs.String(), "ledger call failed") {
		t.Errorf("a key no delivery can have was reported as a ledger failure:\n%s", s.logs)
	}
}

// TestAdminMethodsAndAllow: /metrics answers GET and HEAD only, like
// /healthz and /readyz; a 405 on a record names in Allow only the methods
// that URL answers (POST only with the /resolve suffix).
func TestAdminMethodsAndAllow(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
		a := adminDo(t, g, m, "/metrics", "")
		wantAdminProblem(t, a, http.StatusMethodNotAllowed)
		if got := a.header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s /metrics: Allow %q, want \"GET, HEAD\"", m, got)
		}
	}
	a := adminDo(t, g, http.MethodPut, recordURL("hooks", "evt_1"), "")
	wantAdminProblem(t, a, http.StatusMethodNotAllowed)
	allow := a.header.Get("Allow")
	for _, m := range strings.Split(allow, ", ") {
		if m == http.MethodHead || m == "" {
			continue
		}
		body := ""
		if m == http.MethodPost {
			body = `{"action":"release"}`
		}
		if b := adminDo(t, g, m, recordURL("hooks", "evt_1"), body); b.status == http.StatusMethodNotAllowed {
			t.Errorf("PUT's Allow %q names %s, which answers 405 on the same URL", allow, m)
		}
	}
	a = adminDo(t, g, http.MethodPut, recordURL("hooks", "evt_1")+"/resolve", "")
	wantAdminProblem(t, a, http.StatusMethodNotAllowed)
	if got := a.header.Get("Allow"); got != "GET, HEAD, DELETE, POST" {
		t.Errorf("PUT .../resolve: Allow %q", got)
	}
}

// wantStatsOn polls each gateway's /admin/stats until it equals want
// (recording is flushed every second), failing after 5 s.
func wantStatsOn(t *testing.T, want any, gws ...*gateway.Gateway) {
	t.Helper()
	for _, g := range gws {
		if !testenv.Poll(5*time.Second, func() bool { return reflect.DeepEqual(adminStats(t, g), want) }) {
			t.Fatalf("stats from %s\n got %v\nwant %v", g.AdminAddr(), adminStats(t, g), want)
		}
	}
}

// Screen keys are {prefix}{route}:{key}: a prefix not ending in ":" can
// name another deployment's keys on a shared Redis, so it is warned about.
func TestScreenPrefixWithoutSeparatorIsWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		suffix string
		warned bool
	}{{"", false}, {"shop", true}} {
		s := sharedSetup(t)
		s.store, s.dsn = "sqlite", filepath.Join(t.TempDir(), "ledger.db")
		s.pfx += tc.suffix
		s.start(t)
		if got := strings.Contains(s.logs.String(), "screen.prefix does not end"); got != tc.warned {
			t.Errorf("prefix %q: warned %v, want %v; logs:\n%s", s.pfx, got, tc.warned, s.logs)
		}
	}
}
