package gateway

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// An async route renamed while one of its deliveries is queued and another
// dead, and a route removed with a held delivery: no queue works their
// rows and the admin API cannot reach them. The gateway says so at start,
// route by route with the counts; the rows of a configured route are not
// named.
func TestStartWarnsOfRoutesNoLongerConfigured(t *testing.T) {
	t.Parallel()
	for _, be := range backends[:2] {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := be.open(t)
			up := newUpstream(t)
			up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
				if r.Header.Get("Idempotency-Key") == "evt_queued" {
					w.Header().Set("Retry-After", "3600")
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			g1 := startWithDeadAndQueued(t, s, up)
			now := time.Now()
			for _, route := range []string{"payments", "renamed"} {
				rec := &idempotency.Record{Ref: idempotency.Ref{Route: route, Key: "evt_held"}, State: idempotency.StateHeld, ExpiresAt: now.Add(time.Hour)}
				if err := g1.Ledger().Commit(t0ctx, rec, "seed", now); err != nil {
					t.Fatalf("hold a delivery of %s: %v", route, err)
				}
			}
			shutdownGateway(t, g1)

			logs := &testenv.Buffer{}
			o := asyncOptions(t)
			o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			renamed := s.config(t, up.URL, "    delivery: async\n", "")
			renamed.Routes[0].Name = "renamed"
			startGatewayWith(t, renamed, o)
			testenv.Eventually(t, 10*time.Second, "a warning for each route not configured", func() bool {
				return lastLogLine(logs, "route=hooks") != "" && lastLogLine(logs, "route=payments") != ""
			})
			for route, counts := range map[string]string{
				"route=hooks":    "queued=1 dead=1 held=0 oldest=",
				"route=payments": "queued=0 dead=0 held=1",
			} {
				line := lastLogLine(logs, route)
				for _, w := range []string{"level=WARN", "route no longer configured", counts, "Configure a route of that name again"} {
					if !strings.Contains(line, w) {
						t.Errorf("the warning for %s lacks %q:\n%s", route, w, line)
					}
				}
			}
			if line := lastLogLine(logs, "route=renamed"); line != "" {
				t.Errorf("a configured route is warned of:\n%s", line)
			}
		})
	}
}
