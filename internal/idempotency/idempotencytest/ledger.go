package idempotencytest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Durations used by the ledger cases.
const (
	LedgerLease     = 30 * time.Second
	LedgerRetention = 720 * time.Hour
	// LedgerConcurrency is how many goroutines race in the concurrency cases.
	LedgerConcurrency = 50
)

// RunLedger runs the idempotency.Ledger conformance cases against ledgers
// made by open, which must return a fresh, migrated, empty ledger and
// register its own cleanup with t. Each case gets its own ledger and runs in
// parallel with the others, so open is called concurrently. Time is injected
// (the ledger's now parameters), so lease expiry is tested without waiting.
func RunLedger(t *testing.T, open func(t *testing.T) idempotency.Ledger) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, l idempotency.Ledger)
	}{
		{"lookup missing is ErrNotFound", ledgerLookupMissing},
		{"fresh claim is acquired as a pending row", ledgerClaimFresh},
		{"second claim sees the first in flight", ledgerClaimInFlight},
		{"commit by owner records the response byte for byte", ledgerCommitByOwner},
		{"claim after commit is done with the full entry", ledgerClaimAfterDone},
		{"commit by a non-owner on a live claim changes nothing", ledgerCommitNonOwner},
		{"a done row never changes", ledgerCommitOnDone},
		{"expired lease is taken over", ledgerTakeover},
		{"expired lease holding another event is not taken over on RefuseReuse", ledgerTakeoverRefusesReuse},
		{"stale owner cannot commit after a takeover", ledgerStaleOwnerCommit},
		{"commit over an expired lease succeeds", ledgerCommitExpiredLease},
		{"release by owner frees the key", ledgerReleaseByOwner},
		{"release by a non-owner changes nothing", ledgerReleaseNonOwner},
		{"release without a row is ErrNotOwner", ledgerReleaseMissing},
		{"release of a done row changes nothing", ledgerReleaseDone},
		{"commit without a claim records (screen path)", ledgerCommitNoRow},
		{"held commit makes claims see held", ledgerHeld},
		{"a held row is not overwritten by commit", ledgerCommitOnHeld},
		{"omitted body round-trips", ledgerBodyOmitted},
		{"header values with any octet round-trip byte for byte", ledgerHeaderOctets},
		{"no fingerprint round-trips as nil", ledgerNoFingerprint},
		{"same key on two routes is two records", ledgerRoutesAreNamespaces},
		{"concurrent claims: exactly one acquires", ledgerConcurrentClaims},
		{"concurrent commits: exactly one wins", ledgerConcurrentCommits},
		{"concurrent takeovers: exactly one takes over", ledgerConcurrentTakeovers},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

// ledgerT0 is the injected "now" of the cases: a fixed instant at
// millisecond precision, which every SQL backend stores exactly.
var ledgerT0 = time.Date(2026, 6, 12, 10, 30, 0, 123_000_000, time.UTC)

var (
	ledgerFPA = bytes.Repeat([]byte{0xa1}, 32)
	ledgerFPB = bytes.Repeat([]byte{0xb2}, 32)
)

// ledgerRef returns a ref whose key has quotes, non-ASCII text and SQL
// punctuation, so that quoting bugs show.
func ledgerRef(t testing.TB) idempotency.Ref {
	t.Helper()
	return idempotency.Ref{Route: "stripe", Key: "evt_1Nq'\"; --é✓-" + t.Name()}
}

func ledgerClaimReq(r idempotency.Ref, owner string, fp []byte) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Ref: r, Owner: owner, Fingerprint: fp, Lease: LedgerLease,
		Retention: LedgerRetention, Source: "203.0.113.7"}
}

// ledgerDone returns a done record for r with a binary body (NUL, invalid
// UTF-8) and several kept headers, created at ledgerT0.
func ledgerDone(r idempotency.Ref, fp []byte, body string) *idempotency.Record {
	return &idempotency.Record{
		Ref:         r,
		State:       idempotency.StateDone,
		Fingerprint: fp,
		Response: idempotency.Response{
			Status:  201,
			Headers: map[string]string{"Content-Type": "application/json; charset=utf-8", "X-Request-Id": "req_42, req_43"},
			Body:    append([]byte(body), 0x00, 0xff, 0xfe, '\n'),
		},
		TraceID:   "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:    "00f067aa0ba902b7",
		Source:    "203.0.113.7",
		CreatedAt: ledgerT0,
		ExpiresAt: ledgerT0.Add(LedgerRetention),
	}
}

