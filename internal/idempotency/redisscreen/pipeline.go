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
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
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
	p := &pipeliner{client: c, jobs: make(chan *scriptCall, workers*max), max: max, timeout: timeout, stop: make(chan struct{})}
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
// within the screen's operation timeout.
func (p *pipeliner) send(batch []*scriptCall) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), p.timeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		v, err := c.script.Run(ctx, p.client, c.keys, c.args...).Result()
		c.done <- scriptResult{v, err}
		return
	}
	pipe := p.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, c := range batch {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Redis lost its script cache (restart, SCRIPT FLUSH): send the
			// script itself, once, as Script.Run does.
			v, err = c.script.Eval(ctx, p.client, c.keys, c.args...).Result()
		}
		c.done <- scriptResult{v, err}
	}
}

func (p *pipeliner) close() {
	p.stopped.Do(func() { close(p.stop) })
	p.wg.Wait()
}
