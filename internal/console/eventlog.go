package console

import (
	"context"
	"net/http"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// EventLog reads the event log (SPEC §11): the admin API's record list
// and record detail.
type EventLog interface {
	// Records lists route's records newest first, without bodies.
	Records(ctx context.Context, route string, q EventQuery) (EventPage, error)
	// Record is one record with its stored request and attempts.
	Record(ctx context.Context, ref idempotency.Ref) (Event, error)
}

// EventQuery filters and pages the list (zero values: no filter).
type EventQuery struct {
	State        string
	KeyPrefix    string
	Since, Until time.Time
	Limit        int
	Cursor       string
}

// EventPage is one page of the list.
type EventPage struct {
	Records []admin.Record
	// NextCursor asks for the next page; "" on the last.
	NextCursor string
}

// Event is a record as the detail shows it.
type Event struct {
	admin.Record
	// Request is nil when the route stores none.
	Request  *StoredRequest
	Attempts []Attempt
	// NextAttemptAt is set for a queued async delivery.
	NextAttemptAt *time.Time
}

// StoredRequest is the delivery as it was forwarded.
type StoredRequest struct {
	Method, Path string
	Headers      map[string][]string
	Body         []byte
}

// Attempt is one forward of the stored request.
type Attempt struct {
	Attempt   int
	StartedAt time.Time
	Duration  time.Duration
	// Status is 0 when nothing came back.
	Status int
	Error  string
}

// Queue delivers stored requests again (SPEC §11).
type Queue interface {
	// Redeliver queues ref's stored request to the upstream again.
	Redeliver(ctx context.Context, ref idempotency.Ref) error
	// Redrive queues route's dead records again (keys nil: all of them)
	// and returns how many.
	Redrive(ctx context.Context, route string, keys []string) (int, error)
}

// Depth is an async route's queue.
type Depth struct {
	Queued, Dead int
	// OldestQueued is the creation time of the oldest queued delivery;
	// zero when none is queued.
	OldestQueued time.Time
}

// noEventLog stands in for a gateway without an event log.
type noEventLog struct{}

var errNoEventLog = &admin.OpError{Status: http.StatusNotFound, Detail: "the event log is not available"}

func (noEventLog) Records(context.Context, string, EventQuery) (EventPage, error) {
	return EventPage{}, errNoEventLog
}

func (noEventLog) Record(context.Context, idempotency.Ref) (Event, error) {
	return Event{}, errNoEventLog
}
