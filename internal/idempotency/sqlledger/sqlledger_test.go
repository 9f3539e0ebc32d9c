package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", for a second process's view

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

var t0 = time.Date(2026, 6, 12, 10, 0, 0, 0, time.UTC)

func ref(key string) idempotency.Ref { return idempotency.Ref{Route: "stripe", Key: key} }

func doneRecord(r idempotency.Ref, created, expires time.Time) *idempotency.Record {
	return &idempotency.Record{
		Ref: r, State: idempotency.StateDone, Fingerprint: []byte("0123456789abcdef0123456789abcdef"),
		Response: idempotency.Response{Status: 200, Headers: map[string]string{"Content-Type": "application/json"},
			Body: []byte(`{"received":true}`)},
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Source: "198.51.100.1",
		CreatedAt: created, ExpiresAt: expires,
	}
}

func heldRecord(r idempotency.Ref, created time.Time) *idempotency.Record {
	return &idempotency.Record{Ref: r, State: idempotency.StateHeld, Fingerprint: []byte("held-fingerprint"),
		Source: "198.51.100.1", CreatedAt: created, ExpiresAt: created.Add(720 * time.Hour)}
}

func claimReq(r idempotency.Ref, owner string, retention time.Duration) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Ref: r, Owner: owner, Lease: 30 * time.Second, Retention: retention, Source: "198.51.100.1"}
}

func mustCommit(tb testing.TB, l *sqlledger.Ledger, rec *idempotency.Record, owner string, now time.Time) {
	tb.Helper()
	if err := l.Commit(context.Background(), rec, owner, now); err != nil {
		tb.Fatalf("Commit(%q): %v", rec.Key, err)
	}
}

func mustClaim(tb testing.TB, l *sqlledger.Ledger, req idempotency.ClaimRequest, now time.Time, want idempotency.ClaimStatus) {
	tb.Helper()
	c, err := l.Claim(context.Background(), req, now)
	if err != nil {
		tb.Fatalf("Claim(%q): %v", req.Key, err)
	}
	if c.Status != want {
		tb.Fatalf("Claim(%q) = %v, want %v", req.Key, c.Status, want)
	}
}

func wantGone(tb testing.TB, l *sqlledger.Ledger, r idempotency.Ref) {
	tb.Helper()
	if _, err := l.Lookup(context.Background(), r); !errors.Is(err, idempotency.ErrNotFound) {
		tb.Fatalf("Lookup(%q): err = %v, want ErrNotFound", r.Key, err)
	}
}

func wantState(tb testing.TB, l *sqlledger.Ledger, r idempotency.Ref, want idempotency.State) *idempotency.Record {
	tb.Helper()
	rec, err := l.Lookup(context.Background(), r)
	if err != nil {
		tb.Fatalf("Lookup(%q): %v", r.Key, err)
	}
	if rec.State != want {
		tb.Fatalf("Lookup(%q).State = %q, want %q", r.Key, rec.State, want)
	}
	return rec
}

func wantUnavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if !errors.Is(err, idempotency.ErrUnavailable) {
		tb.Fatalf("%s: err = %v, want ErrUnavailable", what, err)
	}
}

func TestSweepDeletesExpiredRowsInBatches(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			sweepAt := t0.Add(time.Hour)
			var expired, live []idempotency.Ref
			for i := range 25 {
				r := ref(fmt.Sprintf("expired-%d", i))
				mustCommit(t, l, doneRecord(r, t0, sweepAt.Add(-time.Duration(i+1)*time.Millisecond)), "o", t0)
				expired = append(expired, r)
			}
			// A pending claim older than its retention goes too.
			stale := ref("stale-claim")
			mustClaim(t, l, claimReq(stale, "o", 30*time.Minute), t0, idempotency.Acquired)
			expired = append(expired, stale)
			// expires_at == now is not yet expired.
			for i, exp := range []time.Time{sweepAt, sweepAt.Add(time.Microsecond), sweepAt.Add(720 * time.Hour)} {
				r := ref(fmt.Sprintf("live-%d", i))
				mustCommit(t, l, doneRecord(r, t0, exp), "o", t0)
				live = append(live, r)
			}
			var got []int
			for range 4 {
				n, err := l.Sweep(t.Context(), sweepAt, 10)
				if err != nil {
					t.Fatalf("Sweep: %v", err)
				}
				got = append(got, n)
			}
			if want := []int{10, 10, 6, 0}; !slices.Equal(got, want) {
				t.Fatalf("Sweep batches deleted %v, want %v", got, want)
			}
			for _, r := range expired {
				wantGone(t, l, r)
			}
			for _, r := range live {
				wantState(t, l, r, idempotency.StateDone)
			}
		})
	}
}

