package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A synchronous route's redelivery sends what its first forward sent. The
// sender's forwarding headers, dropped on the first forward from a peer
// that is not a trusted proxy, were once stored as sent and believed at
// redelivery: the upstream then got X-Forwarded-For 6.6.6.6 and an
// X-Original-URL of the sender's choosing. From a trusted proxy they are
// passed on both times.
func TestSyncRedeliverySendsWhatTheFirstForwardSent(t *testing.T) {
	spoofed := []string{
		"X-Forwarded-For", "6.6.6.6", "X-Forwarded-Host", "evil", "X-Forwarded-Proto", "https",
		"X-Forwarded-Prefix", "/evil", "X-Real-Ip", "7.7.7.7", "X-Original-Url", "/admin/delete-all",
	}
	for _, tc := range []struct {
		name    string
		trusted bool
		want    map[string]string // "" = absent; host: the gateway's own
	}{
		{"untrusted peer", false, map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "host", "X-Forwarded-Proto": "http",
			"X-Forwarded-Prefix": "", "X-Real-Ip": "", "X-Original-Url": "",
		}},
		{"trusted proxy", true, map[string]string{
			"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "host", "X-Forwarded-Proto": "https",
			"X-Forwarded-Prefix": "/evil", "X-Real-Ip": "7.7.7.7", "X-Original-Url": "/admin/delete-all",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []http.Header
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				got = append(got, r.Header.Clone())
				mu.Unlock()
				fmt.Fprint(w, `{"ok":true}`)
			}))
			t.Cleanup(up.Close)
			received := func() []http.Header {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(got)
			}

			cfg := gwConfig(t, up.URL, dbPath(t), "    record: {request: true}\n", "")
			cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
			if tc.trusted {
				cfg.Server.TrustedProxies = []string{"127.0.0.1/32"}
			}
			g := startGatewayWith(t, cfg, asyncOptions(t))
			host := strings.TrimPrefix(g.URL(), "http://")

			hdr := append([]string{"X-Event-Id", "evt_spoof", "X-Delivery", "kept"}, spoofed...)
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_spoof"}`, hdr...), http.StatusOK, "forwarded")
			if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_spoof/redeliver", ""); status != http.StatusAccepted {
				t.Fatalf("redeliver = %d %s, want 202", status, body)
			}
			testenv.Eventually(t, 10*time.Second, "the redelivery's attempt recorded", func() bool {
				return len(attemptsOf(t, g, "evt_spoof")) == 2
			})
			sent := received()
			if len(sent) != 2 {
				t.Fatalf("upstream received %d requests, want 2 (the forward and the redelivery)", len(sent))
			}
			check := func(where string, values func(name string) []string) {
				t.Helper()
				for name, want := range tc.want {
					if want == "host" {
						want = host
					}
					if v := values(name); (want == "" && len(v) != 0) || (want != "" && !slices.Equal(v, []string{want})) {
						t.Errorf("%s: %s = %q, want %q", where, name, v, want)
					}
				}
			}
			for i, h := range sent {
				which := [...]string{"first forward", "redelivery"}[i]
				check(which, h.Values)
				if h.Get("X-Delivery") != "kept" || h.Get("Idempotency-Key") != "evt_spoof" {
					t.Errorf("%s: X-Delivery %q, Idempotency-Key %q, want the delivery's own", which, h.Get("X-Delivery"), h.Get("Idempotency-Key"))
				}
			}

			// The event log shows the request as the upstream got it.
			var detail struct {
				Request struct {
					Headers map[string][]string `json:"headers"`
				} `json:"request"`
			}
			if err := json.Unmarshal([]byte(adminGet(t, g, "/admin/routes/hooks/records/evt_spoof", asyncAdminToken)), &detail); err != nil {
				t.Fatal(err)
			}
			check("stored request shown", func(name string) []string { return detail.Request.Headers[name] })
		})
	}
}