func ledgerClaim(t testing.TB, l idempotency.Ledger, req idempotency.ClaimRequest, now time.Time) idempotency.Claim {
	t.Helper()
	c, err := l.Claim(t.Context(), req, now)
	if err != nil {
		t.Fatalf("Claim(%q, owner %q): %v", req.Key, req.Owner, err)
	}
	return c
}

func ledgerWantStatus(t testing.TB, c idempotency.Claim, want idempotency.ClaimStatus) {
	t.Helper()
	if c.Status != want {
		t.Fatalf("claim status = %v, want %v (claim %+v)", c.Status, want, c)
	}
}

func ledgerCommit(t testing.TB, l idempotency.Ledger, rec *idempotency.Record, owner string, now time.Time) {
	t.Helper()
	if err := l.Commit(t.Context(), rec, owner, now); err != nil {
		t.Fatalf("Commit(%q, owner %q): %v", rec.Key, owner, err)
	}
}

func ledgerLookup(t testing.TB, l idempotency.Ledger, r idempotency.Ref) *idempotency.Record {
	t.Helper()
	rec, err := l.Lookup(t.Context(), r)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", r.Key, err)
	}
	return rec
}

func ledgerWantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// LedgerDiff lists the fields in which got differs from want (times compared
// as instants, nil and empty bytes and maps alike); "" when equal.
func LedgerDiff(got, want *idempotency.Record) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.Ref != want.Ref {
		add("Ref", got.Ref, want.Ref)
	}
	if got.State != want.State {
		add("State", got.State, want.State)
	}
	if got.Owner != want.Owner {
		add("Owner", got.Owner, want.Owner)
	}
	if !bytes.Equal(got.Fingerprint, want.Fingerprint) {
		add("Fingerprint", got.Fingerprint, want.Fingerprint)
	}
	if got.Status != want.Status {
		add("Status", got.Status, want.Status)
	}
	if !maps.Equal(got.Headers, want.Headers) {
		add("Headers", got.Headers, want.Headers)
	}
	if !bytes.Equal(got.Body, want.Body) {
		add("Body", got.Body, want.Body)
	}
	if got.BodyOmitted != want.BodyOmitted {
		add("BodyOmitted", got.BodyOmitted, want.BodyOmitted)
	}
	if got.TraceID != want.TraceID || got.SpanID != want.SpanID {
		add("TraceID/SpanID", got.TraceID+"/"+got.SpanID, want.TraceID+"/"+want.SpanID)
	}
	if got.Source != want.Source {
		add("Source", got.Source, want.Source)
	}
	for _, tc := range []struct {
		field     string
		got, want time.Time
	}{
		{"LeaseUntil", got.LeaseUntil, want.LeaseUntil},
		{"CreatedAt", got.CreatedAt, want.CreatedAt},
		{"CompletedAt", got.CompletedAt, want.CompletedAt},
		{"ExpiresAt", got.ExpiresAt, want.ExpiresAt},
	} {
		if !tc.got.Equal(tc.want) {
			add(tc.field, tc.got, tc.want)
		}
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

func ledgerWantRecord(t testing.TB, l idempotency.Ledger, want *idempotency.Record) {
	t.Helper()
	if diff := LedgerDiff(ledgerLookup(t, l, want.Ref), want); diff != "" {
		t.Fatalf("Lookup(%q): %s", want.Key, diff)
	}
}

// ledgerPending is the row a claim by owner at now makes.
func ledgerPending(r idempotency.Ref, owner string, fp []byte, now time.Time) *idempotency.Record {
	return &idempotency.Record{Ref: r, State: idempotency.StatePending, Owner: owner, LeaseUntil: now.Add(LedgerLease),
		Fingerprint: fp, Source: "203.0.113.7", CreatedAt: now, ExpiresAt: now.Add(LedgerRetention)}
}

// ledgerCommitted is rec as Lookup returns it after a commit at now.
func ledgerCommitted(rec *idempotency.Record, now time.Time) *idempotency.Record {
	want := *rec
	want.Owner, want.LeaseUntil, want.CompletedAt = "", time.Time{}, now
	return &want
}

func ledgerLookupMissing(t *testing.T, l idempotency.Ledger) {
	_, err := l.Lookup(t.Context(), ledgerRef(t))
	ledgerWantErr(t, "Lookup of a key never seen", err, idempotency.ErrNotFound)
}

func ledgerClaimFresh(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerWantStatus(t, ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0), idempotency.Acquired)
	ledgerWantRecord(t, l, ledgerPending(r, "owner-a", ledgerFPA, ledgerT0))
}

