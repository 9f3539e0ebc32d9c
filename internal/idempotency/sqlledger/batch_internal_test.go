package sqlledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// These tests hand the PostgreSQL batch runners whole batches, so that the
// multi-row statements are exercised deterministically (under real
// concurrency a batch's size depends on timing).

func openPG(t *testing.T) *Ledger {
	t.Helper()
	return openPGWith(t, Options{CommitBatch: 1, LookupBatch: 1})
}

// openPGWith opens a PostgreSQL ledger of the test's own with o's batching.
func openPGWith(t testing.TB, o Options) *Ledger {
	t.Helper()
	o.Driver, o.DSN, o.MaxOpenConns = DriverPostgres, testenv.Postgres(t), 4
	return openMigrated(t, o)
}

// openMigrated opens o and migrates it; the ledger is closed when the test
// ends.
func openMigrated(t testing.TB, o Options) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

func commitJobFor(r idempotency.Ref, owner string, now time.Time) *commitJob {
	return &commitJob{ctx: context.Background(), done: make(chan error, 1), row: commitRow{
		ref: r, state: string(idempotency.StateDone), fp: []byte("fp"), status: 200, headers: `{"Content-Type":"text/plain"}`,
		body: []byte("answer of " + owner), traceID: "t", spanID: "s", source: "src",
		created: dbTime(now), completed: dbTime(now), expires: dbTime(now.Add(time.Hour)), owner: owner, now: dbTime(now),
	}}
}

// One batch mixing fresh keys, a key committed twice, a pending row owned
// by one of the batch, a pending row owned by someone else and a done row:
// each row gets the result it would get alone, in order.
func TestCommitBatchStatementKeepsPerRowResults(t *testing.T) {
	l := openPG(t)
	ctx := context.Background()
	now := time.Now()
	ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
	claim := func(k, owner string, lease time.Duration) {
		t.Helper()
		c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(k), Owner: owner, Lease: lease, Retention: time.Hour}, now)
		if err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("claim %s: %v %v", k, c.Status, err)
		}
	}
	claim("mine", "o-mine", time.Minute)
	claim("theirs", "o-other", time.Minute)
	claim("expired", "o-dead", -time.Second)
	if err := l.Commit(ctx, &idempotency.Record{Ref: ref("done"), State: idempotency.StateDone, Response: idempotency.Response{Status: 201},
		ExpiresAt: now.Add(time.Hour)}, "o-first", now); err != nil {
		t.Fatal(err)
	}
	batch := []*commitJob{
		commitJobFor(ref("fresh-1"), "a", now),
		commitJobFor(ref("twice"), "b1", now),
		commitJobFor(ref("mine"), "o-mine", now),
		commitJobFor(ref("theirs"), "c", now),
		commitJobFor(ref("twice"), "b2", now),
		commitJobFor(ref("expired"), "d", now),
		commitJobFor(ref("done"), "e", now),
		commitJobFor(ref("fresh-2"), "f", now),
	}
	l.runCommits(batch)
	wantOK := map[string]bool{"a": true, "b1": true, "o-mine": true, "d": true, "f": true}
	for _, j := range batch {
		err := <-j.done
		switch {
		case wantOK[j.row.owner] && err != nil:
			t.Errorf("commit %s by %s: %v, want success", j.row.ref.Key, j.row.owner, err)
		case !wantOK[j.row.owner] && !errors.Is(err, idempotency.ErrNotOwner):
			t.Errorf("commit %s by %s: %v, want ErrNotOwner", j.row.ref.Key, j.row.owner, err)
		}
	}
	for k, body := range map[string]string{"twice": "answer of b1", "mine": "answer of o-mine", "expired": "answer of d", "fresh-2": "answer of f"} {
		rec, err := l.Lookup(ctx, ref(k))
		if err != nil || rec.State != idempotency.StateDone || string(rec.Body) != body || rec.Owner != "" {
			t.Errorf("%s: %+v %v, want done with %q and no owner", k, rec, err, body)
		}
	}
	if rec, _ := l.Lookup(ctx, ref("theirs")); rec == nil || rec.State != idempotency.StatePending || rec.Owner != "o-other" {
		t.Errorf("theirs: %+v, want still pending for o-other", rec)
	}
	if rec, _ := l.Lookup(ctx, ref("done")); rec == nil || rec.Status != 201 {
		t.Errorf("done: %+v, want the first record kept", rec)
	}
}

