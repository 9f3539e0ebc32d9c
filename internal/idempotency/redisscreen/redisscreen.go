// Package redisscreen is the shared idempotency.Screen on Redis
// (screen.driver: redis): claims made by any gateway replica are seen by
// all. One address is a single node; several are a Redis Cluster.
//
// Each entry is one hash changed only by Lua scripts (scripts.go), so every
// operation is atomic and one round trip. Waiting repeats learn of changes
// through one pub/sub subscription per Screen, with a poll as a safety net
// (wait.go). Every call is bounded by Options.OpTimeout, and every failure
// to get an answer wraps idempotency.ErrUnavailable.
package redisscreen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Options configure a Screen. Zero values take the defaults named.
type Options struct {
	// Addrs are host:port addresses (screen.redis.addrs): one is a single
	// node, several a Cluster's seeds. NewWithClient ignores them.
	Addrs    []string
	Username string
	Password string
	// DB is the database of a single node; a Cluster has only 0.
	DB int
	// TLS dials with TLS 1.2 or later, verifying the server against the
	// system roots; TLSConfig, when set, is used instead.
	TLS       bool
	TLSConfig *tls.Config
	// Prefix starts every key and the events channel (screen.prefix).
	Prefix string
	// MaxCachedBody is the largest body a done entry keeps
	// (screen.max_cached_body); a larger one keeps status and headers.
	MaxCachedBody int
	// OpTimeout bounds every call to Redis, dialling included (1s).
	OpTimeout time.Duration
	// PoolSize is the connection pool size per node; go-redis's default
	// (10 per CPU) when zero.
	PoolSize int
	// WaitPollMin and WaitPollMax bound Wait's doubling poll: 500ms and 2s
	// beside the subscription, 50ms and 1s with PollOnly.
	WaitPollMin time.Duration
	WaitPollMax time.Duration
	// PollOnly turns pub/sub off, for Redis proxies without it.
	PollOnly bool
}

// Screen is an idempotency.Screen on Redis. Its methods are safe for
// concurrent use.
type Screen struct {
	client    redis.UniversalClient
	ownClient bool
	prefix    string
	channel   string
	maxBody   int
	opTimeout time.Duration
	pollMin   time.Duration
	pollMax   time.Duration

	hub       *hub
	pipe      *pipeliner // Claim and Complete scripts (pipeline.go)
	closeOnce sync.Once
	closeErr  error

	helds atomic.Int64 // Wait's state checks, for tests
}

var _ idempotency.Screen = (*Screen)(nil)

// New connects to Redis as o says. It does not fail when Redis is down:
// calls fail with ErrUnavailable until it answers (Ping).
func New(o Options) (*Screen, error) {
	c, err := NewClient(o)
	if err != nil {
		return nil, err
	}
	s := newScreen(c, o)
	s.ownClient = true
	return s, nil
}

// NewClient makes a Redis client from o's connection fields (Addrs,
// Username, Password, DB, TLS, TLSConfig, PoolSize), every call bounded by
// o.OpTimeout. The caller closes it.
func NewClient(o Options) (redis.UniversalClient, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("redisscreen: no address")
	}
	if len(o.Addrs) > 1 && o.DB != 0 {
		return nil, fmt.Errorf("redisscreen: db %d: a Redis Cluster has database 0 only", o.DB)
	}
	timeout := opTimeout(o)
	uo := &redis.UniversalOptions{
		Addrs:                 o.Addrs,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              o.PoolSize,
		TLSConfig:             o.TLSConfig,
	}
	if o.TLS && uo.TLSConfig == nil {
		uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return redis.NewUniversalClient(uo), nil
}

// NewWithClient uses a client the caller made and keeps owning: Close
// leaves it open.
func NewWithClient(c redis.UniversalClient, o Options) *Screen {
	return newScreen(c, o)
}

func opTimeout(o Options) time.Duration {
	if o.OpTimeout > 0 {
		return o.OpTimeout
	}
	return time.Second
}