// TestSweepAllUnderConcurrentWrites sweeps while deliveries claim and commit:
// no write fails, every live row stays, every expired row goes.
func TestSweepAllUnderConcurrentWrites(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			const expiredRows, writers, perWriter = 300, 4, 25
			for i := range expiredRows {
				mustCommit(t, l, doneRecord(ref(fmt.Sprintf("old-%d", i)), t0.Add(-time.Hour), t0.Add(-time.Minute)), "o", t0)
			}
			var wg sync.WaitGroup
			errs := make(chan error, writers*perWriter)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWriter {
						r := ref(fmt.Sprintf("new-%d-%d", w, i))
						owner := r.Key
						if _, err := l.Claim(context.Background(), claimReq(r, owner, 720*time.Hour), t0); err != nil {
							errs <- err
							continue
						}
						if err := l.Commit(context.Background(), doneRecord(r, t0, t0.Add(720*time.Hour)), owner, t0); err != nil {
							errs <- err
						}
					}
				}()
			}
			swept, err := l.SweepAll(t.Context(), t0, 20)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("write during sweep: %v", err)
			}
			if err != nil {
				t.Fatalf("SweepAll: %v", err)
			}
			if swept != expiredRows {
				t.Fatalf("SweepAll deleted %d rows, want %d", swept, expiredRows)
			}
			if n, err := l.Sweep(t.Context(), t0, 20); err != nil || n != 0 {
				t.Fatalf("Sweep after SweepAll = %d, %v; want 0", n, err)
			}
			for w := range writers {
				for i := range perWriter {
					wantState(t, l, ref(fmt.Sprintf("new-%d-%d", w, i)), idempotency.StateDone)
				}
			}
		})
	}
}

