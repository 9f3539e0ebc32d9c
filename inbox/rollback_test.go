package inbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	mysqlerr "github.com/go-sql-driver/mysql"
	"github.com/libtnb/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// payAcross updates accounts rows 1 and 2 in turn and books the payment,
// all through tx, calling between after row 1 the first time. It retries
// the updates on a deadlock, as MariaDB's manual advises applications to.
func payAcross(tx *gorm.DB, key string, between func()) error {
	for attempt := 1; ; attempt++ {
		err := tx.Exec("UPDATE accounts SET n = n + 1 WHERE id = 1").Error
		if err == nil {
			if attempt == 1 {
				between()
			}
			err = tx.Exec("UPDATE accounts SET n = n + 1 WHERE id = 2").Error
		}
		if err == nil {
			return book(tx, key)
		}
		var me *mysqlerr.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 || attempt == 3 {
			return err
		}
	}
}

// deadlockSetup creates the accounts and returns deadlock: called while a
// transaction holds accounts row 1, it starts another that locks row 2
// (after writing enough rows that InnoDB picks the first as the victim)
// and waits for row 1, and returns once it waits, so that the first
// transaction's next write of row 2 deadlocks. The whole transaction is
// rolled back, key included, and the session goes on outside it.
func deadlockSetup(tb testing.TB, db *gorm.DB) (deadlock func()) {
	tb.Helper()
	mustExec(tb, db, "CREATE TABLE accounts (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	mustExec(tb, db, "INSERT INTO accounts VALUES (1, 0), (2, 0)")
	mustExec(tb, db, "CREATE TABLE ballast (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	mustExec(tb, db, "INSERT INTO ballast SELECT seq, 0 FROM seq_1_to_200")
	return func() {
		var wg sync.WaitGroup
		wg.Add(1)
		tb.Cleanup(wg.Wait)
		go func() {
			defer wg.Done()
			_ = db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("UPDATE ballast SET n = n + 1").Error; err != nil {
					return err
				}
				if err := tx.Exec("UPDATE accounts SET n = n + 1 WHERE id = 2").Error; err != nil {
					return err
				}
				return tx.Exec("UPDATE accounts SET n = n + 1 WHERE id = 1 /* waits */").Error
			})
		}()
		waitFor(tb, "the other transaction to wait for row 1", func() bool {
			var n int64
			db.Raw("SELECT count(*) FROM information_schema.processlist WHERE info LIKE 'UPDATE accounts%waits%' AND db = DATABASE()").Scan(&n)
			return n > 0
		})
	}
}

// A deadlock in fn rolls back the whole transaction on MariaDB, key
// included; fn retries its writes and returns nil. Once commits nothing and
// says so: the writes after the rollback are rolled back too, instead of
// committing one by one, and the next copy books the payment once.
func TestOnceAfterADeadlockInFn(t *testing.T) {
	db := openDB(t, mysql.Open(testenv.MySQL(t)))
	deadlock := deadlockSetup(t, db)
	ib := newInbox(t, db, inbox.Options{})
	ctx := context.Background()
	ran, err := ib.Once(ctx, "evt_50", func(tx *gorm.DB) error { return payAcross(tx, "evt_50", deadlock) })
	if ran || !errors.Is(err, inbox.ErrRolledBack) {
		t.Fatalf("deadlocked copy: ran=%v err=%v, want false and ErrRolledBack", ran, err)
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_50", 0, 0)
	ran, err = ib.Once(ctx, "evt_50", func(tx *gorm.DB) error { return payAcross(tx, "evt_50", func() {}) })
	if !ran || err != nil {
		t.Fatalf("next copy: ran=%v err=%v, want true, nil", ran, err)
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_50", 1, 1)
}

// The same behind the middleware: the handler's answer cannot be recorded
// with a key the deadlock took away, so the sender gets 503 with nothing
// applied, and its retry books the payment once.
func TestMiddlewareAfterADeadlockInTheHandler(t *testing.T) {
	db := openDB(t, mysql.Open(testenv.MySQL(t)))
	deadlock := deadlockSetup(t, db)
	ib := newInbox(t, db, inbox.Options{})
	var deadlocked atomic.Bool
	srv := httptest.NewServer(ib.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		between := func() {}
		if !deadlocked.Swap(true) {
			between = deadlock
		}
		if err := payAcross(inbox.Tx(r.Context()), "evt_51", between); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	if g := post(t, srv.URL, "evt_51"); g.status != http.StatusServiceUnavailable {
		t.Fatalf("deadlocked copy: %d %q, want 503", g.status, g.body)
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_51", 0, 0)
	if g := post(t, srv.URL, "evt_51"); g.status != http.StatusCreated {
		t.Fatalf("retry: %d %q, want 201", g.status, g.body)
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_51", 1, 1)
}

// SQLite ends the transaction on a statement whose conflict clause is
// ROLLBACK, and has no setting that keeps the next statements from
// committing one by one: fn's payment after the rollback is committed.
// Once cannot undo it, but reports ErrRolledBack rather than success, and
// records nothing (the limit doc.go states: fn must return the error).
func TestOnceAfterSQLiteRolledBack(t *testing.T) {
	db := openDB(t, sqlite.Open(filepath.Join(t.TempDir(), "app.db")))
	mustExec(t, db, "CREATE TABLE lines (id TEXT PRIMARY KEY ON CONFLICT ROLLBACK)")
	mustExec(t, db, "INSERT INTO lines VALUES ('line_1')")
	ib := newInbox(t, db, inbox.Options{})
	ran, err := ib.Once(context.Background(), "evt_52", func(tx *gorm.DB) error {
		_ = tx.Exec("INSERT INTO lines VALUES ('line_1')").Error // ignored: the handler's bug
		return book(tx, "evt_52")
	})
	if ran || !errors.Is(err, inbox.ErrRolledBack) {
		t.Fatalf("ran=%v err=%v, want false and ErrRolledBack", ran, err)
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_52", 1, 0)
}
