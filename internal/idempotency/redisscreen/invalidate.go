package redisscreen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// LocalCache is what Invalidations change in a replica's in-process cache;
// *idempotency.Cache is one.
type LocalCache interface {
	// Delete drops one key.
	Delete(ref idempotency.Ref)
	// Suspend empties the cache and keeps it empty until Resume.
	Suspend()
	// Resume clears the cache and lets it keep entries again.
	Resume()
}

// Invalidations carries operators' deletes to the in-process caches of
// every replica sharing the Redis screen, over one pub/sub channel
// ({prefix}invalidate). A message is the route name, NUL, and the key
// (route names never contain NUL).
//
// Pub/sub delivers at most once: a DELETE published while a replica's
// subscription is down is lost to it. So from the moment the subscription
// is found down until a (re)subscription is confirmed the replica's cache
// is off (LocalCache.Suspend: repeats read the screen or the ledger, which
// the DELETE did reach), every (re)subscription clears it, and cached
// entries expire anyway (idempotency.DefaultCacheMaxAge). A subscription
// whose connection hangs (a partition resets nothing) is found by a ping
// after a few silent seconds: with no pong within five more, the cache is
// turned off and a new subscription made.
type Invalidations struct {
	client  redis.UniversalClient
	channel string
	// silence is how long the subscription may stay quiet before a ping
	// (invalidationSilence), pongWait how long the pong may take (five
	// seconds).
	silence, pongWait time.Duration

	// The subscription (Subscribe): only a replica with a cache has one.
	mu     sync.Mutex // guards ps against Close
	ps     *redis.PubSub
	done   chan struct{}
	stop   chan struct{}
	closed atomic.Bool
	once   sync.Once
}

// NewInvalidations publishes and receives deletes on prefix's channel
// through client, which the caller keeps owning. Every replica publishes
// its deletes, whether or not it keeps a cache itself (one without may be
// the one serving the admin API); only replicas with a cache Subscribe.
func NewInvalidations(client redis.UniversalClient, prefix string) *Invalidations {
	return &Invalidations{client: client, channel: prefix + "invalidate"}
}

// invalidationSilence is how long the subscription stays quiet before it
// is pinged. A hung connection is found only by the missing pong, and until
// then the replica replays from its cache records that other replicas'
// DELETEs removed (the provider's redelivery answered, never forwarded):
// a few seconds, not a minute, for one PING per replica now and then.
const invalidationSilence = 5 * time.Second

// SubscribeWait bounds how long Subscribe waits for the first subscription.
const SubscribeWait = 2 * time.Second

// Subscribe clears keys from cache as other replicas publish their
// deletes, until Close. It returns once subscribed, or after SubscribeWait
// with the cache off until the subscription is made.
func (inv *Invalidations) Subscribe(cache LocalCache, log *slog.Logger) {
	if inv.silence <= 0 {
		inv.silence = invalidationSilence
	}
	if inv.pongWait <= 0 {
		inv.pongWait = 5 * time.Second
	}
	inv.done, inv.stop = make(chan struct{}), make(chan struct{})
	// Not subscribed yet: a delete published now would not reach us.
	cache.Suspend()
	r := &receiver{inv: inv, cache: cache, log: log, subscribed: make(chan struct{})}
	r.ps = inv.resubscribe(nil)
	go func() {
		defer close(inv.done)
		r.run()
	}()
	// Serve once subscribed, so that the first Clear comes before the
	// first delivery: one that began before a Clear cannot cache what it
	// reads or records (idempotency.Ticket), and repeats waiting for it
	// in-process would then each go to Redis. Bounded: with Redis down
	// the gateway serves anyway, and the cache is cleared once subscribed.
	select {
	case <-r.subscribed:
	case <-time.After(SubscribeWait):
		log.Warn("cache invalidations: not subscribed yet; serving anyway", "channel", inv.channel)
	}
}

// receiver is the subscription's receiving loop and its state.
type receiver struct {
	inv   *Invalidations
	cache LocalCache
	log   *slog.Logger

	ps     *redis.PubSub
	pinged bool
	// down: the operator was told the subscription is down, once an
	// outage. Not the cache's suspension: the cache is off from the start,
	// and a subscription refused then (an ACL user without the channel)
	// would never be logged, its cause with it.
	down       bool
	reloaded   time.Time // the cluster's layout last reloaded
	subscribed chan struct{}
	once       sync.Once
}