func TestHeldResolveDelete(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			o := d.options(t)
			resolvedAt := t0.Add(time.Hour)
			o.Now = func() time.Time { return resolvedAt }
			l := openLedger(t, o)
			ctx := t.Context()
			h1, h2, h3 := ref("held-newest"), ref("held-oldest"), ref("held-middle")
			other := idempotency.Ref{Route: "github", Key: "held-elsewhere"}
			done, pending := ref("done"), ref("pending")
			mustCommit(t, l, heldRecord(h1, t0.Add(2*time.Second)), "o", t0)
			mustCommit(t, l, heldRecord(h2, t0), "o", t0)
			mustCommit(t, l, heldRecord(h3, t0.Add(time.Second)), "o", t0)
			mustCommit(t, l, heldRecord(other, t0), "o", t0)
			mustCommit(t, l, doneRecord(done, t0, t0.Add(time.Hour)), "o", t0)
			mustClaim(t, l, claimReq(pending, "o", time.Hour), t0, idempotency.Acquired)

			for _, tc := range []struct {
				limit int
				want  []string
			}{
				{0, []string{h2.Key, h3.Key, h1.Key}},
				{2, []string{h2.Key, h3.Key}},
			} {
				recs, err := l.Held(ctx, "stripe", tc.limit)
				if err != nil {
					t.Fatalf("Held(limit %d): %v", tc.limit, err)
				}
				var keys []string
				for _, r := range recs {
					keys = append(keys, r.Key)
				}
				if !slices.Equal(keys, tc.want) {
					t.Fatalf("Held(limit %d) = %v, want %v (oldest first)", tc.limit, keys, tc.want)
				}
			}
			if n, err := l.CountHeld(ctx, "stripe"); err != nil || n != 3 {
				t.Fatalf("CountHeld(stripe) = %d, %v; want 3", n, err)
			}
			if m, err := l.CountHeldByRoute(ctx); err != nil || len(m) != 2 || m["stripe"] != 3 || m["github"] != 1 {
				t.Fatalf("CountHeldByRoute = %v, %v; want stripe 3, github 1", m, err)
			}

			// Resolve with a response: repeats replay it.
			answer := &idempotency.Record{Response: idempotency.Response{Status: 202,
				Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("resolved by operator")}}
			if err := l.Resolve(ctx, h2, answer); err != nil {
				t.Fatalf("Resolve(record): %v", err)
			}
			want := heldRecord(h2, t0)
			want.State, want.Response, want.CompletedAt = idempotency.StateDone, answer.Response, resolvedAt
			got := wantState(t, l, h2, idempotency.StateDone)
			if diff := idempotencytest.LedgerDiff(got, want); diff != "" {
				t.Fatalf("after Resolve(record): %s", diff)
			}
			mustClaim(t, l, claimReq(h2, "next", time.Hour), t0.Add(2*time.Hour), idempotency.Done)

			// Resolve by release: the next delivery is forwarded.
			if err := l.Resolve(ctx, h3, nil); err != nil {
				t.Fatalf("Resolve(release): %v", err)
			}
			wantGone(t, l, h3)
			mustClaim(t, l, claimReq(h3, "next", time.Hour), t0.Add(2*time.Hour), idempotency.Acquired)

			// Only held rows resolve.
			for _, tc := range []struct {
				name string
				r    idempotency.Ref
				rec  *idempotency.Record
			}{
				{"done row", done, answer},
				{"pending row", pending, nil},
				{"missing row", ref("never-seen"), nil},
				{"resolved row", h2, nil},
			} {
				if err := l.Resolve(ctx, tc.r, tc.rec); !errors.Is(err, idempotency.ErrNotFound) {
					t.Fatalf("Resolve(%s): err = %v, want ErrNotFound", tc.name, err)
				}
			}
			wantState(t, l, done, idempotency.StateDone)
			wantState(t, l, pending, idempotency.StatePending)

			// Delete forgets any state.
			for _, r := range []idempotency.Ref{done, pending, h1} {
				if err := l.Delete(ctx, r); err != nil {
					t.Fatalf("Delete(%q): %v", r.Key, err)
				}
				wantGone(t, l, r)
				if err := l.Delete(ctx, r); !errors.Is(err, idempotency.ErrNotFound) {
					t.Fatalf("second Delete(%q): err = %v, want ErrNotFound", r.Key, err)
				}
			}
			if n, err := l.CountHeld(ctx, "stripe"); err != nil || n != 0 {
				t.Fatalf("CountHeld(stripe) after resolving = %d, %v; want 0", n, err)
			}
		})
	}
}

// statementLog is a GORM plugin recording every statement text, to see
// what Migrate issues.
type statementLog struct {
	mu   sync.Mutex
	stmt []string
}

func (*statementLog) Name() string { return "test:statements" }

func (s *statementLog) Initialize(db *gorm.DB) error {
	record := func(db *gorm.DB) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stmt = append(s.stmt, db.Statement.SQL.String())
	}
	if err := db.Callback().Raw().After("gorm:raw").Register("test:raw", record); err != nil {
		return err
	}
	if err := db.Callback().Row().After("gorm:row").Register("test:row", record); err != nil {
		return err
	}
	return db.Callback().Query().After("gorm:query").Register("test:query", record)
}

func (s *statementLog) since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stmt[n:])
}

func (s *statementLog) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stmt)
}

