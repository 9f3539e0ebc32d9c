package queue

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// answerFor is a sent attempt of job id, answered with body bytes.
func answerFor(id int64, body int) *sentAttempt {
	return &sentAttempt{job: &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id}}, up: &idempotency.Upstream{Status: 200, Body: make([]byte, body)}}
}

// The answers kept for jobs that may never run here again are bounded:
// by count, by bytes (each can be a whole answer body), and by age; the
// oldest go first.
func TestKeptAnswersAreBounded(t *testing.T) {
	var k keptAnswers
	for id := int64(1); id <= maxKept+1; id++ {
		k.put(answerFor(id, 1))
	}
	if len(k.m) != maxKept || k.take(1) != nil || k.take(2) == nil {
		t.Fatalf("%d kept, job 1 kept %v: want %d, the oldest dropped", len(k.m), k.m[1].sent != nil, maxKept)
	}

	k = keptAnswers{}
	k.put(answerFor(1, maxKeptBytes/2))
	k.put(answerFor(2, maxKeptBytes/2))
	k.put(answerFor(3, 1))
	if k.take(1) != nil || k.take(2) == nil || k.take(3) == nil || k.bytes != 0 {
		t.Fatalf("by bytes: want job 1 dropped for job 3, and nothing left counted (%d bytes)", k.bytes)
	}
	k.put(answerFor(4, maxKeptBytes+1))
	if k.take(4) != nil || k.bytes != 0 {
		t.Fatal("an answer over the whole bound was kept")
	}

	k.put(answerFor(5, 1))
	a := k.m[5]
	a.at = time.Now().Add(-keptFor - time.Minute)
	k.m[5] = a
	k.put(answerFor(6, 1))
	if k.take(5) != nil || k.take(6) == nil {
		t.Fatal("an answer older than keptFor was kept")
	}
}