func ledgerClaimInFlight(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPB), ledgerT0.Add(LedgerLease-time.Second))
	ledgerWantStatus(t, c, idempotency.InFlight)
	if c.Owner != "owner-a" || !bytes.Equal(c.Fingerprint, ledgerFPA) {
		t.Fatalf("in-flight claim = owner %q fingerprint %x, want owner-a %x", c.Owner, c.Fingerprint, ledgerFPA)
	}
	ledgerWantRecord(t, l, ledgerPending(r, "owner-a", ledgerFPA, ledgerT0))
}

func ledgerCommitByOwner(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	rec := ledgerDone(r, ledgerFPA, `{"ok":true}`)
	done := ledgerT0.Add(1500 * time.Millisecond)
	ledgerCommit(t, l, rec, "owner-a", done)
	ledgerWantRecord(t, l, ledgerCommitted(rec, done))
}

func ledgerClaimAfterDone(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	rec := ledgerDone(r, ledgerFPA, `{"paid":1999}`)
	ledgerCommit(t, l, rec, "owner-a", ledgerT0.Add(time.Second))
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPB), ledgerT0.Add(2*time.Second))
	ledgerWantStatus(t, c, idempotency.Done)
	if !bytes.Equal(c.Fingerprint, ledgerFPA) {
		t.Fatalf("done claim fingerprint = %x, want %x", c.Fingerprint, ledgerFPA)
	}
	e := c.Entry
	if e == nil {
		t.Fatal("done claim without entry")
	}
	if e.Status != rec.Status || !maps.Equal(e.Headers, rec.Headers) || !bytes.Equal(e.Body, rec.Body) ||
		!e.BodyCached || e.BodyOmitted || !bytes.Equal(e.Fingerprint, ledgerFPA) || e.TraceID != rec.TraceID || e.SpanID != rec.SpanID {
		t.Fatalf("done entry = %+v, want the committed response with BodyCached, fingerprint and trace ids", *e)
	}
}

func ledgerCommitNonOwner(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	err := l.Commit(t.Context(), ledgerDone(r, ledgerFPB, "intruder"), "owner-b", ledgerT0.Add(time.Second))
	ledgerWantErr(t, "Commit by a non-owner of a live claim", err, idempotency.ErrNotOwner)
	ledgerWantRecord(t, l, ledgerPending(r, "owner-a", ledgerFPA, ledgerT0))
}

func ledgerCommitOnDone(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	rec := ledgerDone(r, ledgerFPA, "first")
	ledgerCommit(t, l, rec, "owner-a", ledgerT0)
	err := l.Commit(t.Context(), ledgerDone(r, ledgerFPA, "second"), "owner-a", ledgerT0.Add(time.Second))
	ledgerWantErr(t, "second Commit by the same owner", err, idempotency.ErrNotOwner)
	err = l.Commit(t.Context(), ledgerDone(r, ledgerFPB, "third"), "owner-b", ledgerT0.Add(LedgerRetention))
	ledgerWantErr(t, "Commit by another owner long after", err, idempotency.ErrNotOwner)
	ledgerWantRecord(t, l, ledgerCommitted(rec, ledgerT0))
}

