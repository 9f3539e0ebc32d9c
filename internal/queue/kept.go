package queue

import "sync"

// keptAnswers are final answers this replica got for attempts whose
// settling the ledger refused until the run's horizon (a full disk, a
// database cut off). The job's next run here records the answer instead
// of sending the delivery again; run by another replica, it is delivered
// again, with the same key, as after a crash mid-attempt.
type keptAnswers struct {
	mu sync.Mutex
	m  map[int64]*sentAttempt // by job ID
}

// maxKept bounds the answers kept: past it, one is dropped, and its
// delivery is sent again when its job runs.
const maxKept = 1024

func (k *keptAnswers) put(s *sentAttempt) {
	kept := *s
	kept.st = nil // read again by the next run; its request is not kept
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[int64]*sentAttempt)
	}
	if len(k.m) >= maxKept {
		for id := range k.m {
			delete(k.m, id)
			break
		}
	}
	k.m[s.job.ID] = &kept
}

// take removes and returns the answer kept for the job, or nil.
func (k *keptAnswers) take(job int64) *sentAttempt {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.m[job]
	delete(k.m, job)
	return s
}
