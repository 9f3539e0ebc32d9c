package redisscreen

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeliner sends the scripts of concurrent Claim and Complete calls in one
// pipeline; each still runs on its own, atomically. A worker takes
// whatever is queued when it is free, so a lone call is never delayed.
type pipeliner struct {
	client  redis.UniversalClient
	jobs    chan *scriptCall
	max     int
	timeout time.Duration // bounds a batch (the screen's OpTimeout)
	// bundling runs a batch's calls of one script as one bundle: on a
	// single node, not on a Cluster, whose keys lie in many slots.
	bundling bool
	stop     chan struct{}
	stopped  sync.Once
	wg       sync.WaitGroup
}

type scriptCall struct {
	ctx    context.Context // the caller's (bounded by OpTimeout)
	script *redis.Script
	keys   []string
	args   []any
	done   chan scriptResult // buffered: a worker never blocks on a caller that left
}

type scriptResult struct {
	val any
	err error
}

// Pipelining defaults: with more than one batch in flight, batches do not
// form.
const (
	pipelineWorkers = 1
	pipelineMax     = 64
)

var errScreenClosed = errors.New("screen closed")

func newPipeliner(c redis.UniversalClient, workers, max int, timeout time.Duration) *pipeliner {
	_, cluster := c.(*redis.ClusterClient)
	p := &pipeliner{client: c, jobs: make(chan *scriptCall, workers*max), max: max, timeout: timeout, stop: make(chan struct{}), bundling: !cluster}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// run runs script on keys and args, in a pipeline with concurrent calls,
// and returns its reply. If ctx ends first the script may still run, as an
// unanswered command may: callers treat that as Redis not answering.
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	c := &scriptCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan scriptResult, 1)}
	select {
	case p.jobs <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stop:
		return nil, errScreenClosed
	}
	select {
	case r := <-c.done:
		return r.val, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipeliner) work() {
	defer p.wg.Done()
	batch := make([]*scriptCall, 0, p.max)
	for {
		batch = batch[:0]
		select {
		case c := <-p.jobs:
			batch = p.join(batch, c)
		case <-p.stop:
			for {
				select {
				case c := <-p.jobs:
					c.done <- scriptResult{err: errScreenClosed}
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < p.max {
			select {
			case c := <-p.jobs:
				batch = p.join(batch, c)
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			p.send(batch)
		}
	}
}

// join adds c to batch unless its caller has gone: a claim nobody knows it
// holds makes every repeat wait for the lease.
func (p *pipeliner) join(batch []*scriptCall, c *scriptCall) []*scriptCall {
	if err := c.ctx.Err(); err != nil {
		c.done <- scriptResult{err: err}
		return batch
	}
	return append(batch, c)
}

// send runs one batch with the first caller's values but not its
// cancellation (one caller leaving must not fail the others' scripts),
// within the screen's operation timeout: the calls of one script in one
// bundle when the client allows it (bundle.go), each on its own otherwise.
func (p *pipeliner) send(batch []*scriptCall) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), p.timeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		v, err := c.script.Run(ctx, p.client, c.keys, c.args...).Result()
		c.done <- scriptResult{v, err}
		return
	}
	units := p.units(batch)
	pipe := p.client.Pipeline()
	cmds := make([]*redis.Cmd, len(units))
	for i, u := range units {
		cmds[i] = u.evalSha(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, u := range units {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Redis lost its script cache (restart, SCRIPT FLUSH): send the
			// script itself, once, as Script.Run does.
			v, err = u.eval(ctx, p.client)
		}
		u.finish(ctx, p.client, v, err)
	}
}

// unit is one script run of a batch: one call, or a bundle of calls.
type unit struct {
	calls  []*scriptCall
	bundle *bundle // nil: calls[0] alone
}

// units groups batch by script, in the order each script first appears;
// without bundling every call is a unit.
func (p *pipeliner) units(batch []*scriptCall) []*unit {
	units := make([]*unit, 0, len(batch))
	var open map[*redis.Script]*unit
	for _, c := range batch {
		b := bundles[c.script]
		if !p.bundling || b == nil || len(c.keys) != 1 || len(c.args) != b.nargs {
			units = append(units, &unit{calls: []*scriptCall{c}})
			continue
		}
		if u := open[c.script]; u != nil {
			u.calls = append(u.calls, c)
			continue
		}
		u := &unit{calls: []*scriptCall{c}, bundle: b}
		if open == nil {
			open = map[*redis.Script]*unit{}
		}
		open[c.script] = u
		units = append(units, u)
	}
	return units
}

func (u *unit) evalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	if u.bundle == nil || len(u.calls) == 1 {
		c := u.calls[0]
		return c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	keys, args := u.bundle.args(u.calls)
	return u.bundle.script.EvalSha(ctx, pipe, keys, args...)
}

func (u *unit) eval(ctx context.Context, client redis.UniversalClient) (any, error) {
	if u.bundle == nil || len(u.calls) == 1 {
		c := u.calls[0]
		return c.script.Eval(ctx, client, c.keys, c.args...).Result()
	}
	keys, args := u.bundle.args(u.calls)
	return u.bundle.script.Eval(ctx, client, keys, args...).Result()
}

// finish answers the unit's callers. A bundle Redis refused as a whole (a
// key of the wrong type makes its script raise) is run again call by call,
// so that one key's fault is not every caller's: safe, as a claim run again
// by its owner is granted again and a done entry stays done. A bundle that
// got no answer fails each caller, as a lone script would.
func (u *unit) finish(ctx context.Context, client redis.UniversalClient, v any, err error) {
	if u.bundle == nil || len(u.calls) == 1 {
		u.calls[0].done <- scriptResult{v, err}
		return
	}
	if err == nil {
		err = u.bundle.split(u.calls, v)
		if err == nil {
			return
		}
	}
	var refused redis.Error
	if !errors.As(err, &refused) && !errors.Is(err, errCorrupt) {
		for _, c := range u.calls {
			c.done <- scriptResult{err: err}
		}
		return
	}
	for _, c := range u.calls {
		v, err := c.script.Run(ctx, client, c.keys, c.args...).Result()
		c.done <- scriptResult{v, err}
	}
}

func (p *pipeliner) close() {
	p.stopped.Do(func() { close(p.stop) })
	p.wg.Wait()
}