// The batch statement takes a pending row over from another owner on the
// same instant as the single-row one and Claim: not at exactly lease_until
// (the claim is still live then), a microsecond later.
func TestCommitBatchLeaseComparisonIsExact(t *testing.T) {
	l := openPG(t)
	ctx := context.Background()
	now := dbTime(time.Date(2026, 6, 12, 10, 0, 0, 0, time.UTC))
	ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
	for _, k := range []string{"at-expiry", "after-expiry"} {
		c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(k), Owner: "o-" + k, Lease: time.Second, Retention: time.Hour}, now)
		if err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("claim %s: %v %v", k, c.Status, err)
		}
	}
	expiry := now.Add(time.Second)
	at := commitJobFor(ref("at-expiry"), "x", expiry)
	after := commitJobFor(ref("after-expiry"), "y", expiry.Add(time.Microsecond))
	l.runCommits([]*commitJob{at, after})
	if err := <-at.done; !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("commit by another owner at exactly the lease's end: %v, want ErrNotOwner (the claim is still live)", err)
	}
	if err := <-after.done; err != nil {
		t.Errorf("commit by another owner after the lease's end: %v, want success", err)
	}
	if rec, err := l.Lookup(ctx, ref("at-expiry")); err != nil || rec.State != idempotency.StatePending || rec.Owner != "o-at-expiry" {
		t.Errorf("at-expiry: %+v %v, want still pending for its owner", rec, err)
	}
}

// A round that fails after an earlier round of the same batch was written
// (a key committed twice, the second row refused): the first commit is
// reported as made — its own row is there — not as another owner's, and
// the refused row fails alone.
func TestCommitBatchFailingLaterRoundKeepsEarlierResults(t *testing.T) {
	l := openPG(t)
	now := time.Now()
	r := idempotency.Ref{Route: "r", Key: "twice-refused"}
	first := commitJobFor(r, "first", now)
	second := commitJobFor(r, "second", now)
	second.row.source = "bad\x00source" // PostgreSQL refuses NUL in text
	l.runCommits([]*commitJob{first, second})
	if err := <-first.done; err != nil {
		t.Fatalf("the first commit, written in the first round: %v, want success", err)
	}
	if err := <-second.done; err == nil || errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("the refused row: %v, want the database's refusal", err)
	}
	rec, err := l.Lookup(context.Background(), r)
	if err != nil || string(rec.Body) != "answer of first" {
		t.Fatalf("row: %+v %v, want the first commit's", rec, err)
	}
}

// A batch of claims: each fresh key is made pending for its owner, two
// claims of one key in the same batch yield one row (the other claim finds
// it taken), and a key that has a row is reported as not inserted.
func TestClaimBatchStatementKeepsPerRowResults(t *testing.T) {
	l := openPG(t)
	ctx := context.Background()
	now := dbTime(time.Now())
	ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
	if err := l.Commit(ctx, &idempotency.Record{Ref: ref("done"), ExpiresAt: now.Add(time.Hour)}, "x", now); err != nil {
		t.Fatal(err)
	}
	job := func(k, owner string) *claimJob {
		return &claimJob{ctx: ctx, now: now, done: make(chan claimInsert, 1),
			req: &idempotency.ClaimRequest{Ref: ref(k), Owner: owner, Lease: time.Minute, Retention: time.Hour, Fingerprint: []byte("fp")}}
	}
	batch := []*claimJob{job("k1", "o1"), job("dup", "o2"), job("dup", "o3"), job("done", "o4"), job("k2", "o5")}
	l.runClaims(batch)
	inserted := map[string]bool{}
	for _, j := range batch {
		res := <-j.done
		if res.err != nil {
			t.Fatalf("claim %s: %v", j.req.Key, res.err)
		}
		inserted[j.req.Owner] = res.inserted
	}
	if !inserted["o1"] || !inserted["o5"] || inserted["o4"] || inserted["o2"] == inserted["o3"] {
		t.Errorf("inserted %v: want o1, o5 and exactly one of o2/o3", inserted)
	}
	for _, k := range []string{"k1", "k2", "dup"} {
		rec, err := l.Lookup(ctx, ref(k))
		if err != nil || rec.State != idempotency.StatePending || !rec.LeaseUntil.Equal(now.Add(time.Minute)) || string(rec.Fingerprint) != "fp" {
			t.Errorf("%s: %+v %v, want pending with its lease and fingerprint", k, rec, err)
		}
	}
}

