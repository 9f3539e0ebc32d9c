package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A replica cut off from Redis (a partition of its own: the connection is
// reset) has lost its subscription to deletes, and pub/sub does not keep
// what it missed. An operator's DELETE through another replica answers
// 204, so the provider's redelivery at the cut-off replica must be
// forwarded (SPEC §8), not replayed from its in-process cache for as long
// as the partition lasts: the provider takes the replay for an
// acknowledgement and never delivers the event again.
func TestDeleteReachesAReplicaCutOffFromRedis(t *testing.T) {
	s, a, b, proxy := replicaBehindProxy(t)
	body := `{"id":"evt_cut"}`
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "forwarded")
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed") // from B's cache

	proxy.Cut()
	if r := adminDo(t, a, http.MethodDelete, recordURL("hooks", "evt_cut"), ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE via A: %d %s", r.status, r.body)
	}
	// B's subscription sees its connection reset within milliseconds; a
	// loaded machine gets a few seconds before a replay counts as stale.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		r := deliver(t, b, "/hooks", body)
		if r.outcome() == "forwarded" {
			break
		}
		want(t, r, http.StatusOK, "replayed")
		if time.Since(start) > 5*time.Second {
			t.Fatalf("replica B, cut off from Redis, still replayed the deleted record %v after the DELETE", time.Since(start).Round(time.Second))
		}
	}
	if n := s.upstream.count("evt_cut"); n != 2 {
		t.Fatalf("upstream saw evt_cut %d times, want 2 (the redelivery after the DELETE)", n)
	}
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed")
}

// The same partition when the network hangs instead (nothing is reset, so
// only a ping without a pong tells the subscription is gone): the
// cut-off replica stops replaying the deleted record within seconds, and
// forwards the redelivery, rather than for the minute of silence it
// waited before it pinged.
func TestDeleteReachesAReplicaWhoseRedisHangs(t *testing.T) {
	s, a, b, proxy := replicaBehindProxy(t)
	body := `{"id":"evt_hang"}`
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "forwarded")
	want(t, deliver(t, b, "/hooks", body), http.StatusOK, "replayed") // from B's cache

	proxy.Hang()
	if r := adminDo(t, a, http.MethodDelete, recordURL("hooks", "evt_hang"), ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE via A: %d %s", r.status, r.body)
	}
	start := time.Now()
	for {
		r := deliver(t, b, "/hooks", body)
		if r.outcome() == "forwarded" {
			break
		}
		want(t, r, http.StatusOK, "replayed")
		if time.Since(start) > 20*time.Second {
			t.Fatalf("replica B, its Redis hung, still replayed the deleted record %v after the DELETE", time.Since(start).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("B forwarded the redelivery %v after the DELETE", time.Since(start).Round(100*time.Millisecond))
	if n := s.upstream.count("evt_hang"); n != 2 {
		t.Fatalf("upstream saw evt_hang %d times, want 2", n)
	}
	proxy.Restore()
}

// replicaBehindProxy starts replicas A and B sharing Redis and the ledger,
// each with an in-process cache; B reaches Redis through proxy.
func replicaBehindProxy(t *testing.T) (s *setup, a, b *gateway.Gateway, proxy *testenv.FaultProxy) {
	t.Helper()
	s = sharedSetup(t)
	s.localCache = "1MiB"
	a = s.start(t)
	proxy = testenv.StartFaultProxy(t, s.redis)
	sb := *s
	sb.redis = proxy.Addr
	return s, a, sb.start(t), proxy
}
