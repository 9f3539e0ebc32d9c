package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Chaos seed 974231301, event s18-000198: the original delivery is
// recorded in the ledger while the screen holds nothing of it; a copy with
// a tampered body is rightly refused (422) by a replica whose Redis is
// stalled, but its screen claim, held in the stalled connection, lands
// once the network heals — after that replica's breaker opened, so nothing
// tidies it. The provider's retry with the original body must then be
// replayed from the ledger, not refused as key reuse because of the
// tampered copy's fingerprint on that stale claim.
func TestLateScreenClaimOfTamperedCopyDoesNotRefuseOriginal(t *testing.T) {
	c := sharedCluster(t)
	proxy := testenv.StartFaultProxy(t, c.addrs[0])
	up := newUpstream(t)
	slowReceipts(up, 0)
	stalled := c
	stalled.addrs = []string{proxy.Addr}
	a := startGateway(t, stalled.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	b := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	rc := c.redisClient(t)
	ctx := context.Background()

	const key = "evt_late_tampered_claim"
	original := fmt.Sprintf(`{"id":%q,"amount":"111.96"}`, key)
	first := send(t, b, "/hooks", original)
	wantOutcome(t, first, 200, "forwarded")
	// As if the original had bypassed the screen (its replica's breaker
	// was open): only the ledger knows it.
	testenv.Eventually(t, 5*time.Second, "the original's screen entry", func() bool { return c.inScreen(t, rc, key) })
	if err := rc.Del(ctx, c.prefix+"hooks:"+key).Err(); err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole()
	for i := range idempotency.BreakerFailures - 1 {
		other := fmt.Sprintf("evt_late_tampered_other_%d", i)
		wantOutcome(t, send(t, a, "/hooks", fmt.Sprintf(`{"id":%q}`, other)), 200, "forwarded")
	}
	// The third screen failure in a row: the breaker opens as this copy
	// falls back to the ledger, which knows the original's fingerprint.
	tampered := send(t, a, "/hooks", fmt.Sprintf(`{"id":%q,"amount":"999.99"}`, key))
	wantOutcome(t, tampered, 422, "mismatch")

	proxy.Proxy.Restore() // the stalled bytes reach Redis, as after a network stall
	testenv.Eventually(t, 5*time.Second, "the tampered copy's claim landing in the screen", func() bool { return c.inScreen(t, rc, key) })

	late := send(t, b, "/hooks", original)
	if n := up.count(key); n != 1 {
		t.Fatalf("upstream received the event %d times, want 1", n)
	}
	wantOutcome(t, late, 200, "replayed")
	sameReply(t, first, late)
}
