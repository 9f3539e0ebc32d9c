// Package idempotency is hookstamp's state machine: for each delivery of
// a business event it forwards it, replays the recorded answer, or has the
// provider come back later (conflict, held, unavailable).
//
// It declares the two stores it needs: a Screen (fast, forgetful, atomic
// claims) and a Ledger (durable records, the source of truth). Drivers
// live in subpackages named after their dependency.
package idempotency

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Ref names one record: the route plus the key extracted from the
// delivery.
type Ref struct {
	Route string
	Key   string
}

// State is the state of a ledger row.
type State string

// Ledger row states (SPEC §5).
const (
	StatePending State = "pending" // a ledger claim, forwarding until LeaseUntil
	StateHeld    State = "held"    // an ambiguous result (record.ambiguous: hold)
	StateDone    State = "done"    // a recorded final response; never changes
	// StateQueued: an async delivery stored and acknowledged, waiting for
	// the upstream to take it (SPEC §10).
	StateQueued State = "queued"
	// StateDead: an async delivery that ran out of attempts or age; an
	// operator's redrive queues it again.
	StateDead State = "dead"
)

// Answered reports whether repeats of the row's key are answered from it
// rather than claimed: a recorded answer, or an async delivery stored and
// acknowledged, whatever became of it since. An async route answers them
// its acknowledgement; a synchronous one (the route was async when the
// delivery was stored) replays only a done row's answer, since a queued
// or dead row holds none (Entry.Async).
func (s State) Answered() bool {
	return s == StateDone || s == StateQueued || s == StateDead
}

// Response is an upstream answer as it is recorded and replayed.
type Response struct {
	Status int
	// Headers are the kept headers (record.headers) by canonical name,
	// several values joined with ", ", and the Content-Length of an
	// answer to HEAD, which a replay to HEAD declares.
	Headers map[string]string
	Body    []byte
	// BodyOmitted: the body exceeded record.max_body and was not recorded.
	BodyOmitted bool
}

// SetByReplay reports whether a replay writes header name itself (framing,
// hop-by-hop, hookstamp's own headers, Date), so that neither
// record.headers nor an operator's recorded answer names it.
func SetByReplay(name string) bool {
	switch c := http.CanonicalHeaderKey(name); c {
	case "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade",
		"Idempotent-Replayed", "Date":
		return true
	default:
		return strings.HasPrefix(c, "Hookstamp-")
	}
}

// Record is one ledger row.
type Record struct {
	Ref
	State       State
	Owner       string    // pending claims only
	LeaseUntil  time.Time // pending claims only
	Fingerprint []byte    // nil when the route's fingerprint mode is none
	Response              // done rows (and held rows resolved with "record")
	TraceID     string    // of the original delivery, for span links
	SpanID      string
	Source      string
	CreatedAt   time.Time
	CompletedAt time.Time
	ExpiresAt   time.Time
	// Acked: stored by an async intake, so the provider got the route's
	// acknowledgement, not the upstream's answer; repeats on an async
	// route get the acknowledgement again. A row recorded while its route
	// was synchronous is not, whatever the route is now.
	Acked bool
	// AckUnknown: the row does not say (acked NULL): it was written by a
	// release that did not know the column, during a rolling update or
	// before it. Acked is false. Such a row is answered as those releases
	// answered it: the acknowledgement on a route async now, its recorded
	// answer (or held) on a synchronous one.
	AckUnknown bool
	// Request is the stored delivery (record.request, async routes); nil
	// when the route stores none.
	Request *Request
	// Attempt, given to Commit, is the forward that produced the record:
	// the ledger writes it as the record's next attempt in the same
	// transaction, and only if the record is written. Never read back.
	Attempt *Attempt
}

// Request is a delivery as stored for redelivery (SPEC §11): hop-by-hop
// headers, Authorization and Cookie are never stored.
type Request struct {
	Method string
	// Path is the forwarded path with its query.
	Path    string
	Headers http.Header
	Body    []byte
}

// Attempt is one forward of a stored request (SPEC §11).
type Attempt struct {
	Ref
	Attempt   int // 1, 2, … per record
	StartedAt time.Time
	Duration  time.Duration
	// Status is the upstream's answer; 0 when nothing came back.
	Status  int
	Error   string
	Replica string
	// ExpiresAt is when an attempt whose record was never written (a
	// released claim) is swept; zero: it goes only with its record.
	ExpiresAt time.Time
}

// ClaimStatus says what a claim found.
type ClaimStatus int

// Claim results.
const (
	// Acquired: the caller owns the key: forward, then commit or release.
	Acquired ClaimStatus = iota + 1
	// TakenOver: as Acquired, after a previous owner's lease expired.
	TakenOver
	InFlight // another owner holds a live claim
	Done     // a final response is recorded (Entry)
	Held     // held after an ambiguous upstream result
)

func (s ClaimStatus) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case TakenOver:
		return "taken_over"
	case InFlight:
		return "in_flight"
	case Done:
		return "done"
	case Held:
		return "held"
	}
	return "unknown"
}

// Claim is the answer of Screen.Claim and Ledger.Claim.
type Claim struct {
	Status      ClaimStatus
	Owner       string // of an InFlight claim
	Fingerprint []byte // of the holder or the record; nil if none
	Entry       *Entry // for Done (and Held when the ledger answered)
}

