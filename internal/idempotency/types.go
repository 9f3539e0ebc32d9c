// Package idempotency is hookstamp's state machine: it decides, for each
// delivery of a business event, whether the upstream sees it (forward), or the
// provider gets the recorded answer back (replay), or has to come back later
// (conflict, held, unavailable).
//
// It depends on two small interfaces it declares itself: a Screen (fast,
// forgetful, atomic claims: Redis SET NX or an in-process map) and a Ledger
// (durable records in SQL, the source of truth). Drivers live in subpackages
// named after their dependency (memscreen, redisscreen, sqlledger) and are
// chosen once, in main.
package idempotency

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Ref names one record: the identity of a business event is the route name
// plus the key extracted from the delivery. The same key on two routes is two
// records.
type Ref struct {
	Route string
	Key   string
}

// State is the state of a ledger row.
type State string

// Ledger row states (SPEC §5).
const (
	// StatePending is a claim made in the ledger (screen "none", or the screen
	// was unreachable): the owner is forwarding until LeaseUntil.
	StatePending State = "pending"
	// StateHeld is an ambiguous result on a route with record.ambiguous: hold.
	// Repeats get 409 until an operator resolves it.
	StateHeld State = "held"
	// StateDone is a recorded final response. A done row never changes.
	StateDone State = "done"
)

// Response is an upstream answer as it is recorded and replayed.
type Response struct {
	Status int
	// Headers are the kept response headers (record.headers), canonical name to
	// value; several values of one header are joined with ", " (RFC 9110 §5.3).
	Headers map[string]string
	Body    []byte
	// BodyOmitted is true when the body exceeded record.max_body and was not
	// recorded: the replay carries status and headers, an empty body and
	// Hookstamp-Body-Omitted: true.
	BodyOmitted bool
}

// SetByReplay reports whether a replay writes header name itself — its
// framing, the hop-by-hop headers, hookstamp's own outcome headers and
// Date, which the server stamps on every answer — so that it can be
// neither recorded (record.headers) nor resolved in: a recorded value
// would not be what the replay carries.
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
}

// ClaimStatus says what a claim found.
type ClaimStatus int

// Claim results.
const (
	// Acquired: the caller owns the key and must forward, then commit or
	// release.
	Acquired ClaimStatus = iota + 1
	// TakenOver: as Acquired, but a previous owner's lease had expired without
	// a commit or release (its process died). The upstream may see a second
	// copy; it carries the same Idempotency-Key.
	TakenOver
	// InFlight: another owner holds a live claim.
	InFlight
	// Done: a final response is recorded. Entry.Response may lack the body
	// (screen entries larger than max_cached_body): then BodyCached is false
	// and the ledger has it.
	Done
	// Held: the key is held after an ambiguous upstream result.
	Held
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
	Status ClaimStatus
	// Owner of an InFlight claim.
	Owner string
	// Fingerprint of the delivery holding (InFlight) or recorded for (Done,
	// Held) the key; nil if none.
	Fingerprint []byte
	// Entry is set for Done (and for Held when the ledger answered).
	Entry *Entry
}

// Entry is what a screen keeps of a done record: enough to replay without
// touching the ledger when the body fits max_cached_body.
type Entry struct {
	Response
	// BodyCached is false when the screen kept status and headers only; the
	// replay then reads the body from the ledger.
	BodyCached bool
	// Unrecorded: the ledger has no record of this answer (its commit
	// failed after the forward, SPEC §1). The screen entry is then all that
	// intercepts repeats, so a screen keeps it whole — body included,
	// whatever max_cached_body says — and keeps it even where done entries
	// are otherwise left to the local cache.
	Unrecorded bool
	// Refill: the entry was read from the ledger, not written by the
	// caller, so it may be stale — an operator may have deleted the record
	// since, and another delivery claimed the key. A screen writes it only
	// when the key is not in flight for another owner.
	Refill      bool
	Fingerprint []byte
	TraceID     string
	SpanID      string
}

