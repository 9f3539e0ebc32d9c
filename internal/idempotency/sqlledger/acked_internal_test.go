package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// ackedColumn is hookstamp_records.acked as the catalogue describes it.
type ackedColumn struct {
	nullable   bool
	defaultSQL string // "" without a default
}

func ackedColumnOf(t *testing.T, l *Ledger) ackedColumn {
	t.Helper()
	cols, err := l.w.Migrator().ColumnTypes(&recordRow{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cols {
		if c.Name() != "acked" {
			continue
		}
		var col ackedColumn
		col.nullable, _ = c.Nullable()
		if d, ok := c.DefaultValue(); ok {
			col.defaultSQL = d
		}
		return col
	}
	t.Fatal("hookstamp_records has no acked column")
	return ackedColumn{}
}

// ackedOf reads a row's acked as stored: nil for NULL.
func ackedOf(t *testing.T, l *Ledger, key string) *bool {
	t.Helper()
	var v sql.NullBool
	if err := l.w.Raw(`SELECT acked FROM hookstamp_records WHERE route = 'r' AND "key" = ?`, key).Row().Scan(&v); err != nil {
		t.Fatalf("acked of %s: %v", key, err)
	}
	if !v.Valid {
		return nil
	}
	return &v.Bool
}

func ackedString(v *bool) string {
	switch {
	case v == nil:
		return "NULL"
	case *v:
		return "true"
	}
	return "false"
}

// ddlRecorder keeps the schema statements l runs from now on.
func ddlRecorder(t *testing.T, l *Ledger) func() []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	name := "test:ddl:" + t.Name()
	err := l.w.Callback().Raw().After("gorm:raw").Register(name, func(db *gorm.DB) {
		q := strings.TrimSpace(db.Statement.SQL.String())
		if u := strings.ToUpper(q); strings.HasPrefix(u, "ALTER") || strings.HasPrefix(u, "CREATE TABLE") || strings.HasPrefix(u, "DROP TABLE") {
			mu.Lock()
			seen = append(seen, q)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// insertAsOlderRelease inserts a done row the way a release that does not
// know acked writes one: without naming the column.
func insertAsOlderRelease(t *testing.T, l *Ledger, key string) {
	t.Helper()
	now := time.Now().UTC()
	if err := l.w.Exec(`INSERT INTO hookstamp_records (route, "key", state, status, headers, body, body_omitted, trace_id, span_id, source, `+
		`created_at, completed_at, expires_at) VALUES ('r', ?, 'done', 200, '{}', ?, false, '', '', '', ?, ?, ?)`,
		key, []byte("ok"), now, now, now.Add(time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
}

// mainAckedRow is acked as the build before the column became tri-state
// declared it, to make that build's column on a ledger of this one.
type mainAckedRow struct {
	Acked bool `gorm:"column:acked;not null;default:false"`
}

func (mainAckedRow) TableName() string { return TableName }

// A ledger whose acked column an earlier build of this release made
// NOT NULL DEFAULT false is migrated to the nullable column without a
// default: otherwise every row a replica of an older release inserts
// during a rolling update would read as a synchronous record (false), and
// on SQLite a claim (NULL) could not be inserted at all. The rows kept
// keep their value, the indexes stay, and a second Migrate alters
// nothing.
func TestMigrateMakesAckedNullable(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		m := l.w.Migrator()
		if err := m.DropColumn(&recordRow{}, "acked"); err != nil {
			t.Fatal(err)
		}
		if err := m.AddColumn(&mainAckedRow{}, "Acked"); err != nil {
			t.Fatal(err)
		}
		if col := ackedColumnOf(t, l); col.nullable || col.defaultSQL == "" {
			t.Fatalf("the earlier build's column: %+v, want NOT NULL with a default", col)
		}
		r := settledDelivery(t, l, "acked", idempotency.StateDone, time.Now())
		insertAsOlderRelease(t, l, "older") // false under that column's default
		indexes := indexDefs(t, l)

		ddl := ddlRecorder(t, l)
		if err := l.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		altered := ddl()
		t.Logf("the migration ran %q", altered)
		if !slices.ContainsFunc(altered, func(q string) bool { return strings.Contains(q, "acked") }) {
			t.Fatalf("the migration ran %q, nothing on acked", altered)
		}
		if col := ackedColumnOf(t, l); !col.nullable || col.defaultSQL != "" {
			t.Fatalf("acked after the migration: %+v, want nullable without a default", col)
		}
		if got := ackedString(ackedOf(t, l, r.Key)); got != "true" {
			t.Errorf("an acknowledged row after the migration: acked %s, want true", got)
		}
		if got := ackedString(ackedOf(t, l, "older")); got != "false" {
			t.Errorf("a row made under the earlier column: acked %s, want false kept", got)
		}
		if got := indexDefs(t, l); l.d.name == DriverSQLite && !maps.Equal(got, indexes) || len(got) != len(indexes) {
			t.Errorf("indexes after the migration:\n%v\nwere\n%v", got, indexes)
		}
		insertAsOlderRelease(t, l, "during-the-update")
		if got := ackedString(ackedOf(t, l, "during-the-update")); got != "NULL" {
			t.Errorf("a row an older release inserts after the migration: acked %s, want NULL", got)
		}
		if c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "claimed"}, Owner: "o",
			Lease: time.Minute, Retention: time.Hour}, time.Now()); err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("claim after the migration: %+v, %v", c, err)
		}

		if err := l.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := ddl()[len(altered):]; len(got) != 0 {
			t.Errorf("a second Migrate ran %q, want no schema change", got)
		}
	})
}

// A ledger of a release without acked gets the column from Migrate; the
// rows stored before it read as unknown (AckUnknown), not as synchronous
// records, and so do those an older replica inserts afterwards.
func TestMigrateAddsAckedAsUnknown(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		if err := l.w.Migrator().DropColumn(&recordRow{}, "acked"); err != nil {
			t.Fatal(err)
		}
		insertAsOlderRelease(t, l, "before")
		if err := l.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if col := ackedColumnOf(t, l); !col.nullable || col.defaultSQL != "" {
			t.Fatalf("acked after the migration: %+v, want nullable without a default", col)
		}
		insertAsOlderRelease(t, l, "during")
		for _, key := range []string{"before", "during"} {
			rec, err := l.Lookup(ctx, idempotency.Ref{Route: "r", Key: key})
			if err != nil || rec.Acked || !rec.AckUnknown || string(rec.Body) != "ok" {
				t.Errorf("%s: %+v, %v; want the record, acked unknown", key, rec, err)
			}
		}
	})
}