// Entry is what a screen keeps of a done record.
type Entry struct {
	Response
	// BodyCached is false when the screen kept status and headers only; the
	// replay then reads the body from the ledger.
	BodyCached bool
	// Unrecorded: the ledger has no record of it (the commit failed), so
	// a screen keeps it whole, body included, as the only record.
	Unrecorded bool
	// Refill: read from the ledger, so possibly deleted since; a screen
	// writes it only when the key is not in flight for another owner.
	Refill bool
	// Async: the entry is an async delivery's — its route's
	// acknowledgement, or a queued or dead row's, whose Response is no
	// answer of the upstream — not a recorded answer. An async route
	// answers it with its acknowledgement; a synchronous route (one that
	// was async when the delivery was stored) reads the record's state in
	// the ledger and never replays the entry's Response.
	Async bool
	// AckUnknown: the entry's record is Record.AckUnknown, written by a
	// release that did not know whether its provider was acknowledged.
	// An async route answers it with its acknowledgement, as those
	// releases did; a synchronous one as a recorded answer (Async
	// false), or reads the ledger (Async true: queued or dead).
	AckUnknown  bool
	Fingerprint []byte
	TraceID     string
	SpanID      string
}

// ClaimRequest is what a claim needs to know about the delivery.
type ClaimRequest struct {
	Ref
	Owner       string
	Fingerprint []byte
	// Also is Delivery.Also: digests that are Fingerprint's event too.
	Also      func() [][]byte
	Lease     time.Duration
	Retention time.Duration // of a ledger row
	Source    string
	// RefuseReuse keeps an expired claim that holds another event's
	// fingerprint: it is reported InFlight with that fingerprint, which
	// the caller answers as key reuse, instead of being taken over (see
	// MayTakeOver). A screen confirmed by a ledger claim may ignore it.
	RefuseReuse bool
}

// MayTakeOver reports whether r may take over an expired claim holding
// fingerprint fp: always, unless r.RefuseReuse and fp is another event's.
// A body sent under a key whose first delivery never settled is still key
// reuse: taken over, it would reach the upstream under the first
// delivery's Idempotency-Key, and the first event's own retry would then
// be refused as the reuse.
func (r *ClaimRequest) MayTakeOver(fp []byte) bool {
	return !r.RefuseReuse || sameEvent(fp, r.Fingerprint, r.Also)
}

// Errors callers branch on.
var (
	ErrNotFound = errors.New("record not found")
	// ErrNotOwner: the caller's claim is gone; nothing changed.
	ErrNotOwner = errors.New("claim not owned")
	// ErrUnavailable wraps a driver's failures to reach its dependency, to
	// which the on_unavailable policies apply.
	ErrUnavailable = errors.New("dependency unavailable")
)

// Screen is the fast, atomic, forgetful claim store in front of the ledger,
// safe for concurrent use across goroutines and replicas.
type Screen interface {
	// Claim atomically takes the key for req.Owner with a lease, or reports
	// what holds it.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Complete records e as ref's done entry for ttl, whoever holds the key
	// (the record is durable already), except that a done entry stays
	// (unless e is Unrecorded), a Refill never replaces another owner's
	// claim, and within ForgetTombstone of a Forget with no Claim since
	// nothing is written.
	Complete(ctx context.Context, ref Ref, owner string, e *Entry, ttl time.Duration) error
	// Release drops the caller's in-flight entry (else ErrNotOwner).
	Release(ctx context.Context, ref Ref, owner string) error
	// Forget removes whatever the screen holds for ref (an operator's
	// delete) and refuses Completes of it for ForgetTombstone or until a
	// Claim.
	Forget(ctx context.Context, ref Ref) error
	// ForgetDone removes ref's done entry and leaves a claim alone.
	ForgetDone(ctx context.Context, ref Ref) error
	// Wait blocks until owner's in-flight entry may have changed or ctx is
	// done; it may return early: callers claim again.
	Wait(ctx context.Context, ref Ref, owner string) error
	// Peek reports what holds ref without claiming it: a Done entry or an
	// InFlight claim, and false when nothing does.
	Peek(ctx context.Context, ref Ref) (Claim, bool, error)
}

// Queue stores async deliveries (SPEC §10).
type Queue interface {
	// Enqueue writes rec (state queued, with its Request) and its delivery
	// job in one transaction, where there is no row or a pending one owned
	// by owner or expired before now; otherwise ErrNotOwner. Owner "" owns
	// no row: the insert is the claim, and replacedPending reports a row
	// written over another's expired claim (a takeover), which it takes
	// only when that claim holds rec's fingerprint or none (the claim
	// path decides the rest, with MayTakeOver).
	Enqueue(ctx context.Context, rec *Record, owner string, now time.Time) (replacedPending bool, err error)
}

// ForgetTombstone is how long a deleted key refuses refills: a repeat that
// read the record just before the delete would put it back. Refills follow
// their read within an operation timeout, so a minute covers them.
const ForgetTombstone = time.Minute

// Ledger is the durable source of truth.
type Ledger interface {
	// Lookup returns the record for ref, or ErrNotFound.
	Lookup(ctx context.Context, ref Ref) (*Record, error)
	// Claim makes a pending row with a lease, takes over one whose lease
	// expired, or reports what holds the key.
	Claim(ctx context.Context, req ClaimRequest, now time.Time) (Claim, error)
	// Commit writes rec (done or held) in one transaction where there is no
	// row, or a pending one owned by owner or expired before now; otherwise
	// ErrNotOwner.
	Commit(ctx context.Context, rec *Record, owner string, now time.Time) error
	// Release deletes owner's pending row (else ErrNotOwner).
	Release(ctx context.Context, ref Ref, owner string) error
}
