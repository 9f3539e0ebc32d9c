package inbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqlerr "github.com/go-sql-driver/mysql"
	"github.com/libtnb/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// 100 goroutines deliver one key at once: the effect happens once, on
// every database, and nobody sees an error.
func TestOnceConcurrentRunsOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		var runs atomic.Int32
		var ranTrue atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		start := make(chan struct{})
		for i := 0; i < 100; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ran, err := ib.Once(context.Background(), "evt_1", func(tx *gorm.DB) error {
					runs.Add(1)
					return book(tx, "evt_1")
				})
				if err != nil {
					errs <- err
				}
				if ran {
					ranTrue.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Once: %v", err)
		}
		if runs.Load() != 1 || ranTrue.Load() != 1 {
			t.Errorf("fn ran %d times, %d calls reported ran; want 1 and 1", runs.Load(), ranTrue.Load())
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_1", 1, 1)
	})
}

// fn fails: neither its write nor the key is recorded, and the next call
// runs it; a recorded key then runs nothing.
func TestOnceFailureRecordsNothing(t *testing.T) {
	boom := errors.New("card declined by the bank's test")
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		ctx := context.Background()
		ran, err := ib.Once(ctx, "evt_2", func(tx *gorm.DB) error {
			if err := book(tx, "evt_2"); err != nil {
				return err
			}
			return boom
		})
		if ran || !errors.Is(err, boom) {
			t.Fatalf("failing fn: ran=%v err=%v, want false and %v", ran, err, boom)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_2", 0, 0)

		if ran, err := ib.Once(ctx, "evt_2", func(tx *gorm.DB) error { return book(tx, "evt_2") }); !ran || err != nil {
			t.Fatalf("second call: ran=%v err=%v, want true, nil", ran, err)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_2", 1, 1)

		called := false
		if ran, err := ib.Once(ctx, "evt_2", func(tx *gorm.DB) error { called = true; return book(tx, "evt_2") }); ran || err != nil || called {
			t.Fatalf("recorded key: ran=%v err=%v called=%v, want false, nil, false", ran, err, called)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_2", 1, 1)
	})
}

// A panic in fn rolls back the write and the key, and reaches the caller.
func TestOncePanicRollsBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		got := func() (v any) {
			defer func() { v = recover() }()
			_, _ = ib.Once(context.Background(), "evt_3", func(tx *gorm.DB) error {
				if err := book(tx, "evt_3"); err != nil {
					return err
				}
				panic("ledger bug")
			})
			return nil
		}()
		if got != "ledger bug" {
			t.Fatalf("recovered %v, want the handler's panic", got)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_3", 0, 0)
		if ran, err := ib.Once(context.Background(), "evt_3", func(tx *gorm.DB) error { return book(tx, "evt_3") }); !ran || err != nil {
			t.Fatalf("after the panic: ran=%v err=%v, want true, nil", ran, err)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_3", 1, 1)
	})
}

// The first copy holds the key while waiters queue behind it in the
// database, then rolls back: exactly one waiter runs fn, the others find
// it recorded, and no deadlock (MariaDB's insert-intention locks) reaches
// a caller. Each waiter has an Inbox of its own, as in a process of its
// own: one Inbox's copies of a key wait for each other before the
// database.
func TestOnceWaitersAfterRollback(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		table := testenv.Name("inbox_")
		ib := newInbox(t, db, inbox.Options{Table: table})
		letGo, firstDone := holdKey(t, ib, "evt_4", func(*gorm.DB) error { return errors.New("first copy fails") })

		const waiters = 8
		var runs, ranTrue, entered atomic.Int32
		errs := make(chan error, waiters)
		var wg sync.WaitGroup
		for i := 0; i < waiters; i++ {
			wg.Add(1)
			process := newInbox(t, db, inbox.Options{Table: table})
			go func() {
				defer wg.Done()
				entered.Add(1)
				ran, err := process.Once(context.Background(), "evt_4", func(tx *gorm.DB) error {
					runs.Add(1)
					return book(tx, "evt_4")
				})
				if err != nil {
					errs <- err
				}
				if ran {
					ranTrue.Add(1)
				}
			}()
		}
		waitFor(t, "the waiters to queue on the key", func() bool {
			n := lockWaiters(t, db, table)
			return n == waiters || n < 0 && entered.Load() == waiters
		})
		if runs.Load() != 0 {
			t.Fatalf("a waiter ran fn while the first copy held the key")
		}
		letGo()
		if err := <-firstDone; err == nil {
			t.Fatal("the first copy's failure was not returned")
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("waiter: %v", err)
		}
		if runs.Load() != 1 || ranTrue.Load() != 1 {
			t.Errorf("after the rollback fn ran %d times (%d reported ran), want once", runs.Load(), ranTrue.Load())
		}
		wantCounts(t, db, table, "evt_4", 1, 1)
	})
}

