package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// newEchoUpstream is an upstream (counting like newUpstream) that answers
// with the request body, so a recorded answer shows which delivery it
// belongs to.
func newEchoUpstream(tb testing.TB) *upstream {
	tb.Helper()
	u := &upstream{byKey: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.total.Add(1)
		u.mu.Lock()
		u.byKey[r.Header.Get("Idempotency-Key")]++
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"processed":` + strconv.Quote(string(body)) + `}`))
	}))
	tb.Cleanup(u.Close)
	return u
}

// A forged delivery that carries the genuine event's key must not occupy
// the key: it gets 401, leaves no trace, and the genuine delivery that
// follows is forwarded and recorded; the ledger holds its answer only.
func TestForgedDeliveryCannotPoisonAKey(t *testing.T) {
	p := newProviders(t)
	attacker, err := verifytest.GenerateRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	const wrongSecret = "whsec_attacker_guess"
	type attempt struct {
		body []byte
		hdr  http.Header
	}
	stripeEvent := func(amount string) []byte {
		return []byte(`{"id":"evt_poison_1","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1","amount_refunded":` + amount + `}}}`)
	}
	githubEvent := func(action string) []byte {
		return []byte(`{"action":"` + action + `","repository":{"full_name":"octocat/Hello-World"}}`)
	}
	form := headers("Content-Type", "application/x-www-form-urlencoded")
	cases := []struct {
		name, route, key string
		forged, genuine  func(now time.Time) attempt
		// leak lists what the 401 must not echo.
		leak func(forged attempt) []string
	}{
		{
			name: "stripe, signed with a guessed secret", route: "stripe", key: "evt_poison_1",
			forged: func(now time.Time) attempt {
				b := stripeEvent("999999")
				return attempt{b, verifytest.Stripe(wrongSecret, b, now)}
			},
			genuine: func(now time.Time) attempt {
				b := stripeEvent("100")
				return attempt{b, verifytest.Stripe(stripeSecret, b, now)}
			},
			leak: func(f attempt) []string {
				sig := f.hdr.Get("Stripe-Signature")
				return []string{stripeSecret, wrongSecret, sig[strings.Index(sig, "v1=")+3:]}
			},
		},
		{
			name: "stripe, unsigned", route: "stripe", key: "evt_poison_1",
			forged: func(time.Time) attempt { return attempt{stripeEvent("5"), nil} },
			genuine: func(now time.Time) attempt {
				b := stripeEvent("100")
				return attempt{b, verifytest.Stripe(stripeSecret, b, now)}
			},
			leak: func(attempt) []string { return []string{stripeSecret} },
		},
		{
			name: "github, the genuine delivery id with a replayed signature of another body", route: "github", key: "poison-delivery-1",
			forged: func(time.Time) attempt {
				// The signature is genuine, but for another body.
				sig := verifytest.GitHub(githubSecret, githubEvent("opened"))
				return attempt{githubEvent("deleted"), merged(sig, headers("X-GitHub-Delivery", "poison-delivery-1"))}
			},
			genuine: func(time.Time) attempt {
				b := githubEvent("opened")
				return attempt{b, merged(verifytest.GitHub(githubSecret, b), headers("X-GitHub-Delivery", "poison-delivery-1"))}
			},
			leak: func(f attempt) []string {
				return []string{githubSecret, strings.TrimPrefix(f.hdr.Get("X-Hub-Signature-256"), "sha256=")}
			},
		},
		{
			name: "alipay, signed with the attacker's own RSA key", route: "alipay", key: "ac05099524730693a8b330c5ecf72da9786",
			forged: func(now time.Time) attempt {
				return attempt{alipayNotify(t, attacker, now, "0.01"), form}
			},
			genuine: func(now time.Time) attempt {
				return attempt{alipayNotify(t, p.alipayKey, now, "20.00"), form}
			},
			leak: func(attempt) []string { return nil },
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := newEchoUpstream(t)
			all := presetCases(p)
			var routes []presetCase
			for _, pc := range all {
				if pc.preset == c.route {
					routes = append(routes, pc)
				}
			}
			db := dbPath(t)
			g := startGateway(t, routesConfig(t, db, "", "", presetRoutes(up.URL, routes), p.environ))
			path := "/webhooks/" + c.route

			forged := c.forged(time.Now())
			r := post(t, g, path, forged.body, forged.hdr)
			wantProblem(t, r, 401, "unverified", c.leak(forged)...)
			if up.total.Load() != 0 {
				t.Fatalf("a forged delivery was forwarded")
			}
			if n := ledgerRows(t, db); n != 0 {
				t.Fatalf("a forged delivery left %d ledger rows", n)
			}
			_, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: c.route, Key: c.key})
			if !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("ledger lookup after the forgery: %v, want ErrNotFound", err)
			}

			genuine := c.genuine(time.Now())
			first := post(t, g, path, genuine.body, genuine.hdr)
			wantOutcome(t, first, 200, "forwarded")
			again := post(t, g, path, genuine.body, genuine.hdr)
			wantOutcome(t, again, 200, "replayed")
			sameReply(t, first, again)

			if n := up.count(c.key); n != 1 || up.total.Load() != 1 {
				t.Fatalf("upstream received the key %d times (%d in all), want 1", n, up.total.Load())
			}
			rec := lookup(t, g, c.route, c.key)
			if want := `{"processed":` + strconv.Quote(string(genuine.body)) + `}`; string(rec.Body) != want {
				t.Fatalf("ledger holds %s, want the genuine delivery's answer %s", rec.Body, want)
			}
			if n := ledgerRows(t, db); n != 1 {
				t.Fatalf("ledger has %d rows, want 1", n)
			}
			// The forgery, sent again now that the key is recorded, is still
			// refused: it is not handed the genuine answer either.
			forged = c.forged(time.Now())
			wantProblem(t, post(t, g, path, forged.body, forged.hdr), 401, "unverified", c.leak(forged)...)
		})
	}
}
