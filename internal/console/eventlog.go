package console

import (
	"context"
	"net/http"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// EventLog reads the event log (SPEC §11) through the admin API's
// operations (*admin.Server).
type EventLog interface {
	// EventList is a page of a route's records, newest first.
	EventList(ctx context.Context, q idempotency.ListQuery) (admin.RecordList, error)
	// EventDetail is one record with its stored request and attempts.
	EventDetail(ctx context.Context, ref idempotency.Ref) (admin.RecordDetail, error)
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
	// Queued counts the deliveries waiting: queued records, and done
	// ones a redelivery waits or runs for (Redelivering of them), which
	// the event log lists as done.
	Queued, Dead int
	Redelivering int
	// OldestQueued is the creation time of the oldest queued delivery;
	// zero when none is queued.
	OldestQueued time.Time
}

// QueuedRecords are the records in state queued, as the event log lists
// them.
func (d Depth) QueuedRecords() int { return d.Queued - d.Redelivering }

// noEventLog stands in for a gateway without an event log.
type noEventLog struct{}

var errNoEventLog = &admin.OpError{Status: http.StatusNotFound, Detail: "the event log is not available"}

func (noEventLog) EventList(context.Context, idempotency.ListQuery) (admin.RecordList, error) {
	return admin.RecordList{}, errNoEventLog
}

func (noEventLog) EventDetail(context.Context, idempotency.Ref) (admin.RecordDetail, error) {
	return admin.RecordDetail{}, errNoEventLog
}
