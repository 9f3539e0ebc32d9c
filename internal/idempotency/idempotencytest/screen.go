// Package idempotencytest holds the conformance suites that every driver of
// idempotency.Screen and idempotency.Ledger must pass, so that the state
// machine can rely on the contract written in package idempotency rather
// than on one driver's habits.
package idempotencytest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// ScreenMaxCachedBody is the max_cached_body that the factory given to
// RunScreen must configure its screens with.
const ScreenMaxCachedBody = 1024

const (
	screenLease = 30 * time.Second
	screenTTL   = time.Hour
	// screenShortLease is the lease of the expiry cases: long enough for a
	// claim round trip, short enough to keep the suite quick.
	screenShortLease = 150 * time.Millisecond
	// screenPrompt bounds how long a Wait may take to notice a change made
	// by another goroutine: a notified driver answers in milliseconds, a
	// polling one within its longest poll interval.
	screenPrompt = 2 * time.Second
	// screenQuiet is how long a Wait must stay blocked while nothing it
	// waits for happens.
	screenQuiet = 250 * time.Millisecond
)

// RunScreen runs the Screen conformance cases, each against a screen of its
// own from open. open must return a screen configured with MaxCachedBody =
// ScreenMaxCachedBody that holds no entry for the refs the cases use (a
// fresh screen, or a shared store under a key prefix of the test's own),
// and close it in t.Cleanup.
func RunScreen(t *testing.T, open func(t *testing.T) idempotency.Screen) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s idempotency.Screen)
	}{
		{"fresh claim is acquired", screenFreshClaim},
		{"second claim reports the holder", screenSecondClaim},
		{"second claim without fingerprint", screenSecondClaimNoFingerprint},
		{"complete then claim replays the exact entry", screenCompleteReplays},
		{"body of max cached body is kept", screenBodyAtLimit},
		{"body over max cached body keeps status and headers", screenBodyOverLimit},
		{"unrecorded entry keeps a body over max cached body", screenUnrecordedKeepsBody},
		{"omitted body round-trips", screenOmittedBody},
		{"empty response round-trips", screenEmptyResponse},
		{"entries are copies", screenEntriesAreCopies},
		{"release by owner frees the key", screenReleaseByOwner},
		{"release by another owner is refused", screenReleaseByOther},
		{"release of a done key is refused", screenReleaseDone},
		{"release of an absent key is refused", screenReleaseAbsent},
		{"complete by a stale owner onto an empty key records it", screenCompleteStaleEmpty},
		{"complete over another owner's claim records it", screenCompleteOverOther},
		{"complete when done keeps the first", screenCompleteKeepsFirst},
		{"complete after forget is refused until a new claim", screenCompleteAfterForget},
		{"a refill never ends another owner's claim", screenRefillKeepsOthersClaim},
		{"forget frees an in-flight key", screenForgetInFlight},
		{"forget frees a done key", screenForgetDone},
		{"forget of an absent key succeeds", screenForgetAbsent},
		{"forget done drops a done entry and nothing else", screenForgetDoneOnly},
		{"lease expiry is a takeover", screenLeaseTakeover},
		{"same key on two routes is two records", screenRoutesIndependent},
		{"odd keys are exact", screenOddKeys},
		{"wait returns after complete", screenWaitComplete},
		{"wait returns after release", screenWaitRelease},
		{"wait returns after forget", screenWaitForget},
		{"wait returns when the lease ends", screenWaitLease},
		{"wait returns at once when not held", screenWaitNotHeld},
		{"wait returns when ctx expires", screenWaitCtx},
		{"wait ignores other keys", screenWaitOtherKeys},
		{"wait wakes every waiter", screenWaitMany},
		{"concurrent claims: exactly one acquires", screenConcurrentClaims},
		{"peek reports what holds a key and claims nothing", screenPeek},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, open(t))
		})
	}
}

var screenRef = idempotency.Ref{Route: "stripe", Key: "evt_1"}

