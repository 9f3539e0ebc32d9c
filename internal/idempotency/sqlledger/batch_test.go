package sqlledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Group commit must never let a provider be answered before its record is
// durable: when Commit returns nil, another connection (here another
// Ledger on the same database) already sees the row.
func TestGroupCommitIsDurableWhenCommitReturns(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			o := d.options(t)
			w := openLedger(t, o)
			r := openLedger(t, sqlledger.Options{Driver: o.Driver, DSN: o.DSN, CommitBatch: 1})
			now := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rf := ref(fmt.Sprintf("gc-%d", i))
					if err := w.Commit(context.Background(), doneRecord(rf, now, now.Add(time.Hour)), "owner", now); err != nil {
						errs <- fmt.Errorf("commit %d: %w", i, err)
						return
					}
					rec, err := r.Lookup(context.Background(), rf)
					if err != nil || rec.State != idempotency.StateDone {
						errs <- fmt.Errorf("row %d not visible after Commit returned: %v", i, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// Commits racing on one key keep their own results even when they share a
// transaction: exactly one wins, the rest get ErrNotOwner.
func TestGroupCommitKeepsPerRowResults(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			l := openLedger(t, d.options(t))
			now := time.Now()
			for k := range 10 {
				rf := ref(fmt.Sprintf("race-%d", k))
				var wg sync.WaitGroup
				var mu sync.Mutex
				won, lost := 0, 0
				for i := range 20 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rec := doneRecord(rf, now, now.Add(time.Hour))
						rec.Body = []byte(fmt.Sprintf("answer %d", i))
						err := l.Commit(context.Background(), rec, fmt.Sprintf("owner-%d", i), now)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							won++
						case errors.Is(err, idempotency.ErrNotOwner):
							lost++
						default:
							t.Errorf("commit: %v", err)
						}
					}()
				}
				wg.Wait()
				if won != 1 || lost != 19 {
					t.Fatalf("key %d: %d commits won, %d lost; want 1 and 19", k, won, lost)
				}
			}
		})
	}
}

// A row the database refuses (PostgreSQL rejects NUL in text) fails alone;
// the deliveries batched with it still commit.
func TestGroupCommitIsolatesARefusedRow(t *testing.T) {
	l := openLedger(t, postgresOptions(t))
	now := time.Now()
	var wg sync.WaitGroup
	results := make([]error, 40)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := doneRecord(ref(fmt.Sprintf("iso-%d", i)), now, now.Add(time.Hour))
			if i%10 == 5 {
				rec.Source = "bad\x00source"
			}
			results[i] = l.Commit(context.Background(), rec, "o", now)
		}()
	}
	wg.Wait()
	for i, err := range results {
		if i%10 == 5 {
			if err == nil {
				t.Errorf("row %d with a NUL byte was accepted", i)
			}
			continue
		}
		if err != nil {
			t.Errorf("row %d failed with its batch: %v", i, err)
		}
	}
}

// Batched ledger claims (PostgreSQL: one statement per batch) are durable
// when Claim returns: another connection already sees the pending row,
// with its owner, so a replica claiming the same key is refused.
func TestBatchedClaimIsDurableWhenClaimReturns(t *testing.T) {
	o := postgresOptions(t)
	w := openLedger(t, o)
	r := openLedger(t, sqlledger.Options{Driver: o.Driver, DSN: o.DSN, CommitBatch: 1, LookupBatch: 1})
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rf := ref(fmt.Sprintf("bc-%d", i))
			owner := fmt.Sprintf("owner-%d", i)
			c, err := w.Claim(context.Background(), claimReq(rf, owner, time.Hour), now)
			if err != nil || c.Status != idempotency.Acquired {
				errs <- fmt.Errorf("claim %d: %v %v", i, c.Status, err)
				return
			}
			rec, err := r.Lookup(context.Background(), rf)
			if err != nil || rec.State != idempotency.StatePending || rec.Owner != owner {
				errs <- fmt.Errorf("row %d not visible after Claim returned: %+v %v", i, rec, err)
				return
			}
			if c, err := r.Claim(context.Background(), claimReq(rf, "intruder", time.Hour), now); err != nil || c.Status != idempotency.InFlight || c.Owner != owner {
				errs <- fmt.Errorf("second claim of %d: %v owner %q %v, want in flight for %s", i, c.Status, c.Owner, err, owner)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Claims racing on one key, batched together or not: exactly one acquires
// it, the others see it in flight with the winner as owner.
func TestBatchedClaimsRacingOnOneKey(t *testing.T) {
	l := openLedger(t, postgresOptions(t))
	now := time.Now()
	for k := range 10 {
		rf := ref(fmt.Sprintf("race-claim-%d", k))
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, owners := 0, map[string]bool{}
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("owner-%d", i)
				c, err := l.Claim(context.Background(), claimReq(rf, owner, time.Hour), now)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("claim: %v", err)
				case c.Status == idempotency.Acquired:
					won++
					owners[owner] = true
				case c.Status == idempotency.InFlight:
					owners[c.Owner] = true
				default:
					t.Errorf("claim: %v", c.Status)
				}
			}()
		}
		wg.Wait()
		if won != 1 || len(owners) != 1 {
			t.Fatalf("key %d: %d claims acquired, owners seen %v; want 1 and one owner", k, won, owners)
		}
	}
}

// Batched lookups see every commit that returned before they were made,
// from any connection.
func TestBatchedLookupSeesEveryCommitThatReturned(t *testing.T) {
	o := postgresOptions(t)
	w := openLedger(t, sqlledger.Options{Driver: o.Driver, DSN: o.DSN, CommitBatch: 1})
	r := openLedger(t, o) // lookups batched (the default)
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rf := ref(fmt.Sprintf("bl-%d", i))
			if _, err := r.Lookup(context.Background(), rf); !errors.Is(err, idempotency.ErrNotFound) {
				errs <- fmt.Errorf("lookup %d before its commit: %v", i, err)
				return
			}
			if err := w.Commit(context.Background(), doneRecord(rf, now, now.Add(time.Hour)), "owner", now); err != nil {
				errs <- fmt.Errorf("commit %d: %w", i, err)
				return
			}
			if rec, err := r.Lookup(context.Background(), rf); err != nil || rec.Key != rf.Key || rec.State != idempotency.StateDone {
				errs <- fmt.Errorf("batched lookup %d after its commit: %+v %v", i, rec, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
