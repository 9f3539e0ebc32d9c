package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// The Redis screen's entries are answers recorded in one ledger. Two
// deployments, each with a ledger of its own, sharing a Redis under one
// screen.prefix would replay each other's answers: Stripe sends the same
// event id to every endpoint of an account, and the second deployment's
// upstream would never get an event the first forwarded. So a gateway
// claims its prefix for its ledger: the key {prefix}deployment (no
// expiry) holds the ledger's deployment identity (sqlledger.Deployment),
// set with SET NX. Replicas share the ledger and so agree; a gateway of
// another ledger finds a different id and refuses to start (SPEC §5).

// MarkerKey is the Redis key that claims screen.prefix for one ledger.
func MarkerKey(prefix string) string { return prefix + "deployment" }

// DefaultPrefixCheck is how often a running gateway checks the marker,
// setting it again when Redis lost it (a flush, a restart without
// persistence, an eviction): a gateway of another ledger starting after
// that would otherwise find the prefix free.
const DefaultPrefixCheck = 10 * time.Second

// ErrPrefixTaken: screen.prefix is claimed by another deployment's
// ledger (errors.Is on the error New returns).
var ErrPrefixTaken = errors.New("screen.prefix is claimed by another deployment")

// prefixTaken is ErrPrefixTaken with what the operator needs: whose the
// marker is, and the two ways out.
type prefixTaken struct {
	prefix, key, holder, ours string
}

func (e *prefixTaken) Error() string {
	return fmt.Sprintf("%s: Redis key %q holds deployment %s, and this gateway's ledger is deployment %s. "+
		"Two deployments with ledgers of their own under one screen.prefix replay each other's answers: "+
		"an event one of them forwarded would never reach the other's upstream. "+
		"Give this deployment a screen.prefix of its own (screen.prefix %q is taken); "+
		"or, if this ledger replaced the one that wrote the key (its database was wiped or recreated), "+
		"delete the key (DEL %s)",
		ErrPrefixTaken, e.key, e.holder, e.ours, e.prefix, e.key)
}

func (e *prefixTaken) Is(target error) bool { return target == ErrPrefixTaken }

// ReadyText is what /readyz shows of it.
func (e *prefixTaken) ReadyText() string {
	return "screen.prefix is claimed by another deployment (key " + e.key + "): see the log"
}

// errUnclaimed: the prefix is not claimed yet, because the ledger or
// Redis has not answered since the gateway started.
var errUnclaimed = errors.New("screen.prefix not yet claimed for this deployment's ledger: the screen is not used until the ledger and Redis answer")

// guardState is what a gateway knows of its claim on the prefix.
type guardState int32

const (
	// guardPending: not claimed yet (Redis or the ledger did not
	// answer); the screen is not used.
	guardPending guardState = iota
	// guardClaimed: the marker names this ledger.
	guardClaimed
	// guardOff: the ledger has no identity (schema older than
	// hookstamp_meta): nothing is checked, as before (warned).
	guardOff
	// guardTaken: the marker names another ledger; the screen is not used.
	guardTaken
)

// prefixGuard claims screen.prefix for the ledger, and keeps the screen
// unused while the claim is not made or is another's.
type prefixGuard struct {
	client redis.UniversalClient
	ledger *sqlledger.Ledger
	prefix string
	key    string
	log    *slog.Logger

	mu    sync.Mutex // one claim at a time; guards id
	id    string     // the ledger's identity, once read
	state atomic.Int32
	taken atomic.Pointer[prefixTaken]
	// started: claimAtStart is over; a marker found taken from then on is
	// logged (before, New returns it).
	started atomic.Bool
}

// openPrefixGuard makes the guard of the Redis screen, with a client of
// its own: not the screen's, which is traced (a check every few seconds
// would fill traces with root spans) and whose pool the claims use.
func (g *Gateway) openPrefixGuard() error {
	ro := g.redisOptions()
	ro.PoolSize = 2
	c, err := redisscreen.NewClient(ro)
	if err != nil {
		return fmt.Errorf("screen.prefix guard: %w", err)
	}
	g.closers = append(g.closers, c.Close)
	g.guard = &prefixGuard{client: c, ledger: g.ledger, prefix: g.cfg.Screen.Prefix, key: MarkerKey(g.cfg.Screen.Prefix), log: g.log}
	return nil
}

