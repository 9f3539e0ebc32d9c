package sqlledger_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// onEachDriver runs fn in parallel subtests, on a migrated ledger of each
// driver.
func onEachDriver(t *testing.T, fn func(t *testing.T, l *sqlledger.Ledger)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, openLedger(t, d.options(t)))
		})
	}
}

func storedRequest() *idempotency.Request {
	return &idempotency.Request{
		Method: http.MethodPost, Path: "/webhooks/stripe?mode=live",
		Headers: http.Header{
			"Content-Type":     {"application/json"},
			"Stripe-Signature": {"t=1,v1=abc"},
			"X-Multi":          {"a", "b"},
			"Authorization":    {"Bearer secret"},
			"Cookie":           {"session=1"},
			"Connection":       {"close"},
		},
		Body: []byte(`{"id":"evt_1"}`),
	}
}

// wantRequest is storedRequest as the ledger keeps it.
func wantRequest() *idempotency.Request {
	r := storedRequest()
	r.Headers = http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {"t=1,v1=abc"}, "X-Multi": {"a", "b"}}
	return r
}

func attempt(r idempotency.Ref, n, status int, errText string) idempotency.Attempt {
	return idempotency.Attempt{Ref: r, Attempt: n, StartedAt: t0.Add(time.Duration(n) * time.Second),
		Duration: 1500 * time.Millisecond, Status: status, Error: errText, Replica: "replica-a"}
}

func mustAttempts(tb testing.TB, l *sqlledger.Ledger, r idempotency.Ref) []idempotency.Attempt {
	tb.Helper()
	got, err := l.Attempts(context.Background(), r)
	if err != nil {
		tb.Fatalf("Attempts(%q): %v", r.Key, err)
	}
	return got
}

func TestStoredRequestRoundTrip(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		r := ref("evt_req")
		if err := l.StoreRequest(ctx, r, storedRequest()); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("StoreRequest without a record: err = %v, want ErrNotFound", err)
		}
		mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
		if got, err := l.Request(ctx, r); err != nil || got != nil {
			t.Fatalf("Request before one is stored = %v, %v; want nil, nil", got, err)
		}
		if err := l.StoreRequest(ctx, r, storedRequest()); err != nil {
			t.Fatalf("StoreRequest: %v", err)
		}
		got, err := l.Request(ctx, r)
		if err != nil {
			t.Fatalf("Request: %v", err)
		}
		if !reflect.DeepEqual(got, wantRequest()) {
			t.Errorf("Request = %+v, want %+v", got, wantRequest())
		}
		if _, err := l.Request(ctx, ref("nobody")); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("Request of no record: err = %v, want ErrNotFound", err)
		}
	})
}

// Header values that are not UTF-8 come back byte for byte.
func TestStoredRequestKeepsBinaryHeaders(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		r := ref("evt_bin")
		mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
		req := &idempotency.Request{Method: "POST", Path: "/", Headers: http.Header{"X-Latin": {"caf\xe9"}}}
		if err := l.StoreRequest(t.Context(), r, req); err != nil {
			t.Fatalf("StoreRequest: %v", err)
		}
		got, err := l.Request(t.Context(), r)
		if err != nil {
			t.Fatalf("Request: %v", err)
		}
		if v := got.Headers["X-Latin"]; len(v) != 1 || v[0] != "caf\xe9" {
			t.Errorf("X-Latin = %q, want %q", v, "caf\xe9")
		}
	})
}

func TestAttemptsAreNumberedAndListed(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		r := ref("evt_att")
		if got := mustAttempts(t, l, r); len(got) != 0 {
			t.Fatalf("Attempts of a fresh key = %v, want none", got)
		}
		first := attempt(r, 0, 0, "upstream timeout")
		second := attempt(r, 0, 503, "")
		for _, a := range []idempotency.Attempt{first, second} {
			if err := l.AddAttempt(ctx, a); err != nil {
				t.Fatalf("AddAttempt: %v", err)
			}
		}
		if err := l.AddAttempt(ctx, attempt(r, 2, 200, "")); err == nil {
			t.Fatal("AddAttempt with a number taken: no error")
		}
		if err := l.AddAttempt(ctx, attempt(r, 3, 200, "")); err != nil {
			t.Fatalf("AddAttempt(3): %v", err)
		}
		got := mustAttempts(t, l, r)
		first.Attempt, second.Attempt = 1, 2
		want := []idempotency.Attempt{first, second, attempt(r, 3, 200, "")}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Attempts =\n%+v\nwant\n%+v", got, want)
		}
		if other := mustAttempts(t, l, ref("evt_other")); len(other) != 0 {
			t.Errorf("another key's attempts = %v, want none", other)
		}
	})
}

