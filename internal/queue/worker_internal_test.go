package queue

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// A run River noted as lost (rescued, or failed) lost its attempt unless
// the job's note names that very run: one that recorded its retry and then
// could not store its snooze. Run numbers are River's attempt plus the
// job's snoozes (a snooze gives the attempt back).
func TestWasRecordedTellsALostSnoozeFromALostAttempt(t *testing.T) {
	rescued := rivertype.AttemptError{At: time.Now(), Attempt: 2, Error: "Stuck job rescued by JobRescuer"}
	for _, tc := range []struct {
		name     string
		metadata string
		want     bool
	}{
		// Run 3 (attempt 2 after one snooze) recorded its retry; its
		// snooze was not stored, so the count is still 1.
		{"recorded, snooze lost", `{"snoozes":1,"output":{"recorded_run":3}}`, true},
		// Run 3 recorded and snoozed (snoozes 2); run 4, attempt 2 again,
		// was killed mid-attempt.
		{"killed after an earlier retry", `{"snoozes":2,"output":{"recorded_run":3}}`, false},
		{"killed on its first run", `{}`, false},
		{"no note, snoozed before", `{"snoozes":1}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &river.Job[Args]{JobRow: &rivertype.JobRow{Attempt: 3, Metadata: []byte(tc.metadata), Errors: []rivertype.AttemptError{rescued}}}
			if got := wasRecorded(job, rescued); got != tc.want {
				t.Fatalf("wasRecorded = %v, want %v", got, tc.want)
			}
		})
	}
}

// A run that failed before sending (the ledger could not be read) is no
// attempt: the route's max_attempts counts the runs that sent one.
func TestSentRunsLeaveOutRunsThatSentNothing(t *testing.T) {
	unsentErr := rivertype.AttemptError{Attempt: 1, Error: unsentPrefix + "read delivery: dependency unavailable"}
	rescued := rivertype.AttemptError{Attempt: 2, Error: "Stuck job rescued by JobRescuer"}
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{Attempt: 3, Errors: []rivertype.AttemptError{unsentErr, rescued}}}
	// Run 4: runs 1 (unsent), 2 (rescued, it sent), 3 (snoozed), 4.
	if got := sentRuns(job, 4); got != 3 {
		t.Fatalf("sentRuns = %d, want 3", got)
	}
}
