//go:build !linux

package loadbench

import "time"

// dueClock wakes an open-loop worker at a request's due time: here with
// time.Sleep (the precise timerfd clock is Linux's, dueclock_linux.go).
type dueClock struct{}

func newDueClock() *dueClock { return &dueClock{} }

func (*dueClock) sleepUntil(t time.Time) {
	if wait := time.Until(t); wait > 0 {
		time.Sleep(wait)
	}
}

func (*dueClock) close() {}