func newScreen(c redis.UniversalClient, o Options) *Screen {
	s := &Screen{
		client:    c,
		prefix:    o.Prefix,
		channel:   o.Prefix + "events",
		maxBody:   o.MaxCachedBody,
		opTimeout: opTimeout(o),
		pollMin:   o.WaitPollMin,
		pollMax:   o.WaitPollMax,
	}
	defMin, defMax := 500*time.Millisecond, 2*time.Second
	if o.PollOnly {
		defMin, defMax = 50*time.Millisecond, time.Second
	}
	if s.pollMin <= 0 {
		s.pollMin = defMin
	}
	if s.pollMax <= 0 {
		s.pollMax = defMax
	}
	s.pollMax = max(s.pollMax, s.pollMin)
	if !o.PollOnly {
		s.hub = startHub(c, s.channel, s.opTimeout)
	}
	s.pipe = newPipeliner(c, pipelineWorkers, pipelineMax, s.opTimeout)
	return s
}

// Client is the Redis client, e.g. for redisotel instrumentation.
func (s *Screen) Client() redis.UniversalClient { return s.client }

// Close ends the subscription and, unless the client came from
// NewWithClient, closes the client. Close is idempotent.
func (s *Screen) Close() error {
	s.closeOnce.Do(func() {
		if s.hub != nil {
			s.hub.close()
		}
		s.pipe.close()
		if s.ownClient {
			s.closeErr = s.client.Close()
		}
	})
	return s.closeErr
}

// Ping checks that Redis answers, every master of a Cluster, for /readyz.
func (s *Screen) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	var err error
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.client.Ping(ctx).Err()
		if err == nil && s.clusterNode(ctx) {
			return ErrClusterNode
		}
	}
	if err != nil {
		return fmt.Errorf("redisscreen: ping: %w: %w", idempotency.ErrUnavailable, err)
	}
	return nil
}

// ErrClusterNode is Ping's answer when the one configured address is a
// Cluster node, where keys on other nodes answer MOVED.
var ErrClusterNode = errors.New("redisscreen: screen.redis.addrs lists one address and it is a Redis Cluster node " +
	"(keys on the other nodes answer MOVED): list two or more of the cluster's nodes")

