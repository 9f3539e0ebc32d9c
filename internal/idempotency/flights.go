package idempotency

import "sync"

// flights are the deliveries this process is forwarding now, by record. A
// repeat that finds its first delivery in flight here waits for it
// in-process and is then answered from the local cache, instead of
// learning through the screen that the key is in flight, marking it waited
// for, being woken by a published message and claiming again: three
// script calls. In a retry storm (make bench, B3s) that was half the
// Redis calls of all repeats.
//
// It is only a shortcut: a repeat that misses the flight (it arrived
// between the claim and the registration, or on another replica) takes
// the screen's path, which stays correct on its own.
type flights struct {
	m sync.Map // Ref → *flight
}

type flight struct {
	fingerprint []byte
	done        chan struct{} // closed once the claim is settled
}

// start registers the delivery of ref that holds its claim now.
func (fs *flights) start(ref Ref, fingerprint []byte) *flight {
	f := &flight{fingerprint: fingerprint, done: make(chan struct{})}
	fs.m.Store(ref, f)
	return f
}

// finish ends f, once its claim is settled (committed and cached, or
// released): its waiters look again.
func (fs *flights) finish(ref Ref, f *flight) {
	fs.m.CompareAndDelete(ref, f) // a takeover may have registered another
	close(f.done)
}

// get returns the delivery of ref in flight here, or nil. A nil *flights
// (no screen) has none.
func (fs *flights) get(ref Ref) *flight {
	if fs == nil {
		return nil
	}
	if v, ok := fs.m.Load(ref); ok {
		return v.(*flight)
	}
	return nil
}