func screenFingerprint(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// screenEntry is a done entry with the awkward bytes a replay must keep.
func screenEntry() *idempotency.Entry {
	return &idempotency.Entry{
		Response: idempotency.Response{
			Status: 201,
			Headers: map[string]string{
				"Content-Type": "application/json; charset=utf-8",
				"X-Multi":      "a, b",
				"X-Empty":      "",
			},
			Body: []byte("{\"ok\":true}\x00\xff\xfe\r\n\x00"),
		},
		BodyCached:  true,
		Fingerprint: screenFingerprint("body"),
		TraceID:     "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:      "00f067aa0ba902b7",
	}
}

func screenClaim(tb testing.TB, s idempotency.Screen, ref idempotency.Ref, owner string, fp []byte, lease time.Duration) idempotency.Claim {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: owner, Fingerprint: fp, Lease: lease})
	if err != nil {
		tb.Fatalf("Claim(%q, %q): %v", ref.Key, owner, err)
	}
	return c
}

func screenWantStatus(tb testing.TB, c idempotency.Claim, want idempotency.ClaimStatus) {
	tb.Helper()
	if c.Status != want {
		tb.Fatalf("claim status = %v (owner %q), want %v", c.Status, c.Owner, want)
	}
}

func screenComplete(tb testing.TB, s idempotency.Screen, ref idempotency.Ref, owner string, e *idempotency.Entry) {
	tb.Helper()
	if err := s.Complete(context.Background(), ref, owner, e, screenTTL); err != nil {
		tb.Fatalf("Complete(%q, %q): %v", ref.Key, owner, err)
	}
}

// screenWantEntry compares entries field by field; nil and empty maps and
// slices are the same.
func screenWantEntry(tb testing.TB, got, want *idempotency.Entry) {
	tb.Helper()
	if got == nil {
		tb.Fatalf("entry = nil, want %+v", want)
	}
	if got.Status != want.Status {
		tb.Errorf("status = %d, want %d", got.Status, want.Status)
	}
	if len(got.Headers) != len(want.Headers) || !maps.Equal(got.Headers, want.Headers) {
		tb.Errorf("headers = %q, want %q", got.Headers, want.Headers)
	}
	if !bytes.Equal(got.Body, want.Body) {
		tb.Errorf("body = %q, want %q", got.Body, want.Body)
	}
	if got.BodyOmitted != want.BodyOmitted {
		tb.Errorf("BodyOmitted = %v, want %v", got.BodyOmitted, want.BodyOmitted)
	}
	if got.BodyCached != want.BodyCached {
		tb.Errorf("BodyCached = %v, want %v", got.BodyCached, want.BodyCached)
	}
	if !bytes.Equal(got.Fingerprint, want.Fingerprint) {
		tb.Errorf("fingerprint = %x, want %x", got.Fingerprint, want.Fingerprint)
	}
	if got.TraceID != want.TraceID || got.SpanID != want.SpanID {
		tb.Errorf("trace = %q/%q, want %q/%q", got.TraceID, got.SpanID, want.TraceID, want.SpanID)
	}
}

func screenWantDone(tb testing.TB, s idempotency.Screen, ref idempotency.Ref, want *idempotency.Entry) {
	tb.Helper()
	c := screenClaim(tb, s, ref, "reader", screenFingerprint("other"), screenLease)
	screenWantStatus(tb, c, idempotency.Done)
	if !bytes.Equal(c.Fingerprint, want.Fingerprint) {
		tb.Errorf("claim fingerprint = %x, want %x", c.Fingerprint, want.Fingerprint)
	}
	screenWantEntry(tb, c.Entry, want)
}