// clusterNode reports whether the single-node client's server has cluster
// mode on. An error (INFO refused by an ACL, say) counts as no.
func (s *Screen) clusterNode(ctx context.Context) bool {
	info, err := s.client.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

func (s *Screen) key(ref idempotency.Ref) string {
	return s.prefix + ref.Route + ":" + ref.Key
}

// fail wraps a Redis error: the screen gave no answer.
func fail(op string, ref idempotency.Ref, err error) error {
	return fmt.Errorf("redisscreen: %s %s %q: %w: %w", op, ref.Route, ref.Key, idempotency.ErrUnavailable, err)
}

// Claim takes the key for req.Owner or reports what holds it, in one
// script run (pipelined with concurrent calls).
func (s *Screen) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	if req.Lease <= 0 {
		return idempotency.Claim{}, fmt.Errorf("redisscreen: claim %s %q: lease %v is not positive", req.Route, req.Key, req.Lease)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	v, err := s.pipe.run(ctx, claimScript, []string{s.key(req.Ref)},
		s.channel, req.Owner, req.Fingerprint, millis(req.Lease))
	if err != nil {
		return idempotency.Claim{}, fail("claim", req.Ref, err)
	}
	res, ok := v.([]any)
	if !ok {
		return idempotency.Claim{}, fail("claim", req.Ref, fmt.Errorf("%w: claim reply %T", errCorrupt, v))
	}
	c, err := parseClaim(res)
	if err != nil {
		return idempotency.Claim{}, fail("claim", req.Ref, err)
	}
	return c, nil
}

// Peek reports what holds ref, without claiming it (idempotency.Screen),
// in one script run pipelined with concurrent calls.
func (s *Screen) Peek(ctx context.Context, ref idempotency.Ref) (idempotency.Claim, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	v, err := s.pipe.run(ctx, peekScript, []string{s.key(ref)})
	if err != nil {
		return idempotency.Claim{}, false, fail("peek", ref, err)
	}
	res, ok := v.([]any)
	if !ok {
		return idempotency.Claim{}, false, fail("peek", ref, fmt.Errorf("%w: peek reply %T", errCorrupt, v))
	}
	if len(res) == 0 {
		return idempotency.Claim{}, false, nil
	}
	c, err := parseClaim(res)
	if err != nil {
		return idempotency.Claim{}, false, fail("peek", ref, err)
	}
	return c, true, nil
}

// errReleasedClaim answers a claim that reached Redis after its owner had
// released it (see releaseScript); its caller has long given up on it.
var errReleasedClaim = errors.New("the claim was released before it reached Redis")

func parseClaim(res []any) (idempotency.Claim, error) {
	if len(res) == 0 {
		return idempotency.Claim{}, fmt.Errorf("%w: empty claim reply", errCorrupt)
	}
	status, _ := res[0].(int64)
	switch {
	case status == 1 && len(res) == 1:
		return idempotency.Claim{Status: idempotency.Acquired}, nil
	case status == 2 && len(res) == 1:
		return idempotency.Claim{Status: idempotency.TakenOver}, nil
	case status == 3 && len(res) == 4:
		owner, _ := res[1].(string)
		return idempotency.Claim{Status: idempotency.InFlight, Owner: owner, Fingerprint: bytesOf(res[2])}, nil
	case status == 4 && len(res) == 3:
		blob, _ := res[2].(string)
		e, err := decodeEntry(blob)
		if err != nil {
			return idempotency.Claim{}, err
		}
		e.Fingerprint = bytesOf(res[1])
		return idempotency.Claim{Status: idempotency.Done, Fingerprint: bytesOf(res[1]), Entry: e}, nil
	case status == 5 && len(res) == 1:
		return idempotency.Claim{}, errReleasedClaim
	}
	return idempotency.Claim{}, fmt.Errorf("%w: claim reply %v", errCorrupt, res)
}

// bytesOf is a bulk string reply as bytes; "" and nil are nil.
func bytesOf(v any) []byte {
	if s, _ := v.(string); s != "" {
		return []byte(s)
	}
	return nil
}

// Complete records e as done for ttl (idempotency.Screen).
func (s *Screen) Complete(ctx context.Context, ref idempotency.Ref, owner string, e *idempotency.Entry, ttl time.Duration) error {
	if e == nil {
		return fmt.Errorf("redisscreen: complete %s %q: nil entry", ref.Route, ref.Key)
	}
	if ttl <= 0 {
		return fmt.Errorf("redisscreen: complete %s %q: ttl %v is not positive", ref.Route, ref.Key, ttl)
	}
	blob := encodeEntry(make([]byte, 0, encodedSize(e)), e, len(e.Body) <= s.maxBody || e.Unrecorded)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	refillOwner := ""
	if e.Refill {
		refillOwner = owner
	}
	_, err := s.pipe.run(ctx, completeScript, []string{s.key(ref)},
		s.channel, millis(ttl), e.Fingerprint, blob, refillOwner)
	if err != nil {
		return fail("complete", ref, err)
	}
	return nil
}

// releaseTombstone is how long a release that found no entry refuses its
// owner's claim (releaseScript).
const releaseTombstone = time.Minute

// Release drops owner's in-flight entry (else ErrNotOwner), or refuses
// owner's claim for releaseTombstone when the key holds nothing.
func (s *Screen) Release(ctx context.Context, ref idempotency.Ref, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	n, err := releaseScript.Run(ctx, s.client, []string{s.key(ref)}, s.channel, owner, millis(releaseTombstone)).Int64()
	if err != nil {
		return fail("release", ref, err)
	}
	if n == 0 {
		return fmt.Errorf("redisscreen: release %s %q: %w", ref.Route, ref.Key, idempotency.ErrNotOwner)
	}
	return nil
}

// Forget deletes whatever the screen holds for ref.
func (s *Screen) Forget(ctx context.Context, ref idempotency.Ref) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := forgetScript.Run(ctx, s.client, []string{s.key(ref)}, s.channel, millis(idempotency.ForgetTombstone)).Err(); err != nil {
		return fail("forget", ref, err)
	}
	return nil
}

// ForgetDone deletes ref's done entry, if the screen holds one; a claim
// is left alone.
func (s *Screen) ForgetDone(ctx context.Context, ref idempotency.Ref) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := forgetDoneScript.Run(ctx, s.client, []string{s.key(ref)}).Err(); err != nil {
		return fail("forget done", ref, err)
	}
	return nil
}

// held returns how long owner's live claim on key has left, or 0 when
// owner holds none.
func (s *Screen) held(ctx context.Context, ref idempotency.Ref, key, owner string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	ms, err := heldScript.Run(ctx, s.client, []string{key}, owner).Int64()
	s.helds.Add(1)
	if err != nil {
		return 0, fail("wait", ref, err)
	}
	if ms <= 0 {
		return 0, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// millis is d in whole milliseconds for PEXPIRE, at least 1.
func millis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}
