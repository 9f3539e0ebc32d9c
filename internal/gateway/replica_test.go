package gateway

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
)

// Two processes on one host are two replicas, to River (whose client IDs
// take at most 100 bytes) and in the attempts they record.
func TestReplicaNamesTellProcessesApart(t *testing.T) {
	if a, b := replicaNameOf("vm", 100), replicaNameOf("vm", 101); a == b || a != "vm/100" {
		t.Errorf("two processes on vm: %q and %q", a, b)
	}
	if n := replicaNameOf(strings.Repeat("h", 253), math.MaxInt32); len(n) > 100 {
		t.Errorf("replica name of a 253-byte host: %d bytes, River takes 100", len(n))
	}
}

// A second gateway on the SQLite file a gateway with the memory screen
// serves is refused at start, naming what to use instead: its claims
// would be in its own memory, and both would forward the same delivery.
// With screen none (claims in the file) several may share it.
func TestMemoryScreenServesItsSQLiteFileAlone(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	first := startGatewayWith(t, gwConfig(t, up.URL, db, "", ""), Options{Logger: testLogger(t)})
	_, err := New(context.Background(), gwConfig(t, up.URL, db, "", ""), Options{Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "screen.driver none") {
		t.Fatalf("a second gateway on the file: %v, want a refusal naming screen.driver none", err)
	}
	wantOutcome(t, send(t, first, "/hooks", `{"id":"evt_alone"}`), http.StatusOK, "forwarded")

	none := gwConfig(t, up.URL, dbPath(t), "", "screen: {driver: none}\n")
	a := startGatewayWith(t, none, Options{Logger: testLogger(t)})
	b := startGatewayWith(t, gwConfig(t, up.URL, none.Store.DSN, "", "screen: {driver: none}\n"), Options{Logger: testLogger(t)})
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_shared"}`), http.StatusOK, "forwarded")
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_shared"}`), http.StatusOK, "replayed")
}

// A replica started with auto_migrate false on a database that was never
// migrated says so on /readyz, rather than calling the database, which
// answers, unreachable.
func TestReadyzNamesAnUnmigratedLedger(t *testing.T) {
	cfg := gwConfig(t, newUpstream(t).URL, dbPath(t), "", "")
	cfg.Store.AutoMigrate = false
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, Options{Logger: testLogger(t)})
	status, body := get(t, "http://"+g.AdminAddr()+"/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "run gateway migrate") {
		t.Fatalf("/readyz of an unmigrated ledger: %d %s, want 503 saying to run gateway migrate", status, body)
	}
}