// claimAtStart claims the prefix before the gateway serves: another
// deployment's marker refuses the start. A Redis or ledger that does not
// answer does not: the gateway starts as it did without the guard (not
// ready, the screen unavailable), and claims once they answer
// (watchPrefix).
func (p *prefixGuard) claimAtStart(ctx context.Context) error {
	err := p.claim(ctx)
	p.started.Store(true)
	if err != nil && !errors.Is(err, ErrPrefixTaken) {
		p.log.Warn("screen.prefix not yet claimed for this deployment's ledger: the screen is not used until it is; trying again",
			"prefix", p.prefix, "err", err)
		return nil
	}
	return err
}

// claim reads the ledger's identity (once) and claims the prefix for it:
// nil when the marker names this ledger (set now, or already) or the
// ledger has no identity; a *prefixTaken when it names another; an
// ErrUnavailable error when Redis or the ledger did not answer (the state
// is then left as it was).
func (p *prefixGuard) claim(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claimLocked(ctx)
}

func (p *prefixGuard) claimLocked(ctx context.Context) error {
	if p.id == "" {
		id, err := p.ledger.Deployment(ctx)
		if errors.Is(err, sqlledger.ErrNoDeployment) {
			if p.swap(guardOff) != guardOff {
				p.log.Warn("the ledger has no deployment identity (its schema predates hookstamp_meta: run gateway migrate): "+
					"nothing checks that another deployment does not share screen.prefix, whose answers this one would replay",
					"prefix", p.prefix, "err", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the ledger's deployment identity: %w", err)
		}
		p.id = id
	}
	var set *redis.BoolCmd
	var get *redis.StringCmd
	_, err := p.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		set = pipe.SetNX(ctx, p.key, p.id, 0)
		get = pipe.Get(ctx, p.key)
		return nil
	})
	if err != nil && set.Err() != nil && get.Err() == nil {
		// The marker may be read, not written (NOPERM; OOM with
		// maxmemory-policy noeviction): what it names decides.
		err = nil
	}
	if err != nil && redis.HasErrorPrefix(err, "NOPERM") {
		// An ACL user without the key: no worse than before the guard.
		if p.swap(guardOff) != guardOff {
			p.log.Warn("the Redis user may not write the screen.prefix marker: nothing checks that another deployment does not share screen.prefix, whose answers this one would replay",
				"key", p.key, "err", err)
		}
		return nil
	}
	if err != nil {
		// redis.Nil too: the marker was deleted between SET NX and GET.
		return fmt.Errorf("screen.prefix marker %s: %w: %w", p.key, idempotency.ErrUnavailable, err)
	}
	if holder := get.Val(); holder != p.id {
		e := &prefixTaken{prefix: p.prefix, key: p.key, holder: holder, ours: p.id}
		p.taken.Store(e)
		if p.swap(guardTaken) != guardTaken && p.started.Load() {
			// Found once serving: Redis came back after a start without
			// it, or another deployment started while the marker was
			// lost and serves beside this one.
			p.log.Error(e.Error() + ". Until then this gateway does not use the screen (screen.on_unavailable applies); it checks the key again every few seconds")
		}
		return e
	}
	switch p.swap(guardClaimed) {
	case guardClaimed:
		if set.Val() {
			p.log.Warn("the screen.prefix marker was gone from Redis (a flush, a restart without persistence, an eviction); set again",
				"key", p.key)
		}
	case guardPending:
		p.log.Info("screen.prefix claimed for this deployment's ledger", "key", p.key)
	case guardTaken:
		p.log.Warn("screen.prefix claimed for this deployment's ledger: the other deployment's marker is gone; the screen is used again", "key", p.key)
	}
	return nil
}

// swap sets the state and returns the one before.
func (p *prefixGuard) swap(s guardState) guardState { return guardState(p.state.Swap(int32(s))) }