// ClaimRequest is what a claim needs to know about the delivery.
type ClaimRequest struct {
	Ref
	Owner       string
	Fingerprint []byte
	Lease       time.Duration
	// Retention is how long a ledger row lives (ledger claims only).
	Retention time.Duration
	Source    string
}

// Errors callers branch on.
var (
	// ErrNotFound: no record for the ref.
	ErrNotFound = errors.New("record not found")
	// ErrNotOwner: the caller's claim is gone (lease expired and taken over,
	// or forgotten by an operator); the operation changed nothing.
	ErrNotOwner = errors.New("claim not owned")
	// ErrUnavailable wraps failures to reach a dependency (network, timeout,
	// closed pool). Drivers wrap their transport errors with it so that the
	// state machine can apply the on_unavailable policy.
	ErrUnavailable = errors.New("dependency unavailable")
)

// Screen is the fast, atomic, forgetful claim store in front of the ledger.
// Every method is safe for concurrent use across goroutines and, for shared
// screens, across gateway replicas.
type Screen interface {
	// Claim atomically takes the key for req.Owner with a lease, or reports
	// what holds it (InFlight with owner and fingerprint, or Done with the
	// cached entry). One round trip.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Complete records e as the done entry for ref, kept for ttl, replacing
	// the caller's in-flight entry. The record is durable before Complete is
	// called, so Complete writes it whoever holds the key now (the ledger row
	// is the truth), except that a done entry already there is kept (a done
	// record never changes) and that within ForgetTombstone of a Forget of
	// ref, with no Claim since, Complete writes nothing: the operator's
	// delete wins over a refill that read the record before it. An
	// Unrecorded entry is the exception to the first rule (nothing durable
	// stands behind it) and is kept with its body; a Refill entry is the
	// exception to "whoever holds the key".
	Complete(ctx context.Context, ref Ref, owner string, e *Entry, ttl time.Duration) error
	// Release drops the caller's in-flight entry so that the next delivery is
	// forwarded. ErrNotOwner if the caller no longer owns it.
	Release(ctx context.Context, ref Ref, owner string) error
	// Forget removes whatever the screen holds for ref (operator delete),
	// and refuses Completes of ref until ForgetTombstone has passed or ref
	// is claimed again.
	Forget(ctx context.Context, ref Ref) error
	// ForgetDone removes ref's done entry, if the screen holds one, and
	// nothing else: a claim in flight — another delivery's, made since the
	// caller read the done entry — is left alone.
	ForgetDone(ctx context.Context, ref Ref) error
	// Wait blocks until the in-flight entry held by owner may have changed
	// (completed, released, expired, forgotten) or ctx is done. It may return
	// early; callers claim again to learn the new state.
	Wait(ctx context.Context, ref Ref, owner string) error
}

// ForgetTombstone is how long a deleted key refuses refills. A repeat that
// read a record just before an operator deleted it goes on to put it back
// in the screen and the in-process cache; without a tombstone the deleted
// record would be replayed for the screen's TTL. Refills follow their read
// within an operation timeout (seconds), so a minute covers them with room;
// a new delivery's claim ends the tombstone at once.
const ForgetTombstone = time.Minute

// Ledger is the durable source of truth. Commit writes the record and its
// response in one transaction, after the upstream answered and before the
// provider is answered.
type Ledger interface {
	// Lookup returns the record for ref, or ErrNotFound.
	Lookup(ctx context.Context, ref Ref) (*Record, error)
	// Claim makes a pending row with a lease (conditional insert), or takes
	// over a pending row whose lease expired (conditional update), or reports
	// what holds the key. Used when the screen is "none" or unreachable.
	Claim(ctx context.Context, req ClaimRequest, now time.Time) (Claim, error)
	// Commit writes rec as done (or held, when rec.State is StateHeld) in one
	// transaction. It succeeds when there is no row, or the row is pending
	// and owned by owner or its lease expired before now. Otherwise it returns
	// ErrNotOwner and changes nothing: a done row never changes.
	Commit(ctx context.Context, rec *Record, owner string, now time.Time) error
	// Release deletes the pending row owned by owner (ErrNotOwner otherwise).
	Release(ctx context.Context, ref Ref, owner string) error
}
