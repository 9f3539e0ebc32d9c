package gateway

import (
	"testing"
	"time"
)

// SPEC §3 asks only that screen.lease be longer than upstream.timeout, and
// `gateway check` accepts a lease a little longer than the timeout. The
// bound that keeps a forward within its claim's lease must not cut an
// upstream that answers within upstream.timeout when nothing ate into the
// lease (a fast, local claim): the provider would get a 504 for a delivery
// the upstream accepted in time, and its retry a second copy.
func TestForwardWithinTimeoutIsNotCutByTheLeaseReserve(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	slowReceipts(up, 1850*time.Millisecond)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Routes[0].Upstream.Timeout = 1900 * time.Millisecond
	cfg.Screen.Lease = 2 * time.Second
	g := startGateway(t, cfg)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_gap"}`), 200, "forwarded")
}