func ledgerTakeover(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	later := ledgerT0.Add(LedgerLease + time.Second)
	ledgerWantStatus(t, ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPA), later), idempotency.TakenOver)
	got := ledgerLookup(t, l, r)
	if got.State != idempotency.StatePending || got.Owner != "owner-b" || !got.LeaseUntil.Equal(later.Add(LedgerLease)) {
		t.Fatalf("after takeover: state %q owner %q lease until %v, want pending owner-b %v",
			got.State, got.Owner, got.LeaseUntil, later.Add(LedgerLease))
	}
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-c", ledgerFPA), later.Add(time.Second))
	ledgerWantStatus(t, c, idempotency.InFlight)
	if c.Owner != "owner-b" {
		t.Fatalf("claim after takeover sees owner %q, want owner-b", c.Owner)
	}
}

func ledgerTakeoverRefusesReuse(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	later := ledgerT0.Add(LedgerLease + time.Second)
	reuse := ledgerClaimReq(r, "owner-b", ledgerFPB)
	reuse.RefuseReuse = true
	c := ledgerClaim(t, l, reuse, later)
	ledgerWantStatus(t, c, idempotency.InFlight)
	if c.Owner != "owner-a" || !bytes.Equal(c.Fingerprint, ledgerFPA) {
		t.Fatalf("refused takeover reports owner %q fingerprint %x, want owner-a's %x", c.Owner, c.Fingerprint, ledgerFPA)
	}
	if got := ledgerLookup(t, l, r); got.Owner != "owner-a" || !bytes.Equal(got.Fingerprint, ledgerFPA) {
		t.Fatalf("after a refused takeover: owner %q fingerprint %x, want owner-a's row unchanged", got.Owner, got.Fingerprint)
	}
	// A digest of the route's earlier fingerprint settings is the event's.
	earlier := ledgerClaimReq(r, "owner-c", ledgerFPB)
	earlier.RefuseReuse = true
	earlier.Also = func() [][]byte { return [][]byte{ledgerFPA} }
	ledgerWantStatus(t, ledgerClaim(t, l, earlier, later), idempotency.TakenOver)
}

func ledgerStaleOwnerCommit(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	later := ledgerT0.Add(LedgerLease + time.Second)
	ledgerWantStatus(t, ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPA), later), idempotency.TakenOver)
	err := l.Commit(t.Context(), ledgerDone(r, ledgerFPA, "stale"), "owner-a", later.Add(time.Second))
	ledgerWantErr(t, "Commit by the owner whose claim was taken over", err, idempotency.ErrNotOwner)
	rec := ledgerDone(r, ledgerFPA, "fresh")
	ledgerCommit(t, l, rec, "owner-b", later.Add(2*time.Second))
	ledgerWantRecord(t, l, ledgerCommitted(rec, later.Add(2*time.Second)))
}

func ledgerCommitExpiredLease(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	rec := ledgerDone(r, ledgerFPA, "via screen")
	now := ledgerT0.Add(LedgerLease + time.Second)
	ledgerCommit(t, l, rec, "owner-b", now)
	ledgerWantRecord(t, l, ledgerCommitted(rec, now))
}

func ledgerReleaseByOwner(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	if err := l.Release(t.Context(), r, "owner-a"); err != nil {
		t.Fatalf("Release by owner: %v", err)
	}
	_, err := l.Lookup(t.Context(), r)
	ledgerWantErr(t, "Lookup after release", err, idempotency.ErrNotFound)
	later := ledgerT0.Add(time.Second)
	ledgerWantStatus(t, ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPB), later), idempotency.Acquired)
	ledgerWantRecord(t, l, ledgerPending(r, "owner-b", ledgerFPB, later))
}

func ledgerReleaseNonOwner(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	ledgerWantErr(t, "Release by a non-owner", l.Release(t.Context(), r, "owner-b"), idempotency.ErrNotOwner)
	ledgerWantRecord(t, l, ledgerPending(r, "owner-a", ledgerFPA, ledgerT0))
}

func ledgerReleaseMissing(t *testing.T, l idempotency.Ledger) {
	ledgerWantErr(t, "Release without a row", l.Release(t.Context(), ledgerRef(t), "owner-a"), idempotency.ErrNotOwner)
}

