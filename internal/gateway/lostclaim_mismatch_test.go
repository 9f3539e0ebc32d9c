package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
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
	tamperedBody := fmt.Sprintf(`{"id":%q,"amount":"999.99"}`, key)
	tampered := send(t, a, "/hooks", tamperedBody)
	wantOutcome(t, tampered, 422, "mismatch")

	// The stalled claim lands once the network heals. Whether the stalled
	// bytes themselves still reach Redis depends on when the client gave
	// up on its connection, so the test lands the same claim through the
	// screen's own script: the tampered body's fingerprint, a live lease.
	landStaleClaim(t, c, key, sha256.Sum256([]byte(tamperedBody)))
	if !c.inScreen(t, rc, key) {
		t.Fatal("the stale claim is not in the screen")
	}

	late := send(t, b, "/hooks", original)
	if n := up.count(key); n != 1 {
		t.Fatalf("upstream received the event %d times, want 1", n)
	}
	wantOutcome(t, late, 200, "replayed")
	sameReply(t, first, late)
}

// landStaleClaim claims key on route hooks in the cluster's screen as an
// owner that is gone, holding fingerprint fp.
func landStaleClaim(t *testing.T, c cluster, key string, fp [32]byte) {
	t.Helper()
	s, err := redisscreen.New(redisscreen.Options{Addrs: c.addrs, Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	claim, err := s.Claim(context.Background(), idempotency.ClaimRequest{
		Ref: idempotency.Ref{Route: "hooks", Key: key}, Owner: "stalled-replica",
		Fingerprint: fp[:], Lease: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status != idempotency.Acquired {
		t.Fatalf("stale claim: status %v, want acquired", claim.Status)
	}
}