// A batch of lookups: each caller gets its own row, or ErrNotFound, even
// when the statement's route × key product returns rows nobody asked for.
func TestLookupBatchStatementAnswersEachCaller(t *testing.T) {
	l := openPG(t)
	ctx := context.Background()
	now := time.Now()
	for _, r := range []idempotency.Ref{{Route: "a", Key: "1"}, {Route: "b", Key: "2"}, {Route: "a", Key: "2"}} {
		if err := l.Commit(ctx, &idempotency.Record{Ref: r, Response: idempotency.Response{Body: []byte(r.Route + r.Key)},
			ExpiresAt: now.Add(time.Hour)}, "o", now); err != nil {
			t.Fatal(err)
		}
	}
	asks := []idempotency.Ref{{Route: "a", Key: "1"}, {Route: "b", Key: "2"}, {Route: "b", Key: "1"}, {Route: "a", Key: "1"}, {Route: "c", Key: "9"}}
	batch := make([]*lookupJob, len(asks))
	for i, r := range asks {
		batch[i] = &lookupJob{ctx: ctx, ref: r, done: make(chan lookupResult, 1)}
	}
	l.runLookups(batch)
	for _, j := range batch {
		res := <-j.done
		want := map[string]string{"a1": "a1", "b2": "b2"}[j.ref.Route+j.ref.Key]
		switch {
		case want == "" && !errors.Is(res.err, idempotency.ErrNotFound):
			t.Errorf("lookup %v: %+v %v, want ErrNotFound", j.ref, res.rec, res.err)
		case want != "" && (res.err != nil || res.rec.Ref != j.ref || string(res.rec.Body) != want):
			t.Errorf("lookup %v: %+v %v, want its row", j.ref, res.rec, res.err)
		}
	}
}

// A batch larger than the statement limit of parameters is still one
// statement per round: the arrays are single parameters.
func TestBatchStatementsTakeManyRows(t *testing.T) {
	l := openPG(t)
	now := time.Now()
	batch := make([]*commitJob, 500)
	for i := range batch {
		batch[i] = commitJobFor(idempotency.Ref{Route: "r", Key: fmt.Sprint("k", i)}, fmt.Sprint("o", i), now)
	}
	l.runCommits(batch)
	for _, j := range batch {
		if err := <-j.done; err != nil {
			t.Fatalf("commit %s: %v", j.row.ref.Key, err)
		}
	}
	for _, k := range []string{"k0", "k250", "k499"} {
		if rec, err := l.Lookup(context.Background(), idempotency.Ref{Route: "r", Key: k}); err != nil || rec.State != idempotency.StateDone {
			t.Errorf("%s: %+v %v, want done", k, rec, err)
		}
	}
}

