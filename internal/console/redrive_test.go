package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// redriven is a queue whose redrive of a route queues n, then fails with
// err.
type redriven struct {
	n   int
	err error
}

func (redriven) Redeliver(context.Context, idempotency.Ref) error { return nil }
func (q redriven) Redrive(context.Context, string, []string) (int, error) {
	return q.n, q.err
}

// "Redrive all" says how many dead deliveries it queued again; one that
// failed midway shows the admin API's own words, which say how many.
func TestRedriveAllSaysHowManyItQueued(t *testing.T) {
	partial := &admin.OpError{Status: http.StatusServiceUnavailable,
		Detail: "the ledger did not answer; retry later: 3000 dead deliveries were queued again before it failed, and stay queued; a retry queues the rest"}
	for _, tc := range []struct {
		name   string
		queue  redriven
		status int
		want   string
	}{
		{"many", redriven{n: 70000}, http.StatusOK, "Queued again: the route&#39;s 70000 dead deliveries get a fresh set of attempts."},
		{"one", redriven{n: 1}, http.StatusOK, "Queued again: the route&#39;s one dead delivery gets a fresh set of attempts."},
		{"failed midway", redriven{n: 3000, err: partial}, http.StatusServiceUnavailable, "3000 dead deliveries were queued again before it failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{queue: tc.queue})
			b := e.browser(t)
			tok := b.mustSignIn()
			p := b.post("/ui/act", url.Values{"csrf": {tok}, "do": {"redrive-all"}, "route": {"pay"}})
			if p.status == http.StatusSeeOther {
				p = b.get(p.header.Get("Location"))
			}
			if p.status != tc.status || !strings.Contains(p.body, tc.want) {
				t.Fatalf("redrive all: %d, want %d with %q; body:\n%s", p.status, tc.status, tc.want, p.body)
			}
		})
	}
}
