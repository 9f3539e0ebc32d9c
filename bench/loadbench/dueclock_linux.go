package loadbench

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dueClock wakes an open-loop worker at a request's due time, closely.
// time.Sleep does not: the Go runtime waits for timers in epoll_wait,
// whose timeout is in whole milliseconds, so a sleep ends ~0.5 ms late at
// the median and ~1 ms at worst — as much as a cached repeat or a proxy
// hop takes on loopback, and charged to the system under test, since
// latency runs from the due time. A timerfd fires to the kernel's timer
// slack (~50 µs), and waiting on it parks the goroutine in the netpoller
// like a socket read: no thread or P is held while it waits (a blocking
// nanosleep would hold one of the machine's two Ps, delaying the
// goroutines reading answers).
type dueClock struct {
	fd  int
	f   *os.File
	buf [8]byte
}

func newDueClock() *dueClock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &dueClock{fd: -1}
	}
	return &dueClock{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

func (c *dueClock) sleepUntil(t time.Time) {
	wait := time.Until(t)
	if wait <= 0 {
		return
	}
	if c.f == nil {
		time.Sleep(wait)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(wait))}
	if err := unix.TimerfdSettime(c.fd, 0, &spec, nil); err != nil {
		time.Sleep(wait)
		return
	}
	// The expiration count; blocks until the timer fires.
	if _, err := c.f.Read(c.buf[:]); err != nil {
		if wait := time.Until(t); wait > 0 {
			time.Sleep(wait)
		}
	}
}

func (c *dueClock) close() {
	if c.f != nil {
		_ = c.f.Close()
	}
}