func screenWantInFlight(tb testing.TB, s idempotency.Screen, ref idempotency.Ref, owner string, fp []byte) {
	tb.Helper()
	c := screenClaim(tb, s, ref, "probe", nil, screenLease)
	screenWantStatus(tb, c, idempotency.InFlight)
	if c.Owner != owner {
		tb.Errorf("in-flight owner = %q, want %q", c.Owner, owner)
	}
	if !bytes.Equal(c.Fingerprint, fp) {
		tb.Errorf("in-flight fingerprint = %x, want %x", c.Fingerprint, fp)
	}
}

func screenFreshClaim(t *testing.T, s idempotency.Screen) {
	c := screenClaim(t, s, screenRef, "a", screenFingerprint("x"), screenLease)
	screenWantStatus(t, c, idempotency.Acquired)
}

func screenSecondClaim(t *testing.T, s idempotency.Screen) {
	fp := screenFingerprint("x")
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", fp, screenLease), idempotency.Acquired)
	c := screenClaim(t, s, screenRef, "b", screenFingerprint("y"), screenLease)
	screenWantStatus(t, c, idempotency.InFlight)
	if c.Owner != "a" || !bytes.Equal(c.Fingerprint, fp) || c.Entry != nil {
		t.Fatalf("in-flight claim = %+v, want owner a, fingerprint %x, no entry", c, fp)
	}
}

func screenSecondClaimNoFingerprint(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenWantInFlight(t, s, screenRef, "a", nil)
}

func screenCompleteReplays(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", screenFingerprint("body"), screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", screenEntry())
	screenWantDone(t, s, screenRef, screenEntry())
	// again: a replay does not consume the entry
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenBodyAtLimit(t *testing.T, s idempotency.Screen) {
	e := screenEntry()
	e.Body = bytes.Repeat([]byte{0, 0xff}, ScreenMaxCachedBody/2)
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", e)
	screenWantDone(t, s, screenRef, e)
}

func screenBodyOverLimit(t *testing.T, s idempotency.Screen) {
	e := screenEntry()
	e.Body = bytes.Repeat([]byte{'x'}, ScreenMaxCachedBody+1)
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", e)
	want := screenEntry()
	want.Body = nil
	want.BodyCached = false
	screenWantDone(t, s, screenRef, want)
}

// An entry whose ledger commit failed is the only record of the answer:
// no ledger row could give a replay its body.
func screenUnrecordedKeepsBody(t *testing.T, s idempotency.Screen) {
	e := screenEntry()
	e.Body = bytes.Repeat([]byte{'x'}, ScreenMaxCachedBody+1)
	e.Unrecorded = true
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", e)
	want := *e
	want.Unrecorded = false
	screenWantDone(t, s, screenRef, &want)
}

func screenOmittedBody(t *testing.T, s idempotency.Screen) {
	e := screenEntry()
	e.Body = nil
	e.BodyOmitted = true
	screenComplete(t, s, screenRef, "a", e)
	screenWantDone(t, s, screenRef, e)
}

func screenEmptyResponse(t *testing.T, s idempotency.Screen) {
	e := &idempotency.Entry{Response: idempotency.Response{Status: 204}, BodyCached: true}
	screenComplete(t, s, screenRef, "a", e)
	screenWantDone(t, s, screenRef, e)
}