func TestMigrateIsIdempotent(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			log := &statementLog{}
			o := d.options(t)
			o.Plugins = []gorm.Plugin{log}
			l := openLedger(t, o)
			r := ref("survives-migrate")
			rec := doneRecord(r, t0, t0.Add(time.Hour))
			mustCommit(t, l, rec, "o", t0)
			before := log.len()
			if err := l.Migrate(t.Context()); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			for _, s := range log.since(before) {
				// Nor writes a row: a read-only standby's replica migrates too.
				if u := strings.ToUpper(s); strings.Contains(u, "CREATE ") || strings.Contains(u, "ALTER ") || strings.Contains(u, "DROP ") || strings.Contains(u, "INSERT ") {
					t.Errorf("second Migrate changed the schema or wrote: %s", s)
				}
			}
			want := *rec
			want.CompletedAt = t0
			if diff := idempotencytest.LedgerDiff(wantState(t, l, r, idempotency.StateDone), &want); diff != "" {
				t.Fatalf("record after second Migrate: %s", diff)
			}
		})
	}
}

// A replica of this release on a schema an earlier release migrated (a
// column missing: auto_migrate off, `gateway migrate` not run yet) is not
// ready: it refused deliveries reading that column, while /readyz, which
// only read the table, kept it in the load balancer.
func TestReadyNeedsThisReleasesColumns(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			if err := l.Ready(t.Context()); err != nil {
				t.Fatalf("Ready on a migrated ledger: %v", err)
			}
			db, err := l.DB()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`ALTER TABLE hookstamp_records DROP COLUMN acked`); err != nil {
				t.Fatal(err)
			}
			if err := l.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "acked") {
				t.Fatalf("Ready without a column this release reads: %v, want an error naming it", err)
			}
		})
	}
}

// TestConcurrentMigrate is replicas starting together with auto_migrate on
// an empty database.
func TestConcurrentMigrate(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			o := d.options(t)
			ledgers := make([]*sqlledger.Ledger, 3)
			for i := range ledgers {
				l, err := sqlledger.Open(t.Context(), o)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = l.Close() })
				ledgers[i] = l
			}
			errs := make([]error, len(ledgers))
			var wg sync.WaitGroup
			for i, l := range ledgers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = l.Migrate(context.Background())
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("replica %d Migrate: %v", i, err)
				}
			}
			mustClaim(t, ledgers[0], claimReq(ref("k"), "a", time.Hour), t0, idempotency.Acquired)
		})
	}
}

// TestLeaseComparisonsAreExact checks lease expiry at sub-second precision,
// across midnight and across time zones: SQLite compares stored times as
// text, which is only right when they are all written the same way.
func TestLeaseComparisonsAreExact(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	midnight := time.Date(2026, 6, 12, 23, 59, 59, 900_000_000, time.UTC)
	half := t0.Add(500 * time.Millisecond) // lease 500ms: until exactly 10:00:01
	cases := []struct {
		name           string
		claimAt        time.Time
		lease          time.Duration
		laterAt        time.Time
		want           idempotency.ClaimStatus
		wantLeaseUntil time.Time
	}{
		{"a microsecond before expiry", half, 500 * time.Millisecond, t0.Add(time.Second - time.Microsecond), idempotency.InFlight, t0.Add(time.Second)},
		{"at expiry", half, 500 * time.Millisecond, t0.Add(time.Second), idempotency.InFlight, t0.Add(time.Second)},
		{"a microsecond after expiry", half, 500 * time.Millisecond, t0.Add(time.Second + time.Microsecond), idempotency.TakenOver, t0.Add(time.Second + time.Microsecond + 500*time.Millisecond)},
		{"across midnight, live", midnight, 200 * time.Millisecond, midnight.Add(199 * time.Millisecond), idempotency.InFlight, midnight.Add(200 * time.Millisecond)},
		{"across midnight, expired", midnight, 200 * time.Millisecond, midnight.Add(300 * time.Millisecond), idempotency.TakenOver, midnight.Add(500 * time.Millisecond)},
		{"claimed in another zone, live", t0.In(tokyo), 30 * time.Second, t0.Add(29 * time.Second), idempotency.InFlight, t0.Add(30 * time.Second)},
		{"claimed in another zone, expired", t0.In(tokyo), 30 * time.Second, t0.Add(31 * time.Second), idempotency.TakenOver, t0.Add(61 * time.Second)},
		{"checked in another zone, expired", t0, 30 * time.Second, t0.Add(31 * time.Second).In(tokyo), idempotency.TakenOver, t0.Add(61 * time.Second)},
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					r := ref(tc.name)
					req := claimReq(r, "first", time.Hour)
					req.Lease = tc.lease
					mustClaim(t, l, req, tc.claimAt, idempotency.Acquired)
					req.Owner = "second"
					mustClaim(t, l, req, tc.laterAt, tc.want)
					got := wantState(t, l, r, idempotency.StatePending)
					if !got.LeaseUntil.Equal(tc.wantLeaseUntil) {
						t.Fatalf("lease until %v, want %v", got.LeaseUntil, tc.wantLeaseUntil)
					}
				})
			}
		})
	}
}