// usable is checked before every screen call: nil once the prefix is
// claimed (or cannot be guarded); otherwise an ErrUnavailable error, so
// that the call applies screen.on_unavailable. While the claim is
// pending one caller at a time tries it, the others do not wait.
func (p *prefixGuard) usable(ctx context.Context) error {
	switch guardState(p.state.Load()) {
	case guardClaimed, guardOff:
		return nil
	case guardTaken:
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, p.taken.Load())
	}
	if p.mu.TryLock() {
		// Only once the ledger's identity is known: a ledger that does
		// not answer would hold this delivery for its timeout.
		err := errUnclaimed
		if p.id != "" {
			err = p.claimLocked(ctx)
		}
		p.mu.Unlock()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrPrefixTaken) {
			return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, errUnclaimed)
}

// ready is the guard's part of /readyz's screen check: a claim not made,
// or another deployment's, is tried again and reported.
func (p *prefixGuard) ready(ctx context.Context) error {
	switch guardState(p.state.Load()) {
	case guardClaimed, guardOff:
		return nil
	}
	return p.claim(ctx)
}

// watchPrefix claims the prefix until ctx ends: every DefaultPrefixCheck
// (or Options.PrefixCheck), setting the marker again when Redis lost it
// and noticing another deployment's; sooner, backing off, while the claim
// is pending.
func (g *Gateway) watchPrefix(ctx context.Context, every time.Duration) {
	p := g.guard
	wait, failing := 100*time.Millisecond, false
	for {
		if guardState(p.state.Load()) != guardPending {
			wait = every
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := p.claim(ctx)
		switch {
		case err == nil || errors.Is(err, ErrPrefixTaken) || ctx.Err() != nil:
			failing = false
		case !failing:
			failing = true
			g.log.Warn("screen.prefix marker not checked; trying again", "key", p.key, "err", err)
		default:
			g.log.Debug("screen.prefix marker not checked; trying again", "key", p.key, "err", err)
		}
		if guardState(p.state.Load()) == guardPending {
			wait = min(2*wait, 5*time.Second)
		}
	}
}

// guardedScreen is the engine's view of the Redis screen: each call first
// asks the guard whether the prefix is this deployment's.
type guardedScreen struct {
	s idempotency.Screen
	g *prefixGuard
}

var _ idempotency.Screen = guardedScreen{}

func (s guardedScreen) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	if err := s.g.usable(ctx); err != nil {
		return idempotency.Claim{}, err
	}
	return s.s.Claim(ctx, req)
}

func (s guardedScreen) Complete(ctx context.Context, ref idempotency.Ref, owner string, e *idempotency.Entry, ttl time.Duration) error {
	if err := s.g.usable(ctx); err != nil {
		return err
	}
	return s.s.Complete(ctx, ref, owner, e, ttl)
}

func (s guardedScreen) Release(ctx context.Context, ref idempotency.Ref, owner string) error {
	if err := s.g.usable(ctx); err != nil {
		return err
	}
	return s.s.Release(ctx, ref, owner)
}

func (s guardedScreen) Forget(ctx context.Context, ref idempotency.Ref) error {
	if err := s.g.usable(ctx); err != nil {
		return err
	}
	return s.s.Forget(ctx, ref)
}

func (s guardedScreen) ForgetDone(ctx context.Context, ref idempotency.Ref) error {
	if err := s.g.usable(ctx); err != nil {
		return err
	}
	return s.s.ForgetDone(ctx, ref)
}

func (s guardedScreen) Wait(ctx context.Context, ref idempotency.Ref, owner string) error {
	if err := s.g.usable(ctx); err != nil {
		return err
	}
	return s.s.Wait(ctx, ref, owner)
}

func (s guardedScreen) Peek(ctx context.Context, ref idempotency.Ref) (idempotency.Claim, bool, error) {
	if err := s.g.usable(ctx); err != nil {
		return idempotency.Claim{}, false, err
	}
	return s.s.Peek(ctx, ref)
}
