package console_test

import (
	"context"
	"database/sql"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/console"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/stats"
	"github.com/hookstamp/hookstamp/internal/testenv"
	"github.com/hookstamp/hookstamp/internal/throttle"
)

const token = "console-test-token"

// env is the admin listener with its console over a real SQLite ledger.
type env struct {
	srv    *httptest.Server
	ledger *sqlledger.Ledger
	stats  *stats.Memory
	clock  *testenv.Clock
	// throttle is the admin API's and the sign-in's table of wrong tokens.
	throttle *throttle.Throttle
}

type envOptions struct {
	tls           bool
	token         string
	noUI          bool
	noToken       bool
	traceURL      string
	queue         console.Queue // nil: none
	secureCookies bool
	hosts         []string // console.Options.Hosts
	// clusterStats makes the statistics every replica's, as with a Redis
	// screen.
	clusterStats bool
	// depths: console.Options.Depths answers them (nil: no Depths).
	depths map[string]console.Depth
	// requeue: the admin API queues deliveries again in the ledger, whose
	// jobs go nowhere.
	requeue bool
}

func newEnv(tb testing.TB, eo envOptions) *env {
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
	if eo.token == "" && !eo.noToken {
		eo.token = token
	}
	e := &env{ledger: l, stats: stats.NewMemory(stats.MemoryOptions{}), clock: testenv.NewClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))}
	log := slog.New(slog.DiscardHandler)
	var st admin.Stats = e.stats
	if eo.clusterStats {
		st = clusterStats{e.stats}
	}
	o := admin.Options{Token: eo.token, Routes: []string{"pay", "ship"}, Ledger: l, Stats: st, Logger: log, Now: e.clock.Now}
	if eo.requeue {
		l.UseJobs(noJobs{})
		o.Redeliver = l
	}
	if !eo.noUI {
		o.Console = func(s *admin.Server) http.Handler {
			var depths func(context.Context) (map[string]console.Depth, error)
			if eo.depths != nil {
				depths = func(context.Context) (map[string]console.Depth, error) { return eo.depths, nil }
			}
			return console.New(console.Options{Depths: depths,
				Token: eo.token, Admin: s, EventLog: s, Queue: eo.queue, Logger: log, Now: e.clock.Now, TraceURL: eo.traceURL,
				Throttle: s.Throttle(), SecureCookies: eo.secureCookies, Hosts: eo.hosts,
				Routes: []console.Route{{Name: "pay", StoresRequests: true}, {Name: "ship"}},
			})
		}
	}
	h := admin.New(o)
	e.throttle = h.Throttle()
	if eo.tls {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	tb.Cleanup(e.srv.Close)
	return e
}

// browser is a client with a cookie jar that does not follow redirects.
type browser struct {
	tb  testing.TB
	e   *env
	c   *http.Client
	url *url.URL
}

func (e *env) browser(tb testing.TB) *browser {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client() // a copy: the server's client is shared
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u, _ := url.Parse(e.srv.URL)
	return &browser{tb: tb, e: e, c: &c, url: u}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(req *http.Request) page {
	b.tb.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.tb.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(body)}
}

func (b *browser) get(path string) page {
	b.tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.e.srv.URL+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) page {
	b.tb.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token in a page's forms.
func csrf(tb testing.TB, p page) string {
	tb.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		tb.Fatalf("no csrf field in the page:\n%s", p.body)
	}
	return m[1]
}

var hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmForm opens the confirmation of do on route's key ("" for a
// route's action) and returns its form's fields as the browser sends
// them.
func (b *browser) confirmForm(do, route, key string) url.Values {
	b.tb.Helper()
	q := url.Values{"do": {do}, "route": {route}}
	if key != "" {
		q.Set("key", key)
	}
	p := b.get("/ui/confirm?" + q.Encode())
	at := strings.Index(p.body, `action="/ui/act"`)
	if p.status != http.StatusOK || at < 0 {
		b.tb.Fatalf("confirmation of %s %s %q: %d\n%s", do, route, key, p.status, p.body)
	}
	form := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(p.body[at:], -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	return form
}

// signIn signs b in with tok and returns the answer to the sign-in POST.
func (b *browser) signIn(tok string) page {
	b.tb.Helper()
	lp := b.get("/ui/login")
	return b.post("/ui/login", url.Values{"csrf": {csrf(b.tb, lp)}, "token": {tok}})
}

// mustSignIn signs in and returns the session's CSRF token.
func (b *browser) mustSignIn() string {
	b.tb.Helper()
	if p := b.signIn(token); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
		b.tb.Fatalf("sign-in: %d %s", p.status, p.header.Get("Location"))
	}
	p := b.get("/ui/")
	if p.status != http.StatusOK {
		b.tb.Fatalf("overview after sign-in: %d", p.status)
	}
	return csrf(b.tb, p)
}

func (b *browser) cookie(name string) *http.Cookie {
	for _, c := range b.c.Jar.Cookies(&url.URL{Scheme: b.url.Scheme, Host: b.url.Host, Path: "/ui/"}) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// hold writes a held row for ref.
func (e *env) hold(tb testing.TB, ref idempotency.Ref) {
	tb.Helper()
	now := time.Now()
	rec := &idempotency.Record{Ref: ref, State: idempotency.StateHeld, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Source: "10.0.0.9"}
	if err := e.ledger.Commit(context.Background(), rec, "owner", now); err != nil {
		tb.Fatalf("commit held: %v", err)
	}
}

// noJobs takes the ledger's delivery jobs and runs none.
type noJobs struct{}

func (noJobs) InsertTx(context.Context, *sql.Tx, []sqlledger.Delivery) error { return nil }
func (noJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) {
	return false, nil
}

// holdAcked stores ref as an async intake does (its provider acknowledged)
// and holds it, as an attempt without an answer on a record.ambiguous:
// hold route does. The env needs requeue.
func (e *env) holdAcked(tb testing.TB, ref idempotency.Ref) {
	tb.Helper()
	ctx, now := context.Background(), time.Now()
	e.enqueue(tb, ref)
	if _, err := e.ledger.Settle(ctx, &sqlledger.Settlement{Ref: ref, State: idempotency.StateHeld, KeepUntil: now.Add(time.Hour),
		Attempt: idempotency.Attempt{Ref: ref, StartedAt: now, Replica: "a"}}, now, nil); err != nil {
		tb.Fatalf("hold: %v", err)
	}
}

// enqueue stores ref as an async intake does: queued, its provider
// acknowledged. The env needs requeue.
func (e *env) enqueue(tb testing.TB, ref idempotency.Ref) {
	tb.Helper()
	now := time.Now()
	if _, err := e.ledger.Enqueue(context.Background(), &idempotency.Record{Ref: ref, State: idempotency.StateQueued, ExpiresAt: now.Add(time.Hour),
		Request: &idempotency.Request{Method: "POST", Path: "/pay", Body: []byte("{}")}}, "", now); err != nil {
		tb.Fatalf("enqueue: %v", err)
	}
}

// setState writes ref's state as the queue does (dead, say).
func (e *env) setState(tb testing.TB, ref idempotency.Ref, state idempotency.State) {
	tb.Helper()
	db, err := e.ledger.DB()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(context.Background(), `UPDATE hookstamp_records SET state = ? WHERE route = ? AND "key" = ?`, string(state), ref.Route, ref.Key); err != nil {
		tb.Fatal(err)
	}
}

func (e *env) lookup(tb testing.TB, ref idempotency.Ref) *idempotency.Record {
	tb.Helper()
	rec, err := e.ledger.Lookup(context.Background(), ref)
	if errors.Is(err, idempotency.ErrNotFound) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

// clusterStats are a replica's statistics presented as every replica's.
type clusterStats struct{ *stats.Memory }

func (c clusterStats) Query(ctx context.Context, window time.Duration, topN int) (stats.Snapshot, error) {
	snap, err := c.Memory.Query(ctx, window, topN)
	snap.Scope = stats.ScopeCluster
	return snap, err
}