func screenEntriesAreCopies(t *testing.T, s idempotency.Screen) {
	e := screenEntry()
	screenComplete(t, s, screenRef, "a", e)
	e.Body[0] = 'X'
	e.Headers["Content-Type"] = "text/plain"
	e.Fingerprint[0] ^= 0xff

	c := screenClaim(t, s, screenRef, "b", nil, screenLease)
	screenWantStatus(t, c, idempotency.Done)
	c.Entry.Body[0] = 'Y'
	c.Entry.Headers["X-Multi"] = "changed"
	c.Entry.Fingerprint[0] ^= 0xff
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenReleaseByOwner(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	if err := s.Release(context.Background(), screenRef, "a"); err != nil {
		t.Fatalf("Release by owner: %v", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}

func screenReleaseByOther(t *testing.T, s idempotency.Screen) {
	fp := screenFingerprint("x")
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", fp, screenLease), idempotency.Acquired)
	if err := s.Release(context.Background(), screenRef, "b"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by another owner = %v, want ErrNotOwner", err)
	}
	screenWantInFlight(t, s, screenRef, "a", fp)
}

func screenReleaseDone(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", screenEntry())
	if err := s.Release(context.Background(), screenRef, "a"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release of a done key = %v, want ErrNotOwner", err)
	}
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenReleaseAbsent(t *testing.T, s idempotency.Screen) {
	if err := s.Release(context.Background(), screenRef, "a"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release of an absent key = %v, want ErrNotOwner", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}

func screenCompleteStaleEmpty(t *testing.T, s idempotency.Screen) {
	// "a" lost its claim (the screen forgot it) but its record is durable.
	screenComplete(t, s, screenRef, "a", screenEntry())
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenCompleteOverOther(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", screenEntry())
	screenWantDone(t, s, screenRef, screenEntry())
	if err := s.Release(context.Background(), screenRef, "b"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by the replaced owner = %v, want ErrNotOwner", err)
	}
}

func screenCompleteKeepsFirst(t *testing.T, s idempotency.Screen) {
	first := screenEntry()
	screenComplete(t, s, screenRef, "a", first)
	second := screenEntry()
	second.Status = 500
	second.Body = []byte("second")
	second.Fingerprint = screenFingerprint("second")
	screenComplete(t, s, screenRef, "b", second)
	screenWantDone(t, s, screenRef, first)
}

// A refill that read the record before an operator deleted it must not
// bring it back; the next delivery's own complete counts.
// A refill is a record read from the ledger: if an operator deleted it
// after the read and a new delivery claimed the key, the refill must not
// end that claim (a repeat would then claim and forward beside it). Over
// the caller's own claim it records as any Complete does.
func screenRefillKeepsOthersClaim(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "reader", nil, screenLease), idempotency.Acquired)
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "new", nil, screenLease), idempotency.Acquired)
	stale := screenEntry()
	stale.Refill = true
	screenComplete(t, s, screenRef, "reader", stale)
	c := screenClaim(t, s, screenRef, "repeat", nil, screenLease)
	screenWantStatus(t, c, idempotency.InFlight)
	if c.Owner != "new" {
		t.Fatalf("in flight for %q, want the new delivery's claim", c.Owner)
	}

	own := idempotency.Ref{Route: screenRef.Route, Key: "evt_refilled"}
	screenWantStatus(t, screenClaim(t, s, own, "reader", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, own, "reader", stale)
	want := *stale
	want.Refill = false
	screenWantDone(t, s, own, &want)
}

func screenCompleteAfterForget(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, screenRef, "a", screenEntry())
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	screenComplete(t, s, screenRef, "stale", screenEntry())
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
	next := screenEntry()
	next.Body = []byte("after the delete")
	screenComplete(t, s, screenRef, "b", next)
	screenWantDone(t, s, screenRef, next)
}

func screenForgetInFlight(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}

func screenForgetDone(t *testing.T, s idempotency.Screen) {
	screenComplete(t, s, screenRef, "a", screenEntry())
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}

func screenForgetAbsent(t *testing.T, s idempotency.Screen) {
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget of an absent key: %v", err)
	}
}

func screenForgetDoneOnly(t *testing.T, s idempotency.Screen) {
	ctx := context.Background()
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	if err := s.ForgetDone(ctx, screenRef); err != nil {
		t.Fatalf("ForgetDone: %v", err)
	}
	screenWantInFlight(t, s, screenRef, "a", nil)
	screenComplete(t, s, screenRef, "a", screenEntry())
	if err := s.ForgetDone(ctx, screenRef); err != nil {
		t.Fatalf("ForgetDone: %v", err)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
	next := screenEntry()
	next.Body = []byte("claimed again")
	screenComplete(t, s, screenRef, "b", next) // no tombstone refuses it
	screenWantDone(t, s, screenRef, next)
}

// screenAwaitTakeover claims ref for owner until the short lease of its
// holder has run out, and returns the claim that was not InFlight.
func screenAwaitTakeover(tb testing.TB, s idempotency.Screen, ref idempotency.Ref, owner string) idempotency.Claim {
	tb.Helper()
	var c idempotency.Claim
	testenv.Eventually(tb, 10*time.Second, fmt.Sprintf("the claim of %q to leave in flight after a lease of %v", ref.Key, screenShortLease), func() bool {
		c = screenClaim(tb, s, ref, owner, nil, screenLease)
		return c.Status != idempotency.InFlight
	})
	return c
}

func screenLeaseTakeover(t *testing.T, s idempotency.Screen) {
	start := time.Now()
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenShortLease), idempotency.Acquired)
	screenWantInFlight(t, s, screenRef, "a", nil)
	c := screenAwaitTakeover(t, s, screenRef, "b")
	screenWantStatus(t, c, idempotency.TakenOver)
	// (less a little: Redis TIME counts whole milliseconds)
	if el := time.Since(start); el < screenShortLease-10*time.Millisecond {
		t.Errorf("taken over after %v, before the lease of %v ended", el, screenShortLease)
	}
	screenWantInFlight(t, s, screenRef, "b", nil)
	if err := s.Release(context.Background(), screenRef, "a"); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by the owner whose claim was taken over = %v, want ErrNotOwner", err)
	}
	screenWantInFlight(t, s, screenRef, "b", nil)
	// The first owner's record is durable: it wins over the new claim.
	screenComplete(t, s, screenRef, "a", screenEntry())
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenRoutesIndependent(t *testing.T, s idempotency.Screen) {
	r1 := idempotency.Ref{Route: "stripe", Key: "evt_1"}
	r2 := idempotency.Ref{Route: "github", Key: "evt_1"}
	screenWantStatus(t, screenClaim(t, s, r1, "a", nil, screenLease), idempotency.Acquired)
	screenWantStatus(t, screenClaim(t, s, r2, "b", nil, screenLease), idempotency.Acquired)
	screenComplete(t, s, r1, "a", screenEntry())
	screenWantInFlight(t, s, r2, "b", nil)
	if err := s.Forget(context.Background(), r2); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	screenWantDone(t, s, r1, screenEntry())
}

// screenAwkwardKeys are keys an attacker may send: every byte is part of the
// identity, and none of them may reach another key.
var screenAwkwardKeys = []string{
	"a\r\nb", "a\nb", "a\x00b", "\x00", "\xff\xfe\xfd", "a:b", "a:b:c", ":", "{a}", "}{", "{", "a}b{c",
	"*", "a*", "?[]", " ", "", "ключ", strings.Repeat("k", 1000), "evt_1 ", "EVT_1",
}

func screenOddKeys(t *testing.T, s idempotency.Screen) {
	for i, k := range screenAwkwardKeys {
		ref := idempotency.Ref{Route: "stripe", Key: k}
		fp := screenFingerprint(k)
		screenWantStatus(t, screenClaim(t, s, ref, fmt.Sprintf("owner-%d", i), fp, screenLease), idempotency.Acquired)
	}
	for i, k := range screenAwkwardKeys {
		ref := idempotency.Ref{Route: "stripe", Key: k}
		screenWantInFlight(t, s, ref, fmt.Sprintf("owner-%d", i), screenFingerprint(k))
	}
	for i, k := range screenAwkwardKeys {
		ref := idempotency.Ref{Route: "stripe", Key: k}
		e := screenEntry()
		e.Body = []byte(k)
		screenComplete(t, s, ref, fmt.Sprintf("owner-%d", i), e)
	}
	for _, k := range screenAwkwardKeys {
		ref := idempotency.Ref{Route: "stripe", Key: k}
		e := screenEntry()
		e.Body = []byte(k)
		screenWantDone(t, s, ref, e)
	}
	for i, k := range screenAwkwardKeys {
		ref := idempotency.Ref{Route: "stripe", Key: k}
		if err := s.Forget(context.Background(), ref); err != nil {
			t.Fatalf("Forget(%q): %v", k, err)
		}
		screenWantStatus(t, screenClaim(t, s, ref, "again", nil, screenLease), idempotency.Acquired)
		// forgetting one key left the others alone
		if i+1 < len(screenAwkwardKeys) {
			next := idempotency.Ref{Route: "stripe", Key: screenAwkwardKeys[i+1]}
			screenWantStatus(t, screenClaim(t, s, next, "again", nil, screenLease), idempotency.Done)
		}
	}
}

// screenWaitAsync runs Wait in a goroutine; the channel yields its error.
func screenWaitAsync(ctx context.Context, s idempotency.Screen, ref idempotency.Ref, owner string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Wait(ctx, ref, owner) }()
	return ch
}

