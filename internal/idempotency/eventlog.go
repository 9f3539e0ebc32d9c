package idempotency

import (
	"errors"
	"time"
)

// ListQuery selects a route's records for the event log (SPEC §11),
// newest first (created_at, then key, descending).
type ListQuery struct {
	Route string
	// State keeps the records in that state; "" keeps all.
	State State
	// KeyPrefix keeps the keys that start with it (case matters).
	KeyPrefix string
	// Since and Until bound created_at: Since <= created_at < Until. A zero
	// time leaves that side open.
	Since, Until time.Time
	// Limit is the most records a page holds; at least 1.
	Limit int
	// Cursor continues after the page that returned it as Next; "" starts
	// at the newest record.
	Cursor string
}

// RecordPage is one page of a ListQuery.
type RecordPage struct {
	// Records come without their bodies (Response.Body) and without their
	// requests.
	Records []Record
	// Next is the cursor of the following page; "" on the last.
	Next string
}

// ErrBadCursor: a ListQuery's Cursor was not made by the ledger.
var ErrBadCursor = errors.New("invalid cursor")