// Batches whose keys overlap, queued in opposite orders (a repeat claimed
// while its first delivery commits; two replicas' batches), wait for each
// other and never deadlock: every batch statement writes rows in one order.
// Each round starts every worker at once on fresh keys, so that their
// statements meet each other's uncommitted rows.
func TestOverlappingBatchesDoNotDeadlock(t *testing.T) {
	l := openPG(t)
	now := dbTime(time.Now())
	const workers, rounds, nkeys = 6, 10, 200
	errs := make(chan error, workers*rounds*nkeys)
	for round := range rounds {
		var start, wg sync.WaitGroup
		start.Add(1)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				claims := make([]*claimJob, nkeys)
				commits := make([]*commitJob, nkeys)
				for i := range nkeys {
					k := i
					if w%2 == 1 {
						k = nkeys - 1 - i
					}
					owner := fmt.Sprintf("w%d-%d", w, k)
					r := idempotency.Ref{Route: "r", Key: fmt.Sprintf("k%d-%03d", round, k)}
					claims[i] = &claimJob{ctx: context.Background(), now: now, done: make(chan claimInsert, 1),
						req: &idempotency.ClaimRequest{Ref: r, Owner: owner, Lease: time.Minute, Retention: time.Hour}}
					commits[i] = commitJobFor(r, owner, now)
				}
				start.Wait()
				if w%3 == 0 {
					l.runCommits(commits)
					for _, j := range commits {
						if err := <-j.done; err != nil && !errors.Is(err, idempotency.ErrNotOwner) {
							errs <- err
						}
					}
					return
				}
				l.runClaims(claims)
				for _, j := range claims {
					if res := <-j.done; res.err != nil {
						errs <- res.err
					}
				}
			}()
		}
		start.Done()
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A batched lookup stays a primary-key probe as the table grows from
// empty: the plan is made for each statement, never a generic one cached
// while the table was small (a sequential scan, which nothing invalidates
// until autovacuum first analyzes the table).
func TestBatchedLookupStaysAProbeAsTheTableGrows(t *testing.T) {
	l, err := Open(context.Background(), Options{Driver: DriverPostgres, DSN: testenv.Postgres(t), MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	batch := func(keys ...string) {
		jobs := make([]*lookupJob, len(keys))
		for i, k := range keys {
			jobs[i] = &lookupJob{ctx: ctx, ref: idempotency.Ref{Route: "r", Key: k}, done: make(chan lookupResult, 1)}
		}
		l.runLookups(jobs)
		for _, j := range jobs {
			if res := <-j.done; res.err != nil && !errors.Is(res.err, idempotency.ErrNotFound) {
				t.Fatal(res.err)
			}
		}
	}
	for range 20 { // enough executions for a connection to settle on a generic plan
		batch("a", "b")
	}
	if err := l.w.Exec(`INSERT INTO hookstamp_records (route, "key", state, status, headers, body_omitted, trace_id, span_id, source, created_at, expires_at)
		SELECT 'r', 'k' || i, 'done', 200, '{}', false, '', '', '', now(), now() + interval '1 day' FROM generate_series(1, 300000) AS i`).Error; err != nil {
		t.Fatal(err)
	}
	// The table's scan counters, as the reader's one connection (the
	// lookups' backend) has reported them: it flushes its own at once.
	scans := func() (seq, idx, fetched int64) {
		t.Helper()
		if err := l.r.Exec(`SELECT pg_stat_force_next_flush()`).Error; err != nil {
			t.Fatal(err)
		}
		if err := l.r.Raw(`SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relid = 'hookstamp_records'::regclass`).
			Row().Scan(&seq, &idx, &fetched); err != nil {
			t.Fatal(err)
		}
		return seq, idx, fetched
	}
	seq0, idx0, fetched0 := scans()
	const lookups = 20
	for i := range lookups {
		batch(fmt.Sprint("k", i*7), "missing", fmt.Sprint("k", i*11))
	}
	var seq, idx, fetched int64
	testenv.Eventually(t, 5*time.Second, "the lookups' scans counted", func() bool {
		seq, idx, fetched = scans()
		return seq > seq0 || idx >= idx0+lookups
	})
	// Each lookup asks for three keys, two of them there: a probe fetches
	// those, a scan of the route's index range every row.
	if seq != seq0 || idx < idx0+lookups || fetched-fetched0 > 3*lookups {
		t.Fatalf("%d batched lookups on a 300 000-row table: %d sequential scans, %d index scans fetching %d rows; want none, at least %d, at most %d",
			lookups, seq-seq0, idx-idx0, fetched-fetched0, lookups, 3*lookups)
	}
}

// SweepAll rests after every full batch, SweepRest times as long as the
// batch took, and not after the last, short one.
func TestSweepAllRestsBetweenBatches(t *testing.T) {
	l := openPG(t)
	ctx := context.Background()
	now := time.Now()
	for i := range 25 {
		r := idempotency.Ref{Route: "r", Key: fmt.Sprint("old-", i)}
		if err := l.Commit(ctx, &idempotency.Record{Ref: r, ExpiresAt: now.Add(-time.Hour)}, "o", now); err != nil {
			t.Fatal(err)
		}
	}
	var rests []time.Duration
	l.rest = func(_ context.Context, d time.Duration) { rests = append(rests, d) }
	n, err := l.SweepAll(ctx, now, 10)
	if err != nil || n != 25 {
		t.Fatalf("SweepAll = %d, %v; want 25", n, err)
	}
	if len(rests) != 2 {
		t.Fatalf("rested %d times (%v), want after each of the 2 full batches", len(rests), rests)
	}
	for _, d := range rests {
		if d <= 0 {
			t.Errorf("rest %v: want SweepRest times the batch's duration", d)
		}
	}
}

// holdRow inserts key's row in a transaction left open, so that a claim
// statement on the same key waits on it (as a batch waits on a slow disk
// or a lock); the returned func rolls it back.
func holdRow(t *testing.T, l *Ledger, key string, now time.Time) func() {
	t.Helper()
	tx := l.w.Begin()
	if err := tx.Exec(claimInsertSQL, "r", key, "o-other", now.Add(time.Minute), nil, "", now, now.Add(time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rollback := func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(rollback)
	return rollback
}

// claimAfterCut claims key for owner under a context that ends after d,
// as a delivery cut while its claim waits; it must fail.
func claimAfterCut(t *testing.T, l *Ledger, key, owner string, now time.Time, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: key}, Owner: owner, Lease: time.Minute, Retention: time.Hour}
	if _, err := l.Claim(ctx, req, now); err == nil {
		t.Fatalf("claim of %s succeeded although its caller left", key)
	}
}

// retryAcquires checks that the provider's retry of key is forwarded: no
// row of a caller that left stands in its way.
func retryAcquires(t *testing.T, l *Ledger, key string, now time.Time) {
	t.Helper()
	req := idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: key}, Owner: "o-retry", Lease: time.Minute, Retention: time.Hour}
	c, err := l.Claim(context.Background(), req, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != idempotency.Acquired {
		t.Fatalf("retry's claim of %s = %v (owner %q), want acquired: a claim whose caller left was made after all", key, c.Status, c.Owner)
	}
}

// A claim whose caller left while it was queued behind a slow batch is not
// made afterwards: the engine's release of it has already run and found
// nothing, so a row made later would be a claim nobody holds, answering
// every retry "in flight" (409) for a whole lease.
func TestQueuedClaimOfAGoneCallerIsNotMade(t *testing.T) {
	l := openPGWith(t, Options{}) // claims batched, one worker
	now := dbTime(time.Now())
	rollback := holdRow(t, l, "blocker", now)
	blocked := make(chan error, 1)
	go func() {
		_, err := l.Claim(context.Background(), idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "blocker"},
			Owner: "o-blocked", Lease: time.Minute, Retention: time.Hour}, now)
		blocked <- err
	}()
	time.Sleep(200 * time.Millisecond) // the claim worker now waits on "blocker"
	claimAfterCut(t, l, "evt", "o-gone", now, 200*time.Millisecond)
	if err := l.Release(context.Background(), idempotency.Ref{Route: "r", Key: "evt"}, "o-gone"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("the engine's release of the cut claim: %v, want ErrNotOwner (nothing made yet)", err)
	}
	rollback()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	retryAcquires(t, l, "evt", now)
}

// A claim whose caller left while its statement ran is undone when the
// statement makes the row after all.
func TestRunningClaimOfAGoneCallerIsUndone(t *testing.T) {
	l := openPGWith(t, Options{})
	now := dbTime(time.Now())
	rollback := holdRow(t, l, "evt2", now)
	go func() {
		time.Sleep(400 * time.Millisecond)
		rollback() // the claim's statement goes on, and makes its row
	}()
	claimAfterCut(t, l, "evt2", "o-gone", now, 200*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // the statement completes, the worker answers
	retryAcquires(t, l, "evt2", now)
}
