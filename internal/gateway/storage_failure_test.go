package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A ledger that can be read but refuses writes (PostgreSQL during a
// failover: the DSN's host is a hot standby, 25006 read_only_sql_transaction)
// is "unavailable" for claims. With screen "none" and store.on_unavailable
// pass, a delivery is then forwarded without dedup — but a recorded one must
// still be replayed, as it is with a screen: the ledger answered the lookup
// and says the upstream has already seen it (SPEC §6: fail open forwards,
// it does not forward recorded deliveries twice).
func TestReadOnlyLedgerPassStillReplaysRecorded(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	up := newUpstream(t)
	gw := func(dsn string) *Gateway {
		cfg := gwConfig(t, up.URL, "unused", "", "screen:\n  driver: none\n")
		cfg.Store.Driver, cfg.Store.DSN = "postgres", dsn
		cfg.Store.OnUnavailable = config.StoreUnavailablePass
		return startGateway(t, cfg)
	}
	writer := gw(dsn)
	first := send(t, writer, "/hooks", `{"id":"evt_ro"}`)
	wantOutcome(t, first, 200, "forwarded")

	// The same database through a session that refuses writes.
	ro := gw(dsn + "&default_transaction_read_only=on")
	again := send(t, ro, "/hooks", `{"id":"evt_ro"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_ro"); n != 1 {
		t.Fatalf("upstream received the recorded event %d times, want 1", n)
	}
	// A new delivery is still forwarded (fail open).
	wantOutcome(t, send(t, ro, "/hooks", `{"id":"evt_ro_new"}`), 200, "passthrough")
}

// Screen and ledger both unreachable, screen.on_unavailable pass and
// store.on_unavailable reject (the default): SPEC §6 says a ledger outage
// is answered 503 + Retry-After with nothing forwarded unless
// store.on_unavailable is pass. The screen's pass mode drops deduplication
// in the screen, not the operator's choice to fail closed without a ledger.
func TestScreenPassLedgerDownFailsClosed(t *testing.T) {
	t.Parallel()
	dsn, proxy := postgresBehindProxy(t)
	up := newUpstream(t)
	deadRedis := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens
	top := fmt.Sprintf("screen:\n  driver: redis\n  on_unavailable: pass\n  redis:\n    addrs: [%q]\n", deadRedis)
	cfg := gwConfig(t, up.URL, "unused", "", top)
	cfg.Store.Driver, cfg.Store.DSN = "postgres", dsn
	g := startGateway(t, cfg)

	proxy.Cut()
	wantUnavailable(t, send(t, g, "/hooks", `{"id":"evt_both_down"}`))
	if n := up.count("evt_both_down"); n != 0 {
		t.Fatalf("ledger down, store.on_unavailable reject: upstream received %d, want 0", n)
	}
}

// As TestReadOnlyLedgerPassStillReplaysRecorded, with the Redis screen and
// screen.on_unavailable store (the screen's claims are confirmed by a
// ledger claim): the screen forgot the record (TTL, FLUSHALL), the ledger
// refuses the confirming claim but still answers reads. The recorded
// delivery must be replayed, not forwarded a second time.
func TestReadOnlyLedgerConfirmByClaimReplaysRecorded(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	addr, prefix := testenv.RedisPrefix(t)
	up := newUpstream(t)
	gw := func(dsn, prefix string) *Gateway {
		top := fmt.Sprintf("screen:\n  driver: redis\n  on_unavailable: store\n  local_cache: 0\n  prefix: %q\n  redis:\n    addrs: [%q]\n", prefix, addr)
		cfg := gwConfig(t, up.URL, "unused", "", top)
		cfg.Store.Driver, cfg.Store.DSN = "postgres", dsn
		cfg.Store.OnUnavailable = config.StoreUnavailablePass
		return startGateway(t, cfg)
	}
	writer := gw(dsn, prefix)
	first := send(t, writer, "/hooks", `{"id":"evt_ro_cbc"}`)
	wantOutcome(t, first, 200, "forwarded")

	// Another screen namespace stands for a screen that lost the entry.
	ro := gw(dsn+"&default_transaction_read_only=on", prefix+"lost:")
	again := send(t, ro, "/hooks", `{"id":"evt_ro_cbc"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_ro_cbc"); n != 1 {
		t.Fatalf("upstream received the recorded event %d times, want 1", n)
	}
}

// The SQLite form of TestReadOnlyLedgerPassStillReplaysRecorded: another
// process holds the file's write lock (an operator's sqlite3 session, a
// backup tool), so claims time out as unavailable, while reads go on (WAL).
// With store.on_unavailable pass, a recorded delivery is still replayed.
func TestLockedSQLitePassStillReplaysRecorded(t *testing.T) {
	t.Parallel()
	path := dbPath(t)
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, path, "", "screen:\n  driver: none\n  local_cache: 0\n")
	cfg.Store.OnUnavailable = config.StoreUnavailablePass
	g := startGateway(t, cfg)
	first := send(t, g, "/hooks", `{"id":"evt_lock"}`)
	wantOutcome(t, first, 200, "forwarded")

	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("open the ledger file: %v", err)
	}
	sdb, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	ctx := context.Background()
	conn, err := sdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // best effort

	again := send(t, g, "/hooks", `{"id":"evt_lock"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("evt_lock"); n != 1 {
		t.Fatalf("upstream received the recorded event %d times, want 1", n)
	}
}

// A write probe that fails for another reason than a refused write (a
// ledger whose schema predates hookstamp_meta, a role that may not write
// it) does not keep /readyz at 503 while the ledger's writes are marked
// failing: it tells nothing of the records' writes, and a replica out of
// rotation would get no delivery to clear the mark.
func TestReadyzIgnoresAProbeThatCannotRun(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Admin.Listen = "127.0.0.1:0"
	g := startGateway(t, cfg)
	db, err := g.Ledger().DB()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), "DROP TABLE hookstamp_meta"); err != nil {
		t.Fatal(err)
	}
	cut, cancel := context.WithCancel(t.Context())
	cancel()
	_ = g.engine.ProbeWrites(cut) // a write that could not reach the ledger marks it
	if !g.engine.WritesFailing() {
		t.Fatal("the ledger's writes are not marked failing: this test proves nothing")
	}
	if status, body := get(t, "http://"+g.AdminAddr()+"/readyz"); status != http.StatusOK {
		t.Fatalf("/readyz = %d %s, want 200: the probe cannot run, the ledger takes writes", status, body)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_after"}`), http.StatusOK, "forwarded")
	if g.engine.WritesFailing() {
		t.Fatal("the delivery's claim did not clear the mark")
	}
}