// insertOlderClaim makes a pending row whose lease expired the way a
// release that does not know acked makes one: acked NULL.
func insertOlderClaim(t *testing.T, l *Ledger, key, owner string, now time.Time) {
	t.Helper()
	past := dbTime(now.Add(-time.Minute))
	if err := l.w.Exec(`INSERT INTO hookstamp_records (route, "key", state, owner, lease_until, status, headers, body_omitted, trace_id, span_id, source, `+
		`created_at, expires_at) VALUES ('r', ?, 'pending', ?, ?, 0, '{}', false, '', '', '', ?, ?)`,
		key, owner, past, past, dbTime(now.Add(time.Hour))).Error; err != nil {
		t.Fatal(err)
	}
}

// Every row this release settles says whether its provider was
// acknowledged, on every path that writes one: a synchronous record
// (claim and commit, alone or batched, a recommit, a commit over a claim
// an older release made) false, an async intake (alone or batched, over a
// claim of its own or an older release's) and a delivery queued again by
// an operator true. NULL is left to the rows of releases that do not know
// the column, and to claims, which a commit or an intake settles: an older
// replica settling one leaves the NULL its own rows have. A settled row
// left NULL by this release would be answered as an older release's.
func TestEveryWriteNamesAcked(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
		req := func(k string) *idempotency.Request {
			return &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(k)}
		}
		record := func(k string, st idempotency.State) *idempotency.Record {
			return &idempotency.Record{Ref: ref(k), State: st, Response: idempotency.Response{Status: 200, Body: []byte("ok")},
				ExpiresAt: now.Add(time.Hour), Request: req(k)}
		}
		claim := func(k, owner string, want idempotency.ClaimStatus) {
			t.Helper()
			c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(k), Owner: owner, Lease: time.Minute, Retention: time.Hour}, now)
			if err != nil || c.Status != want {
				t.Fatalf("claim %s: %v, %v; want %v", k, c.Status, err, want)
			}
		}
		check := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]string{}

		claim("claimed", "o1", idempotency.Acquired)
		if got := ackedString(ackedOf(t, l, "claimed")); got != "NULL" {
			t.Errorf("a claim: acked %s, want NULL until it is settled", got)
		}
		check(l.Commit(ctx, record("claimed", idempotency.StateDone), "o1", now))
		want["claimed"] = "false"

		check(l.Commit(ctx, record("committed", idempotency.StateDone), "o2", now))
		want["committed"] = "false"

		claim("held", "o3", idempotency.Acquired)
		check(l.Commit(ctx, record("held", idempotency.StateHeld), "o3", now))
		want["held"] = "false"

		claim("recommitted", "o4", idempotency.Acquired)
		check(l.Recommit(ctx, record("recommitted", idempotency.StateDone), "o4", now, true))
		want["recommitted"] = "false"
		check(l.Recommit(ctx, record("recommit-insert", idempotency.StateDone), "o5", now, false))
		want["recommit-insert"] = "false"

		// Claims an older replica made, whose leases expired.
		insertOlderClaim(t, l, "older-taken-over", "old", now)
		claim("older-taken-over", "o6", idempotency.TakenOver)
		check(l.Commit(ctx, record("older-taken-over", idempotency.StateDone), "o6", now))
		want["older-taken-over"] = "false"
		insertOlderClaim(t, l, "older-committed-over", "old", now)
		check(l.Commit(ctx, record("older-committed-over", idempotency.StateDone), "o7", now))
		want["older-committed-over"] = "false"
		insertOlderClaim(t, l, "older-recommitted-over", "old", now)
		check(l.Recommit(ctx, record("older-recommitted-over", idempotency.StateDone), "o8", now, true))
		want["older-recommitted-over"] = "false"
		insertOlderClaim(t, l, "older-enqueued-over", "old", now)
		if replaced, err := l.Enqueue(ctx, record("older-enqueued-over", idempotency.StateQueued), "", now); err != nil || !replaced {
			t.Fatalf("intake over an older claim: %v, %v", replaced, err)
		}
		want["older-enqueued-over"] = "true"

		// Batched commits (PostgreSQL's multi-row statement, SQLite's
		// transaction), one of them over an older replica's claim.
		insertOlderClaim(t, l, "batch-over-older", "old", now)
		commits := []*commitJob{commitJobFor(ref("batch-fresh"), "b1", now), commitJobFor(ref("batch-over-older"), "b2", now)}
		l.runCommits(commits)
		for _, j := range commits {
			check(<-j.done)
			want[j.row.ref.Key] = "false"
		}
		if l.d.name == DriverPostgres {
			claims := []*claimJob{}
			for _, k := range []string{"batch-claimed-1", "batch-claimed-2"} {
				claims = append(claims, &claimJob{ctx: ctx, now: dbTime(now), done: make(chan claimInsert, 1),
					req: &idempotency.ClaimRequest{Ref: ref(k), Owner: "c-" + k, Lease: time.Minute, Retention: time.Hour}})
			}
			l.runClaims(claims)
			for _, j := range claims {
				if res := <-j.done; res.err != nil || !res.inserted {
					t.Fatalf("batched claim %s: %+v", j.req.Key, res)
				}
				if got := ackedString(ackedOf(t, l, j.req.Key)); got != "NULL" {
					t.Errorf("a batched claim: acked %s, want NULL until it is settled", got)
				}
				check(l.Commit(ctx, record(j.req.Key, idempotency.StateDone), j.req.Owner, now))
				want[j.req.Key] = "false"
			}
		}

		// Async intakes: alone, over the caller's claim, and batched.
		_, err := l.Enqueue(ctx, record("enqueued", idempotency.StateQueued), "", now)
		check(err)
		want["enqueued"] = "true"
		claim("claimed-enqueued", "o9", idempotency.Acquired)
		_, err = l.Enqueue(ctx, record("claimed-enqueued", idempotency.StateQueued), "o9", now)
		check(err)
		want["claimed-enqueued"] = "true"
		var intakes []*intakeJob
		for _, k := range []string{"intake-batch-1", "intake-batch-2"} {
			j, err := newIntakeJob(ctx, record(k, idempotency.StateQueued), "", now, 0)
			check(err)
			intakes = append(intakes, j)
			want[k] = "true"
		}
		dones := []chan error{intakes[0].done, intakes[1].done}
		check(l.runIntake(ctx, intakes))
		for _, d := range dones {
			check(<-d)
		}

		// Queued again by an operator: a held synchronous record released
		// into the queue, and a dead delivery an older replica stored.
		_, err = l.Requeue(ctx, ref("held"), true, now.Add(time.Hour))
		check(err)
		want["held"] = "true"
		dead := settledDelivery(t, l, "dead", idempotency.StateDead, now)
		check(l.w.Exec(`UPDATE hookstamp_records SET acked = NULL WHERE route = 'r' AND "key" = ?`, dead.Key).Error)
		if n, err := l.Redrive(ctx, "r", []string{dead.Key}, now.Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		want["dead"] = "true"

		for k, w := range want {
			if got := ackedString(ackedOf(t, l, k)); got != w {
				t.Errorf("%s: acked %s, want %s", k, got, w)
			}
		}
		var unknown []string
		rows, err := l.w.Raw(`SELECT "key" FROM hookstamp_records WHERE state <> 'pending' AND acked IS NULL`).Rows()
		check(err)
		defer rows.Close()
		for rows.Next() {
			var k string
			check(rows.Scan(&k))
			unknown = append(unknown, k)
		}
		check(rows.Err())
		if len(unknown) != 0 {
			t.Errorf("settled rows left acked NULL: %v", unknown)
		}
	})
}

// A held row an older release wrote (acked NULL) is deleted by a release
// as one recorded synchronously is: the admin API decides by the route
// whether to queue it instead (an older release acknowledged it only on an
// async route), and a delete that skipped it left the key held for good.
func TestReleaseDeletesAHeldRowOfAnOlderRelease(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		r := idempotency.Ref{Route: "r", Key: "older-held"}
		if err := l.Commit(ctx, &idempotency.Record{Ref: r, State: idempotency.StateHeld, ExpiresAt: time.Now().Add(time.Hour)}, "o", time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := l.w.Exec(`UPDATE hookstamp_records SET acked = NULL WHERE route = 'r' AND "key" = ?`, r.Key).Error; err != nil {
			t.Fatal(err)
		}
		if err := l.Resolve(ctx, r, nil); err != nil {
			t.Fatalf("release of a held row of an older release: %v, want it deleted", err)
		}
		if _, err := l.Lookup(ctx, r); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("the row after its release: %v, want ErrNotFound", err)
		}
	})
}