func ledgerReleaseDone(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	rec := ledgerDone(r, ledgerFPA, "kept")
	ledgerCommit(t, l, rec, "owner-a", ledgerT0)
	ledgerWantErr(t, "Release of a done row", l.Release(t.Context(), r, "owner-a"), idempotency.ErrNotOwner)
	ledgerWantRecord(t, l, ledgerCommitted(rec, ledgerT0))
}

func ledgerCommitNoRow(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	rec := ledgerDone(r, ledgerFPA, "screen claimed")
	ledgerCommit(t, l, rec, "screen-owner", ledgerT0.Add(time.Second))
	ledgerWantRecord(t, l, ledgerCommitted(rec, ledgerT0.Add(time.Second)))
}

func ledgerHeld(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", ledgerFPA), ledgerT0)
	held := &idempotency.Record{Ref: r, State: idempotency.StateHeld, Fingerprint: ledgerFPA, Source: "203.0.113.7",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		CreatedAt: ledgerT0, ExpiresAt: ledgerT0.Add(LedgerRetention)}
	ledgerCommit(t, l, held, "owner-a", ledgerT0.Add(10*time.Second))
	ledgerWantRecord(t, l, ledgerCommitted(held, ledgerT0.Add(10*time.Second)))
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPB), ledgerT0.Add(LedgerRetention/2))
	ledgerWantStatus(t, c, idempotency.Held)
	if !bytes.Equal(c.Fingerprint, ledgerFPA) {
		t.Fatalf("held claim fingerprint = %x, want %x", c.Fingerprint, ledgerFPA)
	}
}

func ledgerCommitOnHeld(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	held := &idempotency.Record{Ref: r, State: idempotency.StateHeld, Fingerprint: ledgerFPA,
		CreatedAt: ledgerT0, ExpiresAt: ledgerT0.Add(LedgerRetention)}
	ledgerCommit(t, l, held, "owner-a", ledgerT0)
	err := l.Commit(t.Context(), ledgerDone(r, ledgerFPA, "late answer"), "owner-a", ledgerT0.Add(time.Second))
	ledgerWantErr(t, "Commit over a held row", err, idempotency.ErrNotOwner)
	ledgerWantRecord(t, l, ledgerCommitted(held, ledgerT0))
}

func ledgerBodyOmitted(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	rec := ledgerDone(r, ledgerFPA, "")
	rec.Body, rec.BodyOmitted = nil, true
	ledgerCommit(t, l, rec, "owner-a", ledgerT0)
	ledgerWantRecord(t, l, ledgerCommitted(rec, ledgerT0))
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPA), ledgerT0)
	ledgerWantStatus(t, c, idempotency.Done)
	if c.Entry == nil || !c.Entry.BodyOmitted || len(c.Entry.Body) != 0 || c.Entry.Status != rec.Status {
		t.Fatalf("done entry = %+v, want status %d, BodyOmitted and no body", c.Entry, rec.Status)
	}
}

// A header value may carry octets that are not UTF-8 (RFC 9110 obs-text);
// a replay from the ledger must still be byte for byte.
func ledgerHeaderOctets(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	rec := ledgerDone(r, ledgerFPA, "x")
	rec.Headers["Content-Disposition"] = "attachment; filename=caf\xe9.txt"
	rec.Headers["X-Raw"] = "\x80\xff tab\there"
	ledgerCommit(t, l, rec, "owner-a", ledgerT0)
	ledgerWantRecord(t, l, ledgerCommitted(rec, ledgerT0))
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", ledgerFPA), ledgerT0)
	ledgerWantStatus(t, c, idempotency.Done)
	if got := c.Entry.Headers["Content-Disposition"]; got != rec.Headers["Content-Disposition"] {
		t.Fatalf("claim's entry header %q, want %q", got, rec.Headers["Content-Disposition"])
	}
}