// Commit takes a pending row over from another owner only once its lease
// has expired, on the same instant Claim does: at exactly lease_until the
// claim is still live (a claim then sees it in flight), so a commit by
// anyone else must change nothing; a microsecond later it records.
func TestCommitLeaseComparisonIsExact(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			r := ref("commit at lease expiry")
			req := claimReq(r, "first", time.Hour)
			req.Lease = time.Second
			mustClaim(t, l, req, t0, idempotency.Acquired)
			expiry := t0.Add(time.Second)
			err := l.Commit(context.Background(), doneRecord(r, expiry, expiry.Add(time.Hour)), "second", expiry)
			if !errors.Is(err, idempotency.ErrNotOwner) {
				t.Fatalf("commit by another owner at exactly the lease's end: %v, want ErrNotOwner (the claim is still live)", err)
			}
			if got := wantState(t, l, r, idempotency.StatePending); got.Owner != "first" {
				t.Fatalf("owner %q after a refused commit, want first", got.Owner)
			}
			after := expiry.Add(time.Microsecond)
			mustCommit(t, l, doneRecord(r, after, after.Add(time.Hour)), "second", after)
			wantState(t, l, r, idempotency.StateDone)
		})
	}
}

func TestCommitWithoutExpiryIsRejected(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			r := ref("no-expiry")
			rec := doneRecord(r, t0, time.Time{})
			err := l.Commit(t.Context(), rec, "o", t0)
			if err == nil || errors.Is(err, idempotency.ErrUnavailable) || errors.Is(err, idempotency.ErrNotOwner) {
				t.Fatalf("Commit without ExpiresAt: err = %v, want a plain error", err)
			}
			wantGone(t, l, r)
		})
	}
}

// TestSchemaErrorIsNotUnavailable: a logic error (here, no table: migrate
// was skipped) must not be taken for an outage, or on_unavailable: pass
// would forward every delivery without dedup.
func TestSchemaErrorIsNotUnavailable(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l, err := sqlledger.Open(t.Context(), d.options(t))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = l.Close() })
			_, err = l.Lookup(t.Context(), ref("k"))
			if err == nil || errors.Is(err, idempotency.ErrUnavailable) || errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("Lookup without a table: err = %v, want a plain error", err)
			}
		})
	}
}

