package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/console"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/stats"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// hungEnv is the console of many async routes over a PostgreSQL ledger
// reached through a fault proxy, to hang.
func hungEnv(t *testing.T, routes int) (*env, *testenv.FaultProxy) {
	t.Helper()
	ctx := context.Background()
	dsn, proxy := testenv.PostgresBehindProxy(t)
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	names := make([]string, routes)
	consoleRoutes := make([]console.Route, routes)
	for i := range names {
		names[i] = fmt.Sprintf("route%02d", i)
		consoleRoutes[i] = console.Route{Name: names[i], StoresRequests: true, Async: true}
	}
	log := slog.New(slog.DiscardHandler)
	depths := func(ctx context.Context) (map[string]console.Depth, error) {
		st, err := l.QueueStats(ctx)
		out := make(map[string]console.Depth, len(st))
		for r, s := range st {
			out[r] = console.Depth{Queued: s.Queued, Dead: s.Dead, OldestQueued: s.OldestQueued}
		}
		return out, err
	}
	h := admin.New(admin.Options{Token: token, Routes: names, Ledger: l, Stats: stats.NewMemory(stats.MemoryOptions{}), Logger: log,
		Console: func(s *admin.Server) http.Handler {
			return console.New(console.Options{Token: token, Admin: s, EventLog: s, Queue: s, Depths: depths, Logger: log,
				Throttle: s.Throttle(), Routes: consoleRoutes})
		}})
	e := &env{srv: httptest.NewServer(h), ledger: l}
	t.Cleanup(e.srv.Close)
	t.Cleanup(proxy.Restore) // before the ledger closes its connections
	return e, proxy
}

// With the ledger hung, the pages that ask it something of every route
// answer once its wait is over, not once a route: whole, with what is
// known, the rest marked unknown, and a notice that the ledger did not
// answer. Waiting a route, they outlasted the admin listener's write
// timeout (60 s), which cut them off: an empty reply, no error shown.
func TestPagesAnswerWhileTheLedgerHangs(t *testing.T) {
	e, proxy := hungEnv(t, 12)
	b := e.browser(t)
	b.mustSignIn()
	for _, path := range []string{"/ui/", "/ui/held", "/ui/dead"} {
		if p := b.get(path); p.status != http.StatusOK {
			t.Fatalf("%s with the ledger up: %d\n%s", path, p.status, p.body)
		}
	}
	proxy.Hang()

	type answer struct {
		path, body string
		status     int
		err        error
	}
	paths := []string{"/ui/", "/ui/held", "/ui/dead"}
	answers := make(chan answer, len(paths))
	for _, path := range paths {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
			// Well before the write timeout, and before a page waiting the
			// ledger's 5 s for each of 12 routes would answer.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := b.c.Do(req.WithContext(ctx))
			if err != nil {
				answers <- answer{path: path, err: err}
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			answers <- answer{path, string(body), res.StatusCode, err}
		}()
	}
	for range paths {
		a := <-answers
		if a.err != nil {
			t.Errorf("%s with the ledger hung: %v", a.path, a.err)
			continue
		}
		const notice = "The ledger did not answer: what it holds is shown as unknown on this page"
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, notice) || !strings.HasSuffix(a.body, "</html>\n") {
			t.Errorf("%s with the ledger hung: %d, want 503, the page whole with %q:\n%s", a.path, a.status, notice, a.body)
		}
		if !strings.Contains(a.body, "route11") || !strings.Contains(a.body, "unknown") {
			t.Errorf("%s with the ledger hung does not show the last route as unknown:\n%s", a.path, a.body)
		}
	}
}
