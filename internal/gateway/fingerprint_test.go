package gateway

import (
	"fmt"
	"testing"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A fields fingerprint is over what the fields mean: a retry whose object
// field was re-serialised (white space, member order, string escapes) is
// replayed, not refused as a key reuse; another value is still a mismatch.
func TestFieldsFingerprintIgnoresObjectLayout(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "    fingerprint: {mode: fields, fields: [\"json:data\", \"json:amount\"]}\n", ""))
		first := send(t, g, "/hooks", `{"id":"evt_o","amount":100,"data":{"a":1,"b":[1,"é"]},"ts":1}`)
		wantOutcome(t, first, 200, "forwarded")
		r := send(t, g, "/hooks", "{ \"ts\":2, \"data\": {\"b\": [1, \"\\u00e9\"], \"a\": 1},\n \"amount\" : 100, \"id\":\"evt_o\"}")
		wantOutcome(t, r, 200, "replayed")
		sameReply(t, first, r)
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_o","amount":100,"data":{"a":2,"b":[1,"é"]}}`), 422, "mismatch")
		if n := up.count("evt_o"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
	})
}

// A route switched from fingerprint mode body to fields keeps replaying
// the retries of what it recorded before: a byte-identical body is a retry
// whatever the fields, and must not get 422 for the rest of the retention.
func TestFingerprintModeChangeKeepsRetriesOfOldRecords(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		before := startGateway(t, s.config(t, up.URL, "", ""))
		body := `{"id":"evt_sw","amount":5,"ts":1}`
		first := send(t, before, "/hooks", body)
		wantOutcome(t, first, 200, "forwarded")
		shutdownGateway(t, before)

		after := startGateway(t, s.config(t, up.URL, "    fingerprint: {mode: fields, fields: [\"json:amount\"]}\n", ""))
		r := send(t, after, "/hooks", body)
		wantOutcome(t, r, 200, "replayed")
		sameReply(t, first, r)
		wantOutcome(t, send(t, after, "/hooks", `{"id":"evt_sw","amount":6,"ts":1}`), 422, "mismatch")
		if n := up.count("evt_sw"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
	})
}

// The same holds when the screen is down and screen.on_unavailable: pass
// asks the ledger before forwarding without deduplication.
func TestFingerprintModeChangeKeepsRetriesWithScreenDown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	db := dbPath(t)
	before := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	body := `{"id":"evt_swp","amount":5,"ts":1}`
	first := send(t, before, "/hooks", body)
	wantOutcome(t, first, 200, "forwarded")
	shutdownGateway(t, before)

	rs := testenv.StartRedisServer(t)
	rs.Stop()
	cfg := gwConfig(t, up.URL, db, "    fingerprint: {mode: fields, fields: [\"json:amount\"]}\n",
		fmt.Sprintf("screen:\n  driver: redis\n  redis: {addrs: [%q]}\n  on_unavailable: pass\n", rs.Addr))
	after := startGateway(t, cfg)
	r := send(t, after, "/hooks", body)
	wantOutcome(t, r, 200, "replayed")
	sameReply(t, first, r)
	if n := up.count("evt_swp"); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}