func TestClosedLedgerIsUnavailable(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			_, err := l.Lookup(t.Context(), ref("k"))
			wantUnavailable(t, "Lookup after Close", err)
			wantUnavailable(t, "Commit after Close", l.Commit(t.Context(), doneRecord(ref("k"), t0, t0.Add(time.Hour)), "o", t0))
		})
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    sqlledger.Options
		want string
	}{
		{"unknown driver", sqlledger.Options{Driver: "mysql", DSN: "x"}, `unknown driver "mysql"`},
		{"empty DSN", sqlledger.Options{Driver: sqlledger.DriverSQLite}, "empty DSN"},
		{"bad postgres DSN", sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: "postgres://%zz"}, "open postgres"},
		{"SQLite time format", sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: "file::memory:?_time_format=sqlite"}, "_time_format is not supported"},
		{"SQLite time zone", sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: "ledger.db?_timezone=Europe/Berlin"}, "_timezone is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := sqlledger.Open(t.Context(), tc.o)
			if err == nil {
				_ = l.Close()
				t.Fatalf("Open(%+v) succeeded, want an error containing %q", tc.o, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSQLiteReopenKeepsRecords(t *testing.T) {
	o := sqliteOptions(t)
	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := l.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	r := ref("kept")
	rec := doneRecord(r, t0, t0.Add(time.Hour))
	mustCommit(t, l, rec, "o", t0.Add(time.Second))
	mustClaim(t, l, claimReq(ref("claimed"), "o", time.Hour), t0, idempotency.Acquired)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(o.DSN); err != nil {
		t.Fatalf("database file: %v", err)
	}

	l = openLedger(t, o)
	got := wantState(t, l, r, idempotency.StateDone)
	want := *rec
	want.CompletedAt = t0.Add(time.Second)
	if diff := idempotencytest.LedgerDiff(got, &want); diff != "" {
		t.Fatalf("after reopening: %s", diff)
	}
	wantState(t, l, ref("claimed"), idempotency.StatePending)
}

// TestSQLiteWritesUseWAL: readers are not blocked by the writer, and the
// journal mode persists in the file.
func TestSQLiteWritesUseWAL(t *testing.T) {
	o := sqliteOptions(t)
	openLedger(t, o)
	db, err := sql.Open("sqlite", o.DSN)
	if err != nil {
		t.Fatalf("open %s: %v", o.DSN, err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatalf("PRAGMA journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal", mode)
	}
}

// TestSQLiteConcurrentWriters: 100 goroutines claiming, committing and
// looking up at once never see SQLITE_BUSY.
func TestSQLiteConcurrentWriters(t *testing.T) {
	l := openLedger(t, sqliteOptions(t))
	const workers = 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			own := ref(fmt.Sprintf("own-%d", w))
			owner := fmt.Sprintf("owner-%d", w)
			if _, err := l.Claim(ctx, claimReq(own, owner, time.Hour), t0); err != nil {
				errs <- err
			}
			if err := l.Commit(ctx, doneRecord(own, t0, t0.Add(time.Hour)), owner, t0); err != nil {
				errs <- err
			}
			if _, err := l.Claim(ctx, claimReq(ref("shared"), owner, time.Hour), t0); err != nil {
				errs <- err
			}
			if _, err := l.Lookup(ctx, own); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent writer: %v", err)
	}
	for w := range workers {
		wantState(t, l, ref(fmt.Sprintf("own-%d", w)), idempotency.StateDone)
	}
}

// TestSQLiteLockedIsUnavailable: another process holding the write lock
// makes writes fail with ErrUnavailable within OpTimeout, while lookups
// keep answering (WAL).
func TestSQLiteLockedIsUnavailable(t *testing.T) {
	o := sqliteOptions(t)
	o.OpTimeout = 300 * time.Millisecond
	l := openLedger(t, o)
	mustCommit(t, l, doneRecord(ref("before"), t0, t0.Add(time.Hour)), "o", t0)

	other, err := sql.Open("sqlite", o.DSN)
	if err != nil {
		t.Fatalf("open %s: %v", o.DSN, err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatalf("conn: %v", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}

	start := time.Now()
	err = l.Commit(t.Context(), doneRecord(ref("during"), t0, t0.Add(time.Hour)), "o", t0)
	elapsed := time.Since(start)
	wantUnavailable(t, "Commit while another process holds the write lock", err)
	if elapsed > o.OpTimeout+2*time.Second {
		t.Fatalf("Commit failed after %v, want about OpTimeout (%v)", elapsed, o.OpTimeout)
	}
	wantState(t, l, ref("before"), idempotency.StateDone)

	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatalf("ROLLBACK: %v", err)
	}
	mustCommit(t, l, doneRecord(ref("after"), t0, t0.Add(time.Hour)), "o", t0)
}

func TestSQLiteInMemory(t *testing.T) {
	l := openLedger(t, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: ":memory:"})
	r := ref("mem")
	mustClaim(t, l, claimReq(r, "o", time.Hour), t0, idempotency.Acquired)
	mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
	wantState(t, l, r, idempotency.StateDone)
}

// unavailableCalls is every ledger call, for outage tests.
var unavailableCalls = []struct {
	name string
	call func(ctx context.Context, l *sqlledger.Ledger) error
}{
	{"Ping", func(ctx context.Context, l *sqlledger.Ledger) error { return l.Ping(ctx) }},
	{"Migrate", func(ctx context.Context, l *sqlledger.Ledger) error { return l.Migrate(ctx) }},
	{"Lookup", func(ctx context.Context, l *sqlledger.Ledger) error { _, err := l.Lookup(ctx, ref("k")); return err }},
	{"Claim", func(ctx context.Context, l *sqlledger.Ledger) error {
		_, err := l.Claim(ctx, claimReq(ref("k"), "o", time.Hour), t0)
		return err
	}},
	{"Commit", func(ctx context.Context, l *sqlledger.Ledger) error {
		return l.Commit(ctx, doneRecord(ref("k"), t0, t0.Add(time.Hour)), "o", t0)
	}},
	{"Release", func(ctx context.Context, l *sqlledger.Ledger) error { return l.Release(ctx, ref("k"), "o") }},
	{"Delete", func(ctx context.Context, l *sqlledger.Ledger) error { return l.Delete(ctx, ref("k")) }},
	{"Held", func(ctx context.Context, l *sqlledger.Ledger) error { _, err := l.Held(ctx, "stripe", 10); return err }},
	{"Resolve", func(ctx context.Context, l *sqlledger.Ledger) error { return l.Resolve(ctx, ref("k"), nil) }},
	{"CountHeld", func(ctx context.Context, l *sqlledger.Ledger) error { _, err := l.CountHeld(ctx, "stripe"); return err }},
	{"Sweep", func(ctx context.Context, l *sqlledger.Ledger) error { _, err := l.SweepAll(ctx, t0, 10); return err }},
}

func TestPostgresRefusedIsUnavailable(t *testing.T) {
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", testenv.FreePort(t))
	o := sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn, OpTimeout: 2 * time.Second}
	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open must not need the database: %v", err)
	}
	defer l.Close()
	for _, tc := range unavailableCalls {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.call(t.Context(), l)
			wantUnavailable(t, tc.name+" with nothing listening", err)
			if elapsed := time.Since(start); elapsed > o.OpTimeout+time.Second {
				t.Fatalf("%s failed after %v, want within OpTimeout (%v)", tc.name, elapsed, o.OpTimeout)
			}
		})
	}
}

