package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	gosqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// TestPostgresReadOnlySessionsAreNotReused: an operator turns
// default_transaction_read_only on for the ledger's role, which applies to
// sessions opened from then on, and resets it. The connections opened
// meanwhile refused writes for as long as the pool kept them (idle up to 5
// minutes, an hour at most); now a write succeeds at once.
func TestPostgresReadOnlySessionsAreNotReused(t *testing.T) {
	o := postgresOptions(t)
	openLedger(t, o) // migrated by the admin role
	admin, err := sql.Open("pgx", testenv.PostgresAdminDSN())
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	u, err := url.Parse(o.DSN)
	if err != nil {
		t.Fatalf("dsn: %v", err)
	}
	schema, role := u.Query().Get("search_path"), testenv.Name("hs_ro_")
	adminExec := func(q string) {
		t.Helper()
		if _, err := admin.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	adminExec("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() { // after the ledger's Close, before the schema's drop
		adminExec("DROP OWNED BY " + role)
		adminExec("DROP ROLE " + role)
	})
	adminExec("GRANT USAGE ON SCHEMA " + schema + " TO " + role)
	adminExec("GRANT ALL ON ALL TABLES IN SCHEMA " + schema + " TO " + role)
	adminExec("ALTER ROLE " + role + " SET default_transaction_read_only = on")

	u.User = url.User(role)
	o.DSN = u.String()
	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	for i := range 3 {
		err := l.Commit(t.Context(), doneRecord(ref("during"), t0, t0.Add(time.Hour)), "o", t0)
		wantUnavailable(t, "Commit while the role is read-only", err)
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "25006" {
			t.Fatalf("Commit %d while the role is read-only: %v, want SQLSTATE 25006", i, err)
		}
	}

	adminExec("ALTER ROLE " + role + " RESET default_transaction_read_only")
	testenv.Eventually(t, 2*time.Second, "a write after the reset", func() bool {
		return l.Commit(t.Context(), doneRecord(ref("after"), t0, t0.Add(time.Hour)), "o", t0) == nil
	})
	wantState(t, l, ref("after"), idempotency.StateDone)
}

// TestSQLiteWriterReopensWhenTheFileIsWritableAgain: the gateway starts
// while its database file cannot be written (chattr +i, a read-only
// restore): SQLite opens the writer read-only. Once the file is writable
// again the next write succeeds; it failed with SQLITE_READONLY until a
// restart.
func TestSQLiteWriterReopensWhenTheFileIsWritableAgain(t *testing.T) {
	if rerunAsNobody(t) {
		return
	}
	o := sqliteOptions(t)
	before := openLedger(t, o)
	mustCommit(t, before, doneRecord(ref("before"), t0, t0.Add(time.Hour)), "o", t0)
	if err := before.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	writable := readOnlyFile(t, o.DSN)

	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open on a read-only file: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	wantState(t, l, ref("before"), idempotency.StateDone)
	err = l.Commit(t.Context(), doneRecord(ref("during"), t0, t0.Add(time.Hour)), "o", t0)
	wantUnavailable(t, "Commit on a read-only file", err)
	if se := (*gosqlite.Error)(nil); !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_READONLY {
		t.Fatalf("Commit on a read-only file: %v, want SQLITE_READONLY", err)
	}

	writable()
	// River writes through the same *sql.DB, the writer.
	db, err := l.DB()
	if err != nil {
		t.Fatalf("DB: %v", err)
	}
	if _, err := db.ExecContext(t.Context(), `UPDATE hookstamp_records SET state = state WHERE "key" = 'before'`); err != nil {
		t.Fatalf("a write through the shared *sql.DB once the file is writable: %v", err)
	}
	mustCommit(t, l, doneRecord(ref("after"), t0, t0.Add(time.Hour)), "o", t0)
	wantState(t, l, ref("after"), idempotency.StateDone)
}

// readOnlyFile makes path unwritable, for root too (whom file modes do not
// stop): chattr +i (rerunAsNobody has made sure it works). It returns the
// undo, which also runs at cleanup.
func readOnlyFile(t *testing.T, path string) (undo func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatalf("chmod: %v", err)
		}
		// SQLite makes the -wal and -shm files it creates with the
		// database file's mode: read-only ones, while the file was.
		undo = func() {
			for _, f := range []string{path, path + "-wal", path + "-shm"} {
				_ = os.Chmod(f, 0o644)
			}
		}
	} else {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Fatalf("cannot make %s read-only for root: chattr +i: %v %s", path, err, out)
		}
		undo = func() { _ = exec.Command("chattr", "-i", path).Run() }
	}
	t.Cleanup(undo)
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		_ = f.Close()
		t.Fatalf("%s is still writable", path)
	}
	return undo
}

// TestProbeWriteFailsWhereAClaimCannotBeWritten: a SQLite ledger that
// cannot grow (max_page_count, standing in for a full disk) refuses a new
// delivery's claim; the write probe must fail too, or /readyz says ready
// while every first delivery is refused. An update in place of a small row
// fits in the page it is on, and would succeed.
func TestProbeWriteFailsWhereAClaimCannotBeWritten(t *testing.T) {
	o := sqliteOptions(t)
	l := openLedger(t, o)
	if err := l.ProbeWrite(t.Context()); err != nil {
		t.Fatalf("ProbeWrite on a ledger with room: %v", err)
	}
	db, err := l.DB()
	if err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := db.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	o.DSN += fmt.Sprintf("?_pragma=max_page_count(%d)", pages)
	full := openLedger(t, o)
	var claimErr error
	for i := 0; i < 10000 && claimErr == nil; i++ {
		req := idempotency.ClaimRequest{Ref: ref(fmt.Sprintf("evt_%05d_%s", i, strings.Repeat("k", 200))),
			Owner: "o", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
		_, claimErr = full.Claim(t.Context(), req, t0)
	}
	wantUnavailable(t, "a claim once the ledger is full", claimErr)
	wantUnavailable(t, "ProbeWrite once the ledger is full", full.ProbeWrite(t.Context()))
}

// rerunAsNobody runs t alone in a copy of this test binary as the user
// nobody, and reports true once it has (t passes or fails as the copy
// did), when t runs as root where chattr +i is refused (a container
// without CAP_LINUX_IMMUTABLE): a file mode then makes the file read-only.
func rerunAsNobody(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if exec.Command("chattr", "+i", probe).Run() == nil {
		_ = exec.Command("chattr", "-i", probe).Run()
		return false
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	copied := filepath.Join(dir, "sqlledger.test")
	if err := os.WriteFile(copied, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copied, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("chattr +i is refused here: %s ran as nobody:\n%s", t.Name(), out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody: %v", err)
	}
	return true
}