func ledgerNoFingerprint(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-a", nil), ledgerT0)
	c := ledgerClaim(t, l, ledgerClaimReq(r, "owner-b", nil), ledgerT0)
	ledgerWantStatus(t, c, idempotency.InFlight)
	if c.Fingerprint != nil {
		t.Fatalf("in-flight fingerprint = %x, want nil", c.Fingerprint)
	}
	rec := ledgerDone(r, nil, "no fingerprint")
	rec.Headers = nil
	ledgerCommit(t, l, rec, "owner-a", ledgerT0)
	got := ledgerLookup(t, l, r)
	if got.Fingerprint != nil || len(got.Headers) != 0 {
		t.Fatalf("Lookup: fingerprint %x headers %v, want nil and none", got.Fingerprint, got.Headers)
	}
}

func ledgerRoutesAreNamespaces(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerCommit(t, l, ledgerDone(r, ledgerFPA, "route one"), "owner-a", ledgerT0)
	other := idempotency.Ref{Route: "github", Key: r.Key}
	_, err := l.Lookup(t.Context(), other)
	ledgerWantErr(t, "Lookup of the same key on another route", err, idempotency.ErrNotFound)
	ledgerWantStatus(t, ledgerClaim(t, l, ledgerClaimReq(other, "owner-b", ledgerFPB), ledgerT0), idempotency.Acquired)
}

// ledgerRace runs f(i) on LedgerConcurrency goroutines released together.
func ledgerRace(f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range LedgerConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// ledgerClaimRace has every goroutine claim req's key as owner-<i> at now,
// and checks that exactly one got status won and all others see it in
// flight. It returns the winner.
func ledgerClaimRace(t *testing.T, l idempotency.Ledger, r idempotency.Ref, now time.Time, won idempotency.ClaimStatus) string {
	t.Helper()
	claims := make([]idempotency.Claim, LedgerConcurrency)
	errs := make([]error, LedgerConcurrency)
	ledgerRace(func(i int) {
		claims[i], errs[i] = l.Claim(t.Context(), ledgerClaimReq(r, fmt.Sprintf("owner-%d", i), ledgerFPA), now)
	})
	winner := ""
	for i, c := range claims {
		if errs[i] != nil {
			t.Fatalf("claim by owner-%d: %v", i, errs[i])
		}
		if c.Status == won {
			if winner != "" {
				t.Fatalf("both %s and owner-%d got %v", winner, i, won)
			}
			winner = fmt.Sprintf("owner-%d", i)
		}
	}
	if winner == "" {
		t.Fatalf("no claim got %v", won)
	}
	for i, c := range claims {
		if o := fmt.Sprintf("owner-%d", i); o != winner && (c.Status != idempotency.InFlight || c.Owner != winner) {
			t.Fatalf("claim by %s = %v owner %q, want in flight owned by %s", o, c.Status, c.Owner, winner)
		}
	}
	if got := ledgerLookup(t, l, r); got.Owner != winner {
		t.Fatalf("row owner = %q, want the winner %s", got.Owner, winner)
	}
	return winner
}

func ledgerConcurrentClaims(t *testing.T, l idempotency.Ledger) {
	ledgerClaimRace(t, l, ledgerRef(t), ledgerT0, idempotency.Acquired)
}

func ledgerConcurrentTakeovers(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	ledgerClaim(t, l, ledgerClaimReq(r, "owner-dead", ledgerFPA), ledgerT0)
	ledgerClaimRace(t, l, r, ledgerT0.Add(LedgerLease+time.Second), idempotency.TakenOver)
}

func ledgerConcurrentCommits(t *testing.T, l idempotency.Ledger) {
	r := ledgerRef(t)
	errs := make([]error, LedgerConcurrency)
	ledgerRace(func(i int) {
		errs[i] = l.Commit(t.Context(), ledgerDone(r, ledgerFPA, fmt.Sprintf("answer %d", i)), fmt.Sprintf("owner-%d", i), ledgerT0)
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("both owner-%d and owner-%d committed", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, idempotency.ErrNotOwner):
			t.Fatalf("commit by owner-%d: %v, want nil or ErrNotOwner", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no commit succeeded")
	}
	ledgerWantRecord(t, l, ledgerCommitted(ledgerDone(r, ledgerFPA, fmt.Sprintf("answer %d", winner)), ledgerT0))
}
