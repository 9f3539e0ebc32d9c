package redisscreen

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Wait blocks until owner's in-flight entry for ref changes or passes its
// lease, or ctx is done; ErrUnavailable when Redis does not answer. It
// checks the entry after registering for notifications, so a change before
// the Wait is not missed, and again on every wake-up: a message for the
// key, a resubscription (messages may have been lost), the lease's end, or
// the poll.
func (s *Screen) Wait(ctx context.Context, ref idempotency.Ref, owner string) error {
	key := s.key(ref)
	var wake <-chan struct{}
	if s.hub != nil {
		w := s.hub.add(key)
		defer s.hub.remove(key, w)
		wake = w
	}
	poll := s.pollMin
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		left, err := s.held(ctx, ref, key, owner)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if left <= 0 {
			return nil
		}
		timer.Reset(min(poll, left))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-timer.C:
			poll = min(2*poll, s.pollMax)
		}
	}
}

// hub is the one subscription of a Screen, fanned out to the waiters of
// this process by Redis key.
type hub struct {
	ps   *redis.PubSub
	done chan struct{}
	// subscriptions counts (re)subscriptions confirmed by Redis.
	subscriptions atomic.Int64

	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

func startHub(c redis.UniversalClient, channel string, timeout time.Duration) *hub {
	// Subscribe keeps reconnecting while Redis is down.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h := &hub{
		ps:      c.Subscribe(ctx, channel),
		done:    make(chan struct{}),
		waiters: make(map[string][]chan struct{}),
	}
	msgs := h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go h.run(msgs)
	return h
}

func (h *hub) run(msgs <-chan any) {
	defer close(h.done)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Message:
			h.notify(m.Payload)
		case *redis.Subscription:
			// (Re)subscribed: anything published while the connection
			// was down is lost, so every waiter checks again.
			h.subscriptions.Add(1)
			h.notifyAll()
		}
	}
}

func (h *hub) close() {
	_ = h.ps.Close()
	<-h.done
}

func (h *hub) add(key string) chan struct{} {
	w := make(chan struct{}, 1)
	h.mu.Lock()
	h.waiters[key] = append(h.waiters[key], w)
	h.mu.Unlock()
	return w
}

func (h *hub) remove(key string, w chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[key]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			break
		}
	}
	if len(ws) == 0 {
		delete(h.waiters, key)
	} else {
		h.waiters[key] = ws
	}
}

func (h *hub) notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters[key] {
		poke(w)
	}
}

func (h *hub) notifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.waiters {
		for _, w := range ws {
			poke(w)
		}
	}
}

// poke wakes w without blocking; one pending wake-up is enough.
func poke(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// count is the number of waiters registered for key.
func (h *hub) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiters[key])
}
