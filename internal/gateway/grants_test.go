package gateway

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// replicaGrantsMarker precedes the SQL block of the replicas' grants in
// docs/production.md and in the chart's README.
const replicaGrantsMarker = "<!-- replica-grants: run by internal/gateway/grants_test.go -->"

// documentedGrants is the block of the replicas' grants, the same in both
// documents: database, replica role and owner role named hookstamp,
// hookstamp and hookstamp_owner.
func documentedGrants(tb testing.TB) string {
	tb.Helper()
	var blocks []string
	for _, doc := range []string{"../../docs/production.md", "../../deploy/helm/hookstamp/README.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			tb.Fatal(err)
		}
		_, after, ok := bytes.Cut(data, []byte(replicaGrantsMarker))
		if !ok {
			tb.Fatalf("%s has no %q", doc, replicaGrantsMarker)
		}
		_, after, _ = bytes.Cut(after, []byte("```"))
		_, after, _ = bytes.Cut(after, []byte("\n")) // the fence's info string
		block, _, ok := bytes.Cut(after, []byte("```"))
		if !ok {
			tb.Fatalf("%s: no closed block after %q", doc, replicaGrantsMarker)
		}
		lines := strings.Split(string(block), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimSpace(l) // docs/production.md indents it in a list item
		}
		blocks = append(blocks, strings.Join(lines, "\n"))
	}
	if blocks[0] != blocks[1] {
		tb.Fatalf("the replicas' grants differ:\ndocs/production.md:\n%s\nthe chart's README:\n%s", blocks[0], blocks[1])
	}
	return blocks[0]
}

var (
	grantsOwnerRE    = regexp.MustCompile(`\bhookstamp_owner\b`)
	grantsDatabaseRE = regexp.MustCompile(`\bDATABASE hookstamp\b`)
	grantsReplicaRE  = regexp.MustCompile(`\bhookstamp\b`)
)