// Concurrent writers numbering the same record all get a number of their
// own.
func TestConcurrentAttemptsGetDistinctNumbers(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		r := ref("evt_race")
		const n = 16
		errs := make(chan error, n)
		for range n {
			go func() { errs <- l.AddAttempt(context.Background(), attempt(r, 0, 502, "")) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("AddAttempt: %v", err)
			}
		}
		got := mustAttempts(t, l, r)
		for i, a := range got {
			if a.Attempt != i+1 {
				t.Fatalf("attempt numbers = %v, want 1..%d", got, n)
			}
		}
		if len(got) != n {
			t.Fatalf("%d attempts recorded, want %d", len(got), n)
		}
	})
}

// AddAttemptTx writes in the caller's transaction: rolled back, nothing is
// recorded; committed, the attempt is there.
func TestAddAttemptInCallersTransaction(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		r := ref("evt_tx")
		mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
		db, err := l.Writer()
		if err != nil {
			t.Fatalf("Writer: %v", err)
		}
		for _, commit := range []bool{false, true} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("BeginTx: %v", err)
			}
			if err := l.AddAttemptTx(ctx, tx, attempt(r, 0, 200, "")); err != nil {
				t.Fatalf("AddAttemptTx: %v", err)
			}
			if err := l.StoreRequestTx(ctx, tx, r, storedRequest()); err != nil {
				t.Fatalf("StoreRequestTx: %v", err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatalf("end transaction: %v", err)
			}
			got := mustAttempts(t, l, r)
			req, err := l.Request(ctx, r)
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if commit != (len(got) == 1) || commit != (req != nil) {
				t.Fatalf("committed %v: attempts %v, request %v", commit, got, req)
			}
		}
	})
}

// A record's attempts go with it: operator delete, held release, sweep.
// Attempts whose record never came stay until their own expiry.
func TestAttemptsAreDeletedWithTheirRecord(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		deleted, held, expired, kept := ref("deleted"), ref("held"), ref("expired"), ref("kept")
		sweepAt := t0.Add(2 * time.Hour)
		mustCommit(t, l, doneRecord(deleted, t0, t0.Add(720*time.Hour)), "o", t0)
		mustCommit(t, l, heldRecord(held, t0), "o", t0)
		mustCommit(t, l, doneRecord(expired, t0, t0.Add(time.Hour)), "o", t0)
		mustCommit(t, l, doneRecord(kept, t0, t0.Add(720*time.Hour)), "o", t0)
		orphanDue, orphanLive := ref("released-old"), ref("released-new")
		for _, r := range []idempotency.Ref{deleted, held, expired, kept, orphanDue, orphanLive} {
			a := attempt(r, 0, 502, "")
			switch r {
			case orphanDue:
				a.ExpiresAt = t0.Add(time.Hour)
			case orphanLive:
				a.ExpiresAt = sweepAt.Add(time.Hour)
			}
			if err := l.AddAttempt(ctx, a); err != nil {
				t.Fatalf("AddAttempt(%q): %v", r.Key, err)
			}
		}
		if err := l.Delete(ctx, deleted); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if err := l.Resolve(ctx, held, nil); err != nil {
			t.Fatalf("Resolve release: %v", err)
		}
		if n, err := l.SweepAll(ctx, sweepAt, 10); err != nil || n != 1 {
			t.Fatalf("SweepAll = %d, %v; want 1 record", n, err)
		}
		for _, r := range []idempotency.Ref{deleted, held, expired, orphanDue} {
			if got := mustAttempts(t, l, r); len(got) != 0 {
				t.Errorf("%q: attempts %v left behind", r.Key, got)
			}
		}
		for _, r := range []idempotency.Ref{kept, orphanLive} {
			if got := mustAttempts(t, l, r); len(got) != 1 {
				t.Errorf("%q: %d attempts, want 1 kept", r.Key, len(got))
			}
		}
	})
}