// screenWantBlocked fails if the Wait behind ch returns within screenQuiet.
func screenWantBlocked(tb testing.TB, ch <-chan error) {
	tb.Helper()
	select {
	case err := <-ch:
		tb.Fatalf("Wait returned (%v) while the key was still in flight", err)
	case <-time.After(screenQuiet):
	}
}

// screenWantWoken fails unless the Wait behind ch returns nil within
// screenPrompt.
func screenWantWoken(tb testing.TB, ch <-chan error) time.Duration {
	tb.Helper()
	start := time.Now()
	select {
	case err := <-ch:
		if err != nil {
			tb.Fatalf("Wait = %v, want nil", err)
		}
		return time.Since(start)
	case <-time.After(screenPrompt):
		tb.Fatalf("Wait did not return within %v of the change", screenPrompt)
	}
	return 0
}

func screenWaitChange(t *testing.T, s idempotency.Screen, change func(t *testing.T)) {
	t.Helper()
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := screenWaitAsync(ctx, s, screenRef, "a")
	screenWantBlocked(t, ch)
	change(t)
	took := screenWantWoken(t, ch)
	t.Logf("Wait returned %v after the change", took)
}

func screenWaitComplete(t *testing.T, s idempotency.Screen) {
	screenWaitChange(t, s, func(t *testing.T) {
		screenComplete(t, s, screenRef, "a", screenEntry())
	})
	screenWantDone(t, s, screenRef, screenEntry())
}