// A copy that waits on a held key past the database's lock wait timeout
// gets that error after the one wait: a retry would wait as long again for
// the same holder (InnoDB's default is 50 s, and there were 60 tries). On
// SQLite, whose busy database is retried, the retries stop after about
// five seconds.
func TestOnceLockWaitTimeoutNotRetried(t *testing.T) {
	cases := []struct {
		name string
		// open returns two handles on one database, the waiter's with a
		// lock wait timeout of 1 s.
		open    func(tb testing.TB) (holder, waiter *gorm.DB)
		timeout func(error) bool
		within  time.Duration
	}{
		{"postgres", func(tb testing.TB) (*gorm.DB, *gorm.DB) {
			dsn := testenv.Postgres(tb)
			return openDB(tb, postgres.Open(dsn)), openDB(tb, postgres.Open(dsn+"&lock_timeout=1s"))
		}, func(err error) bool {
			var e interface{ SQLState() string }
			return errors.As(err, &e) && e.SQLState() == "55P03"
		}, 5 * time.Second},
		{"mariadb", func(tb testing.TB) (*gorm.DB, *gorm.DB) {
			dsn := testenv.MySQL(tb)
			return openDB(tb, mysql.Open(dsn)), openDB(tb, mysql.Open(dsn+"&innodb_lock_wait_timeout=1"))
		}, func(err error) bool {
			var e *mysqlerr.MySQLError
			return errors.As(err, &e) && e.Number == 1205
		}, 5 * time.Second},
		// Each try waits out busy_timeout before SQLITE_BUSY: the retries
		// stop after about five seconds in all, where sixty tries had
		// waited two minutes.
		{"sqlite", func(tb testing.TB) (*gorm.DB, *gorm.DB) {
			dsn := filepath.Join(tb.TempDir(), "app.db") + "?_pragma=busy_timeout(2000)&_pragma=journal_mode(WAL)"
			return openDB(tb, sqlite.Open(dsn)), openDB(tb, sqlite.Open(dsn))
		}, func(err error) bool {
			var e interface{ Code() int }
			return errors.As(err, &e) && e.Code()&0xff == 5 // SQLITE_BUSY
		}, 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			holderDB, waiterDB := c.open(t)
			holder := newInbox(t, holderDB, inbox.Options{})
			waiter := newInbox(t, waiterDB, inbox.Options{})
			letGo, held := holdKey(t, holder, "evt_35", func(tx *gorm.DB) error { return book(tx, "evt_35") })

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			ran, err := waiter.Once(ctx, "evt_35", func(*gorm.DB) error { t.Error("fn ran while the key was held"); return nil })
			took := time.Since(start)
			letGo()
			if ran || !c.timeout(err) || took > c.within {
				t.Errorf("Once on a held key: ran=%v err=%v after %v; want the database's timeout within %v", ran, err, took.Round(time.Millisecond), c.within)
			}
			if err := <-held; err != nil {
				t.Fatalf("the holder: %v", err)
			}
			wantCounts(t, holderDB, inbox.DefaultTable, "evt_35", 1, 1)
		})
	}
}

// Consumers keep their own keys; a key longer than the table holds is
// refused before anything runs.
func TestOnceConsumersAndKeys(t *testing.T) {
	db := backends[2].open(t)
	a := newInbox(t, db, inbox.Options{Consumer: "billing"})
	b := newInbox(t, db, inbox.Options{Consumer: "shipping"})
	ctx := context.Background()
	for _, ib := range []*inbox.Inbox{a, b} {
		if ran, err := ib.Once(ctx, "evt_5", func(tx *gorm.DB) error { return book(tx, "evt_5") }); !ran || err != nil {
			t.Fatalf("ran=%v err=%v, want true, nil for each consumer", ran, err)
		}
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_5", 2, 2)
	long := string(make([]byte, inbox.MaxKeyLen+1))
	if _, err := a.Once(ctx, long, func(*gorm.DB) error { t.Error("fn ran"); return nil }); !errors.Is(err, inbox.ErrKeyTooLong) {
		t.Errorf("long key: %v, want ErrKeyTooLong", err)
	}
	if _, err := a.Once(ctx, "", func(*gorm.DB) error { t.Error("fn ran"); return nil }); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("empty key: %v, want ErrNoKey", err)
	}
}

// Keys are compared byte for byte on every database: MySQL's padding
// collations would make "evt_6" and "evt_6 " one key and drop an event.
func TestOnceKeysAreExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		for _, key := range []string{"evt_6", "evt_6 ", "EVT_6", "evt_6  ", "evt_6\ufffd"} {
			if ran, err := ib.Once(context.Background(), key, func(tx *gorm.DB) error { return book(tx, key) }); !ran || err != nil {
				t.Errorf("key %q: ran=%v err=%v, want a key of its own", key, ran, err)
			}
		}
	})
}

// A key hookstamp would never forward is refused before the database sees
// it, alike on every database: PostgreSQL fails an insert of invalid UTF-8
// or NUL, SQLite stores it.
func TestOnceRefusesInvalidKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		for _, key := range []string{"evt_\xff", "evt\x00", "evt\r\n7", "evt\u2028", "evt\u0085", "evt\x7f"} {
			ran, err := ib.Once(context.Background(), key, func(tx *gorm.DB) error { t.Errorf("fn ran for %q", key); return nil })
			if ran || !errors.Is(err, inbox.ErrInvalidKey) {
				t.Errorf("key %q: ran=%v err=%v, want ErrInvalidKey", key, ran, err)
			}
		}
		var rows int64
		if err := db.Table(inbox.DefaultTable).Count(&rows).Error; err != nil || rows != 0 {
			t.Errorf("inbox rows %d (%v), want none", rows, err)
		}
	})
}

// A burst of copies of one key larger than the connection pool, whose fn
// also reads through the application's own handle (a second connection):
// the copies wait for the first without holding connections, so its fn
// gets one and the burst ends with one run and no error.
func TestOnceBurstLargerThanThePool(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(4)
		ib := newInbox(t, db, inbox.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var runs atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 30)
		for range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ib.Once(ctx, "evt_burst", func(tx *gorm.DB) error {
					runs.Add(1)
					var n int64
					if err := db.WithContext(ctx).Model(&Payment{}).Count(&n).Error; err != nil {
						return err
					}
					return book(tx, "evt_burst")
				})
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Once: %v", err)
		}
		if runs.Load() != 1 {
			t.Errorf("fn ran %d times, want 1", runs.Load())
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_burst", 1, 1)
	})
}