// blackHole accepts TCP connections and never answers: a hung database.
func blackHole(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestPostgresHungIsUnavailableWithinOpTimeout(t *testing.T) {
	o := sqlledger.Options{Driver: sqlledger.DriverPostgres, OpTimeout: 300 * time.Millisecond,
		DSN: "postgres://postgres@" + blackHole(t) + "/test?sslmode=disable"}
	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	for _, tc := range unavailableCalls {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.call(t.Context(), l)
			elapsed := time.Since(start)
			wantUnavailable(t, tc.name+" against a server that never answers", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: err = %v, want it to wrap context.DeadlineExceeded", tc.name, err)
			}
			if elapsed > o.OpTimeout+time.Second {
				t.Fatalf("%s failed after %v, want about OpTimeout (%v)", tc.name, elapsed, o.OpTimeout)
			}
		})
	}
}

// TestPostgresRecoversAfterConnectionsAreKilled: the server drops every
// connection of the ledger (restart, failover, idle killer); calls fail with
// ErrUnavailable at worst, and the pool reconnects by itself.
func TestPostgresRecoversAfterConnectionsAreKilled(t *testing.T) {
	o := postgresOptions(t)
	app := testenv.Name("hsapp_")
	o.DSN += "&application_name=" + app
	l := openLedger(t, o)
	mustCommit(t, l, doneRecord(ref("k"), t0, t0.Add(time.Hour)), "o", t0)

	admin, err := sql.Open("pgx", testenv.PostgresAdminDSN())
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	defer admin.Close()
	var killed int
	err = admin.QueryRowContext(t.Context(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminate the ledger's connections: killed %d, %v", killed, err)
	}

	testenv.Eventually(t, 10*time.Second, "the ledger to reconnect", func() bool {
		_, err := l.Lookup(t.Context(), ref("k"))
		if err != nil {
			wantUnavailable(t, "Lookup after the server dropped the connection", err)
		}
		return err == nil
	})
}

// TestCreatesDataDirectory: the default DSN data/hookstamp.db works from a
// fresh checkout.
func TestCreatesDataDirectory(t *testing.T) {
	dir := t.TempDir()
	dsn := "file:" + filepath.Join(dir, "a", "b", "hookstamp.db") + "?cache=private"
	openLedger(t, sqlledger.Options{Driver: sqlledger.DriverSQLite, DSN: dsn})
	if _, err := os.Stat(filepath.Join(dir, "a", "b", "hookstamp.db")); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

// TestPluginsSeeReadsAndWrites: Options.Plugins reach every handle (SQLite
// has a writer and a reader), so tracing sees lookups as well as commits.
func TestPluginsSeeReadsAndWrites(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			log := &statementLog{}
			o := d.options(t)
			o.Plugins = []gorm.Plugin{log}
			l := openLedger(t, o)
			before := log.len()
			r := ref("traced")
			mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
			wantState(t, l, r, idempotency.StateDone)
			seen := strings.Join(log.since(before), "\n")
			for _, want := range []string{"INSERT INTO hookstamp_records", "SELECT route"} {
				if !strings.Contains(seen, want) {
					t.Fatalf("plugin saw %q, want a statement starting %q", seen, want)
				}
			}
		})
	}
}

