package queue

import "time"

// Args is a delivery job: the record whose stored request it delivers.
// Created is that record's (sqlledger.Delivery); zero in a job queued
// before jobs carried it, which takes any record of the key for its own.
// Requeued is when an operator queued the record again, on the
// database's clock; the route's max_age counts from it, else from the
// record's intake (sqlledger.Stored.QueuedAt).
type Args struct {
	Route    string    `json:"route"`
	Key      string    `json:"key"`
	Created  time.Time `json:"created,omitzero"`
	Requeued time.Time `json:"requeued,omitzero"`
}

// of reports whether a is a job of the record whose created_at, as the
// database holds it, is created: a job without Created is any record's of
// its key. The worker's rule (sqlledger.Stored.Is), for the jobs it does
// not run.
func (a Args) of(created time.Time) bool {
	return a.Created.IsZero() || a.Created.Equal(created)
}

// Kind names delivery jobs in River's tables.
func (Args) Kind() string { return "hookstamp_delivery" }
