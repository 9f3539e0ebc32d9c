package inbox_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Keys live for Retention: a sweep before then deletes nothing and the key
// is still honoured; after it, the key is deleted (only this consumer's)
// and a repeat runs again.
func TestSweepDeletesExpiredKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		ib := newInbox(t, db, inbox.Options{Retention: time.Hour, Now: c.now})
		other := newInbox(t, db, inbox.Options{Consumer: "other", Retention: time.Hour, Now: c.now})
		ctx := context.Background()
		for _, key := range []string{"evt_30", "evt_31"} {
			if _, err := ib.Once(ctx, key, func(tx *gorm.DB) error { return book(tx, key) }); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := other.Once(ctx, "evt_30", func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		c.advance(59 * time.Minute)
		if n, err := ib.Sweep(ctx); n != 0 || err != nil {
			t.Fatalf("sweep within retention: %d deleted, %v", n, err)
		}
		if ran, _ := ib.Once(ctx, "evt_30", func(*gorm.DB) error { return nil }); ran {
			t.Fatal("a key within its retention ran again")
		}
		c.advance(2 * time.Minute)
		if n, err := ib.Sweep(ctx); n != 2 || err != nil {
			t.Fatalf("sweep after retention: %d deleted, %v; want 2", n, err)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_31", 1, 0)
		wantCounts(t, db, inbox.DefaultTable, "evt_30", 1, 1) // the other consumer's row
		if ran, err := ib.Once(ctx, "evt_30", func(tx *gorm.DB) error { return book(tx, "evt_30") }); !ran || err != nil {
			t.Fatalf("a swept key: ran=%v err=%v, want it to run again", ran, err)
		}
	})
}

// New on an existing table (another process migrated it) works.
func TestNewTwice(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		newInbox(t, db, inbox.Options{})
		ib := newInbox(t, db, inbox.Options{})
		if ran, err := ib.Once(context.Background(), "evt_32", func(*gorm.DB) error { return nil }); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
	})
}

// A table named with its schema (SQLite: its attached database; MySQL: its
// database) is created, migrated again, written and swept there.
func TestQualifiedTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		table := schemaOf(t, db) + "." + testenv.Name("inbox_")
		c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		ib := newInbox(t, db, inbox.Options{Table: table, Retention: time.Hour, Now: c.now})
		newInbox(t, db, inbox.Options{Table: table})
		ctx := context.Background()
		for i, want := range []bool{true, false} {
			if ran, err := ib.Once(ctx, "evt_33", func(tx *gorm.DB) error { return book(tx, "evt_33") }); ran != want || err != nil {
				t.Fatalf("call %d: ran=%v err=%v, want %v, nil", i+1, ran, err, want)
			}
		}
		wantCounts(t, db, table, "evt_33", 1, 1)
		c.advance(2 * time.Hour)
		if n, err := ib.Sweep(ctx); n != 1 || err != nil {
			t.Fatalf("sweep: %d deleted, %v; want 1", n, err)
		}
	})
}

// RunSweeper without an interval (zero or negative) sweeps every
// DefaultSweepInterval, where time.NewTicker would panic: an expired key
// outlives a short run of it, and the negative interval is logged. With an
// interval it sweeps.
func TestRunSweeperWithoutInterval(t *testing.T) {
	db := backends[2].open(t)
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	ib := newInbox(t, db, inbox.Options{Retention: time.Hour, Now: c.now, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := ib.Once(context.Background(), "evt_34", func(tx *gorm.DB) error { return book(tx, "evt_34") }); err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Hour)
	for _, every := range []time.Duration{0, -time.Minute} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ib.RunSweeper(ctx, every)
		cancel()
	}
	wantCounts(t, db, inbox.DefaultTable, "evt_34", 1, 1)
	if !strings.Contains(log.String(), "interval=-1m0s") {
		t.Errorf("the negative interval was not logged; log:\n%s", log.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ib.RunSweeper(ctx, time.Millisecond); close(done) }()
	waitFor(t, "the sweeper to delete the expired key", func() bool {
		_, keys := counts(t, db, inbox.DefaultTable, "evt_34")
		return keys == 0
	})
	cancel()
	<-done
}