func screenWaitRelease(t *testing.T, s idempotency.Screen) {
	screenWaitChange(t, s, func(t *testing.T) {
		if err := s.Release(context.Background(), screenRef, "a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}

func screenWaitForget(t *testing.T, s idempotency.Screen) {
	screenWaitChange(t, s, func(t *testing.T) {
		if err := s.Forget(context.Background(), screenRef); err != nil {
			t.Fatalf("Forget: %v", err)
		}
	})
}

func screenWaitLease(t *testing.T, s idempotency.Screen) {
	start := time.Now()
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenShortLease), idempotency.Acquired)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx, screenRef, "a"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if el := time.Since(start); el > screenShortLease+screenPrompt {
		t.Fatalf("Wait returned %v after a claim with a lease of %v", el, screenShortLease)
	}
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.TakenOver)
}

func screenWaitNotHeld(t *testing.T, s idempotency.Screen) {
	done := idempotency.Ref{Route: "stripe", Key: "done"}
	other := idempotency.Ref{Route: "stripe", Key: "other"}
	screenComplete(t, s, done, "a", screenEntry())
	screenWantStatus(t, screenClaim(t, s, other, "b", nil, screenLease), idempotency.Acquired)
	cases := []struct {
		name  string
		ref   idempotency.Ref
		owner string
	}{
		{"absent", idempotency.Ref{Route: "stripe", Key: "absent"}, "a"},
		{"done", done, "a"},
		{"held by another owner", other, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), screenPrompt)
			defer cancel()
			if err := s.Wait(ctx, c.ref, c.owner); err != nil {
				t.Fatalf("Wait = %v, want nil at once", err)
			}
		})
	}
}

