package inbox_test

import (
	"context"
	"net/url"
	"sync"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// useInbox starts an inbox on table and records, honours and sweeps a key.
func useInbox(tb testing.TB, db *gorm.DB, table string) {
	tb.Helper()
	ib := newInbox(tb, db, inbox.Options{Table: table})
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		if ran, err := ib.Once(ctx, "evt_40", func(*gorm.DB) error { return nil }); ran != want || err != nil {
			tb.Fatalf("%s, call %d: ran=%v err=%v, want %v, nil", table, i+1, ran, err, want)
		}
	}
	if _, err := ib.Sweep(ctx); err != nil {
		tb.Fatalf("%s: sweep: %v", table, err)
	}
}

// Processes with different search_paths, half of them naming no existing
// schema, create a schema-qualified table together: they all take the lock
// the table's name gives. The lock's key held the current schema, which
// differed between them, and without one (NULL) no lock was taken: the
// CREATE TABLEs raced on the catalog (duplicate key in pg_type).
func TestConcurrentNewAcrossSearchPaths(t *testing.T) {
	dsn := testenv.Postgres(t)
	schema := schemaOf(t, openDB(t, postgres.Open(dsn)))
	pools := make([]*gorm.DB, 8)
	for i := range pools {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			q := u.Query()
			q.Set("search_path", testenv.Name("none_"))
			u.RawQuery = q.Encode()
		}
		pools[i] = connect(t, postgres.Open(u.String()))
	}
	for round := range 3 {
		table := schema + "." + testenv.Name("inbox_")
		start := make(chan struct{})
		errs := make(chan error, len(pools))
		var wg sync.WaitGroup
		for _, db := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := inbox.New(db, inbox.Options{Table: table})
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: New: %v", round+1, err)
			}
		}
		useInbox(t, pools[round%len(pools)], table)
	}
}
