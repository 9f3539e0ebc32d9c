package queue

import (
	"sync"
	"time"
)

// keptAnswers are final answers this replica got for attempts whose
// settling the ledger refused until the run's horizon (a full disk, a
// database cut off). The job's next run here records the answer instead
// of sending the delivery again; run by another replica, it is delivered
// again, with the same key, as after a crash mid-attempt.
type keptAnswers struct {
	mu    sync.Mutex
	m     map[int64]keptAnswer // by job ID
	bytes int
}

type keptAnswer struct {
	sent *sentAttempt
	at   time.Time
}

// Bounds of what is kept: past them the oldest answers are dropped, and
// their deliveries sent again when their jobs run. An answer older than
// keptFor belongs to a job that ran elsewhere since, or ended.
const (
	maxKept      = 1024
	maxKeptBytes = 64 << 20
	keptFor      = time.Hour
)

func (k *keptAnswers) put(s *sentAttempt) {
	kept := *s
	kept.st = nil // read again by the next run; its request is not kept
	size := answerSize(&kept)
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[int64]keptAnswer)
	}
	k.dropLocked(s.job.ID)
	for id, a := range k.m {
		if now.Sub(a.at) > keptFor {
			k.dropLocked(id)
		}
	}
	for len(k.m) >= maxKept || (len(k.m) > 0 && k.bytes+size > maxKeptBytes) {
		k.dropLocked(k.oldestLocked())
	}
	if size > maxKeptBytes {
		return
	}
	k.m[s.job.ID] = keptAnswer{sent: &kept, at: now}
	k.bytes += size
}

// take removes and returns the answer kept for the job, or nil.
func (k *keptAnswers) take(job int64) *sentAttempt {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.m[job]
	if !ok {
		return nil
	}
	k.dropLocked(job)
	return a.sent
}

func (k *keptAnswers) dropLocked(job int64) {
	if a, ok := k.m[job]; ok {
		k.bytes -= answerSize(a.sent)
		delete(k.m, job)
	}
}

func (k *keptAnswers) oldestLocked() int64 {
	var id int64
	var at time.Time
	for j, a := range k.m {
		if at.IsZero() || a.at.Before(at) {
			id, at = j, a.at
		}
	}
	return id
}

func answerSize(s *sentAttempt) int {
	if s.up == nil {
		return 0
	}
	return len(s.up.Body)
}