func screenWaitCtx(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	const d = 100 * time.Millisecond
	start := time.Now() // before the deadline is set, which is then at least start+d
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := s.Wait(ctx, screenRef, "a")
	el := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
	}
	if el < d || el > d+screenPrompt {
		t.Fatalf("Wait returned after %v with a ctx of %v", el, d)
	}
	screenWantInFlight(t, s, screenRef, "a", nil)
}

func screenWaitOtherKeys(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := screenWaitAsync(ctx, s, screenRef, "a")
	sameKeyOtherRoute := idempotency.Ref{Route: "github", Key: screenRef.Key}
	otherKey := idempotency.Ref{Route: screenRef.Route, Key: screenRef.Key + "x"}
	for _, r := range []idempotency.Ref{sameKeyOtherRoute, otherKey} {
		screenWantStatus(t, screenClaim(t, s, r, "a", nil, screenLease), idempotency.Acquired)
		screenComplete(t, s, r, "a", screenEntry())
	}
	// a repeat of the waited-for key that finds it in flight changes nothing
	screenWantInFlight(t, s, screenRef, "a", nil)
	screenWantBlocked(t, ch)
	screenComplete(t, s, screenRef, "a", screenEntry())
	screenWantWoken(t, ch)
}

func screenWaitMany(t *testing.T, s idempotency.Screen) {
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", nil, screenLease), idempotency.Acquired)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 10
	chs := make([]<-chan error, n)
	for i := range chs {
		chs[i] = screenWaitAsync(ctx, s, screenRef, "a")
	}
	screenWantBlocked(t, chs[0])
	if err := s.Release(context.Background(), screenRef, "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, ch := range chs {
		screenWantWoken(t, ch)
	}
}

func screenConcurrentClaims(t *testing.T, s idempotency.Screen) {
	const n = 100
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]idempotency.Claim, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = s.Claim(context.Background(), idempotency.ClaimRequest{
				Ref: screenRef, Owner: fmt.Sprintf("owner-%d", i), Lease: screenLease,
			})
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if results[i].Status == idempotency.Acquired {
			if winner >= 0 {
				t.Fatalf("claims %d and %d both acquired the key", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no claim acquired the key")
	}
	want := fmt.Sprintf("owner-%d", winner)
	for i := range n {
		if i != winner && (results[i].Status != idempotency.InFlight || results[i].Owner != want) {
			t.Fatalf("claim %d = %v owner %q, want in flight held by %q", i, results[i].Status, results[i].Owner, want)
		}
	}
}

func screenPeek(t *testing.T, s idempotency.Screen) {
	peek := func(want idempotency.ClaimStatus, wantFound bool) idempotency.Claim {
		t.Helper()
		c, found, err := s.Peek(context.Background(), screenRef)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if found != wantFound || (found && c.Status != want) {
			t.Fatalf("Peek = %v found=%v, want %v found=%v", c.Status, found, want, wantFound)
		}
		return c
	}
	peek(0, false)
	fp := screenFingerprint("body")
	screenWantStatus(t, screenClaim(t, s, screenRef, "a", fp, screenLease), idempotency.Acquired)
	if c := peek(idempotency.InFlight, true); c.Owner != "a" || !bytes.Equal(c.Fingerprint, fp) {
		t.Fatalf("Peek of a claim = owner %q fingerprint %x, want a %x", c.Owner, c.Fingerprint, fp)
	}
	screenComplete(t, s, screenRef, "a", screenEntry())
	c := peek(idempotency.Done, true)
	screenWantEntry(t, c.Entry, screenEntry())
	if err := s.Forget(context.Background(), screenRef); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	peek(0, false)
	screenWantStatus(t, screenClaim(t, s, screenRef, "b", nil, screenLease), idempotency.Acquired)
}
