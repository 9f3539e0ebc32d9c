package gateway

import (
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// examples/production.yaml is valid, says what docs/production.md says it
// says, and two replicas started from it (pointed at the test's own
// PostgreSQL schema and Redis prefix) forward a signed Stripe event once.
func TestProductionExample(t *testing.T) {
	t.Parallel()
	const secret = "whsec_production_example"
	c := sharedCluster(t)
	environ := []string{
		"DATABASE_URL=" + c.dsn,
		"HOOKSTAMP_ADMIN_TOKEN=example-token",
		"STRIPE_WEBHOOK_SECRET=" + secret,
	}
	load := func() *config.Config {
		t.Helper()
		cfg, err := config.Load("../../examples/production.yaml", environ)
		if err != nil {
			t.Fatalf("examples/production.yaml: %v", err)
		}
		return cfg
	}

	cfg := load()
	if cfg.Store.Driver != config.StorePostgres || cfg.Store.DSN != c.dsn ||
		cfg.Store.OnUnavailable != config.StoreUnavailableReject || !cfg.Store.AutoMigrate {
		t.Fatalf("store section: %+v", cfg.Store)
	}
	if cfg.Screen.Driver != config.ScreenRedis || cfg.Screen.OnUnavailable != config.ScreenUnavailableStore ||
		cfg.Screen.Redis.Password != "" || cfg.Screen.LocalCache == 0 {
		t.Fatalf("screen section: %+v", cfg.Screen)
	}
	if cfg.Store.MaxOpenConns < 4 || cfg.Store.MaxOpenConns > 50 {
		t.Fatalf("store.max_open_conns %d: per replica, it must leave room for several replicas under max_connections", cfg.Store.MaxOpenConns)
	}
	// A forward may take upstream.timeout, then its commit up to 5s more:
	// a shorter lease could expire under a live owner.
	for _, r := range cfg.Routes {
		if cfg.Screen.Lease < r.Upstream.Timeout+5*time.Second {
			t.Fatalf("route %s: lease %v does not cover upstream.timeout %v plus the commit", r.Name, cfg.Screen.Lease, r.Upstream.Timeout)
		}
	}
	if _, err := config.Load("../../examples/production.yaml", environ[:1]); err == nil {
		t.Fatalf("the example loads without HOOKSTAMP_ADMIN_TOKEN and STRIPE_WEBHOOK_SECRET; secrets must be required")
	}

	up := newUpstream(t)
	replica := func() *Gateway {
		cfg := load()
		cfg.Server.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
		cfg.Screen.Redis.Addrs, cfg.Screen.Prefix = c.addrs, c.prefix
		cfg.Routes[0].Upstream.URL = up.URL + "/stripe"
		return startGateway(t, cfg)
	}
	a, b := replica(), replica()
	body := `{"id":"evt_prod_1","object":"event","type":"charge.succeeded"}`
	sig := verifytest.Stripe(secret, []byte(body), time.Now()).Get("Stripe-Signature")
	first := send(t, a, "/webhooks/stripe", body, "Stripe-Signature", sig)
	wantOutcome(t, first, 200, "forwarded")
	again := send(t, b, "/webhooks/stripe", body, "Stripe-Signature", sig)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_prod_1"); n != 1 {
		t.Fatalf("upstream received the event %d times across two replicas, want 1", n)
	}
}