// A replica whose role has exactly the documented grants, in a database
// where PUBLIC may do nothing, serves a sync route, a route storing
// requests and an async route, redelivers through the admin API and sweeps
// expired rows, with nothing logged: a change that needs one more privilege
// fails here, not on an operator's replicas after an upgrade. Granted after
// `gateway migrate`, the GRANT … ON ALL statements give the replica the
// tables; granted before, only the default privileges do, as they will
// for the tables of a later release's migrations.
func TestReplicaWithTheDocumentedGrants(t *testing.T) {
	grants := documentedGrants(t)
	for _, c := range []struct {
		name          string
		grantMigrated bool
	}{{"granted after migrating", true}, {"granted before migrating", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			owner := testenv.PostgresRole(t, "hs_owner_")
			replica := testenv.PostgresRole(t, "hs_replica_")
			dsn := testenv.PostgresDatabase(t, owner)
			ownerDSN := testenv.AsRole(t, dsn, owner)
			db, err := sql.Open("pgx", ownerDSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var name string
			if err := db.QueryRow("SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{"REVOKE ALL ON DATABASE " + name + " FROM PUBLIC", "REVOKE ALL ON SCHEMA public FROM PUBLIC"} {
				if _, err := db.Exec(stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			grant := func() {
				stmts := grantsOwnerRE.ReplaceAllString(grants, owner)
				stmts = grantsDatabaseRE.ReplaceAllString(stmts, "DATABASE "+name)
				stmts = grantsReplicaRE.ReplaceAllString(stmts, replica)
				for _, stmt := range strings.Split(stmts, ";") {
					if stmt = strings.TrimSpace(stmt); stmt == "" {
						continue
					}
					if _, err := db.Exec(stmt); err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
			}
			if !c.grantMigrated {
				grant()
			}
			migrateAs(t, ownerDSN)
			if c.grantMigrated {
				grant()
			}
			serveAsReplica(t, testenv.AsRole(t, dsn, replica), db)
		})
	}
}

// migrateAs runs `gateway migrate`'s migrations on dsn.
func migrateAs(tb testing.TB, dsn string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn, MaxOpenConns: 2})
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	if err := MigrateStore(ctx, l); err != nil {
		tb.Fatal(err)
	}
}

// serveAsReplica runs a gateway on dsn, whose role must not need anything
// but its grants, and checks each delivery through what owner (the
// tables' owner) sees.
func serveAsReplica(t *testing.T, dsn string, owner *sql.DB) {
	up := newUpstream(t)
	y := fmt.Sprintf(`
server: {listen: "127.0.0.1:0", shutdown_timeout: 5s}
admin: {listen: "127.0.0.1:0", token: %q}
store: {driver: postgres, dsn: %q, auto_migrate: false, sweep_interval: 100ms}
screen: {driver: none, lease: 2s}
routes:
  - name: plain
    path: /plain
    upstream: {url: "%[3]s/plain", timeout: 1s}
    key: {sources: [{json: id}]}
    retention: 5s
  - name: stored
    path: /stored
    upstream: {url: "%[3]s/stored", timeout: 1s}
    key: {sources: [{json: id}]}
    record: {request: true}
    retention: 5s
  - name: queued
    path: /queued
    upstream: {url: "%[3]s/queued", timeout: 1s}
    key: {sources: [{json: id}]}
    delivery: async
    async: {max_attempts: 5, max_age: 4s, backoff: {initial: 5ms, max: 50ms}}
    retention: 5s
`, asyncAdminToken, dsn, up.URL)
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	logs := &testenv.Buffer{}
	o := asyncOptions(t)
	o.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, &tbWriter{tb: t}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	g := startGatewayWith(t, cfg, o)

	resp, err := client.Get("http://" + g.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", resp.StatusCode)
	}
	delivered := func(route, key string, n int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%s/%s delivered %d times and done", route, key, n), func() bool {
			rec, err := g.Ledger().Lookup(t0ctx, idempotency.Ref{Route: route, Key: key})
			return err == nil && rec.State == idempotency.StateDone && up.count(key) == n
		})
	}
	redeliver := func(route, key string) {
		t.Helper()
		if status, body := adminPost(t, g, "/admin/routes/"+route+"/records/"+key+"/redeliver", ""); status != http.StatusAccepted {
			t.Fatalf("redeliver %s/%s = %d %s, want 202", route, key, status, body)
		}
	}

	first := send(t, g, "/plain", `{"id":"evt_plain"}`)
	wantOutcome(t, first, http.StatusOK, "forwarded")
	sameReply(t, first, send(t, g, "/plain", `{"id":"evt_plain"}`))

	wantOutcome(t, send(t, g, "/stored", `{"id":"evt_stored"}`), http.StatusOK, "forwarded")
	wantOutcome(t, send(t, g, "/stored", `{"id":"evt_stored"}`), http.StatusOK, "replayed")
	redeliver("stored", "evt_stored")
	delivered("stored", "evt_stored", 2)

	wantOutcome(t, send(t, g, "/queued", `{"id":"evt_queued"}`), http.StatusAccepted, "accepted")
	wantOutcome(t, send(t, g, "/queued", `{"id":"evt_queued"}`), http.StatusAccepted, "replayed")
	delivered("queued", "evt_queued", 1)
	redeliver("queued", "evt_queued")
	delivered("queued", "evt_queued", 2)

	if n := up.count("evt_plain"); n != 1 {
		t.Fatalf("upstream received evt_plain %d times, want once", n)
	}
	left := func() string {
		var records, attempts, jobs int
		err := owner.QueryRow(`SELECT (SELECT COUNT(*) FROM hookstamp_records), (SELECT COUNT(*) FROM hookstamp_attempts), `+
			`(SELECT COUNT(*) FROM river_job)`).Scan(&records, &attempts, &jobs)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d records, %d attempts, %d jobs", records, attempts, jobs)
	}
	var rows string
	if !testenv.Poll(20*time.Second, func() bool { rows = left(); return rows == "0 records, 0 attempts, 0 jobs" }) {
		t.Fatalf("the sweeper left %s", rows)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var logged []string
	for _, l := range strings.Split(logs.String(), "\n") {
		// A slow statement is the machine's load, not a privilege.
		if l != "" && !strings.Contains(l, `msg="slow SQL statement"`) {
			logged = append(logged, l)
		}
	}
	if len(logged) > 0 {
		t.Fatalf("the replica logged, with the documented grants:\n%s", strings.Join(logged, "\n"))
	}
}
