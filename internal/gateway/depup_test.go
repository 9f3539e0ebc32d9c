package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A ledger outage with no delivery in flight (every replica not ready,
// out of its Service) shows on /metrics: hookstamp_dependency_up runs
// /readyz's check at each scrape, where hookstamp_dependency_errors_total
// counts only deliveries' failed calls.
func TestDependencyUpSeesAnIdleLedgerOutage(t *testing.T) {
	t.Parallel()
	dsn, proxy := testenv.PostgresBehindProxy(t)
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Store.Driver, cfg.Store.DSN = "postgres", dsn
	cfg.Screen.Driver = "none"
	cfg.Admin.Listen = "127.0.0.1:0"
	g := startGatewayWith(t, cfg, Options{Logger: testLogger(t)})
	waitMetrics(t, g, `hookstamp_dependency_up{dependency="ledger"} 1`)

	proxy.Cut()
	start := time.Now()
	waitMetrics(t, g, `hookstamp_dependency_up{dependency="ledger"} 0`)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the outage showed after %v", d)
	}
	if status, _ := get(t, "http://"+g.AdminAddr()+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d during the outage, want 503", status)
	}
	proxy.Restore()
	waitMetrics(t, g, `hookstamp_dependency_up{dependency="ledger"} 1`)
}