func (r *receiver) run() {
	inv := r.inv
	for {
		wait := inv.silence
		if r.pinged {
			wait = inv.pongWait
		}
		msg, err := r.ps.ReceiveTimeout(context.Background(), wait)
		if inv.closed.Load() {
			return
		}
		if err != nil {
			if !r.failed(err) {
				return
			}
			continue
		}
		r.pinged = false
		r.received(msg)
	}
}

// failed handles a receive that gave no message; false when Close ran.
func (r *receiver) failed(err error) bool {
	inv := r.inv
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	if r.pinged && timeout {
		// No pong: the connection hangs. Deletes published meanwhile are
		// lost to this replica, and will be until a new subscription is
		// confirmed.
		r.log.Warn("cache invalidations: the subscription does not answer; subscribing anew", "channel", inv.channel)
		r.cache.Suspend()
		r.down = true
		r.ps, r.pinged = inv.resubscribe(r.ps), false
		return true
	}
	if !timeout && !r.down {
		// A broken connection (go-redis reconnects and resubscribes on the
		// next receive), or a refused subscription: deletes cannot reach
		// this replica until a subscription is confirmed, so its cache
		// answers nothing meanwhile.
		r.log.Warn("cache invalidations: the subscription is down; the local cache is off until it is back",
			"channel", inv.channel, "err", err)
		r.cache.Suspend()
		r.down = true
	}
	var refused redis.Error
	if errors.As(err, &refused) {
		// Redis refused a command on the subscription (the SUBSCRIBE
		// itself: an ACL user without the channel, a busy script). go-redis
		// sends it again only on a new connection, so without a new
		// subscription the cache would stay off for as long as this one
		// lasts, long after the cause is gone (the ACL granted).
		if !inv.pause(inv.silence) {
			return false
		}
		r.ps, r.pinged = inv.resubscribe(r.ps), false
		return true
	}
	if cc, ok := inv.client.(*redis.ClusterClient); ok && !timeout && time.Since(r.reloaded) >= time.Second {
		// The node holding the subscription may be gone for good (failed
		// over): go-redis redials the slot's master it last knew, and
		// learns of the new one only at its periodic reload (a minute),
		// the cache off meanwhile.
		cc.ReloadState(context.Background())
		r.reloaded = time.Now()
	}
	// A silent spell, or a broken connection: make sure the connection
	// answers.
	r.pinged = r.ps.Ping(context.Background()) == nil
	return inv.pause(100 * time.Millisecond)
}

func (r *receiver) received(msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		// (Re)subscribed: deletes published while the subscription was
		// down were lost, so nothing cached before can be trusted.
		if m.Kind == "subscribe" {
			r.cache.Resume()
			r.down = false
			r.once.Do(func() { close(r.subscribed) })
		}
	case *redis.Message:
		route, key, ok := strings.Cut(m.Payload, "\x00")
		if !ok {
			r.log.Warn("ignored a malformed cache invalidation", "channel", r.inv.channel)
			return
		}
		r.cache.Delete(idempotency.Ref{Route: route, Key: key})
	}
}

// pause waits d; false when Close ran meanwhile.
func (inv *Invalidations) pause(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-inv.stop:
		return false
	}
}

// resubscribe closes old (if any) and subscribes anew. Subscribe does not
// fail when Redis is down: go-redis keeps reconnecting and resubscribing
// in the background.
func (inv *Invalidations) resubscribe(old *redis.PubSub) *redis.PubSub {
	if old != nil {
		_ = old.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps := inv.client.Subscribe(ctx, inv.channel)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.closed.Load() {
		_ = ps.Close() // Close ran meanwhile: the loop's next receive ends it
	}
	inv.ps = ps
	return ps
}

// Publish tells every subscribed replica to drop ref from its cache.
func (inv *Invalidations) Publish(ctx context.Context, ref idempotency.Ref) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := inv.client.Publish(ctx, inv.channel, ref.Route+"\x00"+ref.Key).Err(); err != nil {
		return fmt.Errorf("publish cache invalidation of %q: %w", ref.Key, err)
	}
	return nil
}

// Close ends the subscription, if any, and waits for its loop to stop.
// Close is idempotent; it leaves the client open.
func (inv *Invalidations) Close() error {
	var err error
	inv.once.Do(func() {
		inv.closed.Store(true)
		if inv.stop == nil {
			return // never subscribed
		}
		close(inv.stop)
		inv.mu.Lock()
		err = inv.ps.Close()
		inv.mu.Unlock()
		<-inv.done
	})
	return err
}