// A commit writes the request and the forward's attempt with the record,
// lone or in a batch with others; a commit that loses to a settled record
// writes neither.
func TestCommitStoresRequestAndAttempt(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		const n = 24
		errs := make(chan error, n)
		for i := range n {
			go func() {
				r := ref(fmt.Sprintf("evt_%d", i))
				rec := doneRecord(r, t0, t0.Add(time.Hour))
				rec.Request = storedRequest()
				a := attempt(r, 0, 200, "")
				rec.Attempt = &a
				errs <- l.Commit(context.Background(), rec, "o", t0)
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("Commit: %v", err)
			}
		}
		for i := range n {
			r := ref(fmt.Sprintf("evt_%d", i))
			got, err := l.Request(t.Context(), r)
			if err != nil || !reflect.DeepEqual(got, wantRequest()) {
				t.Fatalf("Request(%q) = %+v, %v; want %+v", r.Key, got, err, wantRequest())
			}
			want := attempt(r, 0, 200, "")
			want.Attempt = 1
			if atts := mustAttempts(t, l, r); len(atts) != 1 || atts[0] != want {
				t.Fatalf("Attempts(%q) = %+v, want [%+v]", r.Key, atts, want)
			}
		}
		r := ref("evt_0")
		again := doneRecord(r, t0, t0.Add(time.Hour))
		a := attempt(r, 0, 201, "")
		again.Attempt = &a
		if err := l.Commit(t.Context(), again, "other", t0); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("second Commit: err = %v, want ErrNotOwner", err)
		}
		if atts := mustAttempts(t, l, r); len(atts) != 1 {
			t.Errorf("after a lost commit: %d attempts, want 1", len(atts))
		}
	})
}

// Recommit over the caller's pending row writes the attempt too.
func TestRecommitClaimedStoresAttempt(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		r := ref("evt_re")
		mustClaim(t, l, claimReq(r, "o", time.Hour), t0, idempotency.Acquired)
		rec := doneRecord(r, t0, t0.Add(time.Hour))
		rec.Request = storedRequest()
		a := attempt(r, 0, 200, "")
		rec.Attempt = &a
		if err := l.Recommit(t.Context(), rec, "o", t0, true); err != nil {
			t.Fatalf("Recommit: %v", err)
		}
		if got, err := l.Request(t.Context(), r); err != nil || got == nil {
			t.Errorf("Request = %v, %v; want the stored request", got, err)
		}
		if atts := mustAttempts(t, l, r); len(atts) != 1 || atts[0].Attempt != 1 {
			t.Errorf("Attempts = %+v, want attempt 1", atts)
		}
	})
}

// A settlement tried again after the ledger was unavailable (Again) may
// have been stored the first time, its reply lost: its attempt is then
// recorded once. The next attempt, tried again too, is recorded.
func TestSettlementTriedAgainIsStoredOnce(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		r := ref("evt_again")
		mustCommit(t, l, doneRecord(r, t0, t0.Add(time.Hour)), "o", t0)
		settle := func(a idempotency.Attempt, again bool) {
			t.Helper()
			s := &sqlledger.Settlement{Ref: r, State: idempotency.StateDone, Attempt: a, Again: again,
				Response: idempotency.Response{Status: 200, Body: []byte(`{"n":1}`)}}
			if _, err := l.Settle(t.Context(), s, a.StartedAt.Add(a.Duration), nil); err != nil {
				t.Fatalf("Settle: %v", err)
			}
		}
		first := attempt(r, 0, 200, "")
		settle(first, false)
		settle(first, true)
		next := first
		next.StartedAt = first.StartedAt.Add(time.Minute)
		settle(next, true)
		got := mustAttempts(t, l, r)
		if len(got) != 2 || !got[0].StartedAt.Equal(first.StartedAt) || !got[1].StartedAt.Equal(next.StartedAt) {
			t.Fatalf("attempts = %+v, want the first and the next once each", got)
		}
	})
}
