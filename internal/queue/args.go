package queue

import "time"

// Args is a delivery job: the record whose stored request it delivers.
// Created is that record's (sqlledger.Delivery); zero in a job queued
// before jobs carried it, which takes any record of the key for its own.
type Args struct {
	Route   string    `json:"route"`
	Key     string    `json:"key"`
	Created time.Time `json:"created,omitzero"`
}

// Kind names delivery jobs in River's tables.
func (Args) Kind() string { return "hookstamp_delivery" }