// Held keys expire with the route's retention (README): the sweeper deletes
// an expired held row like any other, and keeps a held row still in its
// retention.
func TestSweepDeletesExpiredHeldRows(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, d.options(t))
			sweepAt := t0.Add(time.Hour)
			old, fresh := heldRecord(ref("held-expired"), t0), heldRecord(ref("held-live"), t0)
			old.ExpiresAt = sweepAt.Add(-time.Second)
			mustCommit(t, l, old, "o", t0)
			mustCommit(t, l, fresh, "o", t0)
			n, err := l.SweepAll(t.Context(), sweepAt, 10)
			if err != nil || n != 1 {
				t.Fatalf("SweepAll: %d rows, %v; want the expired held row", n, err)
			}
			wantGone(t, l, old.Ref)
			wantState(t, l, fresh.Ref, idempotency.StateHeld)
		})
	}
}

// TestReadOnlyPostgresIsUnavailable: a PostgreSQL that accepts connections
// but refuses writes (a hot standby the DSN's host points at after a
// failover, default_transaction_read_only during maintenance) is an outage
// that passes, not a logic error: claims and commits fail with
// ErrUnavailable, so that store.on_unavailable applies to them, while
// lookups keep answering.
func TestReadOnlyPostgresIsUnavailable(t *testing.T) {
	o := postgresOptions(t)
	rw := openLedger(t, o)
	mustCommit(t, rw, doneRecord(ref("before"), t0, t0.Add(time.Hour)), "o", t0)
	o.DSN += "&default_transaction_read_only=on"
	ro, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = ro.Close() })
	if _, err := ro.Lookup(t.Context(), ref("before")); err != nil {
		t.Fatalf("Lookup on a read-only database: %v", err)
	}
	_, err = ro.Claim(t.Context(), claimReq(ref("during"), "o", time.Hour), t0)
	wantUnavailable(t, "Claim on a read-only database", err)
	wantUnavailable(t, "Commit on a read-only database", ro.Commit(t.Context(), doneRecord(ref("during"), t0, t0.Add(time.Hour)), "o", t0))
}
