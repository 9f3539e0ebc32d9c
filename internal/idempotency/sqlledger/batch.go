package sqlledger

import (
	"context"
	"fmt"
	"sync"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// committer is group commit: concurrent Commit calls are queued and written
// by a few workers, each batch in ONE transaction, so that a burst of
// deliveries pays for one durable commit (one fsync, one transaction's
// overhead) instead of one each.
//
// Durability is unchanged: a caller's Commit returns only after the
// transaction holding its row has committed, and each row keeps its own
// result (a row that lost to another owner gets ErrNotOwner; the others
// still commit). Batches form naturally — a worker takes whatever is queued
// when it is free — so a lone commit is never delayed to wait for company.
type committer struct {
	l       *Ledger
	jobs    chan *commitJob
	max     int
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

type commitJob struct {
	ctx  context.Context // the caller's, for its trace; never for cancellation
	ref  idempotency.Ref
	args []any
	done chan error // buffered: a worker never blocks on a caller that left
}

func newCommitter(l *Ledger, workers, max int) *committer {
	c := &committer{l: l, jobs: make(chan *commitJob, workers*max), max: max, stop: make(chan struct{})}
	for range workers {
		c.wg.Add(1)
		go c.work()
	}
	return c
}

// submit queues a commit and waits for its transaction.
func (c *committer) submit(ctx context.Context, j *commitJob) error {
	j.done = make(chan error, 1)
	select {
	case c.jobs <- j:
	case <-ctx.Done():
		return c.l.fail(fmt.Sprintf("commit %s: queue", ref(j.ref)), ctx.Err())
	case <-c.stop:
		return c.l.check()
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		// The row may still commit; the caller treats this as a commit
		// failure, which is safe: the record it would have written exists
		// or does not, and repeats are answered from whichever it is.
		return c.l.fail(fmt.Sprintf("commit %s: wait", ref(j.ref)), ctx.Err())
	}
}

func (c *committer) work() {
	defer c.wg.Done()
	batch := make([]*commitJob, 0, c.max)
	for {
		batch = batch[:0]
		select {
		case j := <-c.jobs:
			batch = append(batch, j)
		case <-c.stop:
			c.drain()
			return
		}
	fill:
		for len(batch) < c.max {
			select {
			case j := <-c.jobs:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		c.run(batch)
	}
}

// run writes one batch. Statements run in order inside the transaction, so
// two commits of the same key in one batch behave as they would one after
// the other: the second finds a done row and gets ErrNotOwner.
func (c *committer) run(batch []*commitJob) {
	// The statements run under the first caller's trace (a batch has one
	// transaction; its spans can hang under one delivery's commit span),
	// bounded by the ledger's own timeout rather than any caller's.
	ctx, cancel := c.l.op(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	if len(batch) == 1 {
		batch[0].done <- c.l.execCommit(ctx, batch[0].ref, batch[0].args)
		return
	}
	results := make([]error, len(batch))
	err := c.l.w.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i, j := range batch {
			res := tx.Exec(commitSQL, j.args...)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				results[i] = fmt.Errorf("commit %s: %w", ref(j.ref), idempotency.ErrNotOwner)
			}
		}
		return nil
	})
	switch {
	case err == nil:
		for i, j := range batch {
			j.done <- results[i]
		}
	case c.l.unavailable(err):
		for _, j := range batch {
			j.done <- c.l.fail(fmt.Sprintf("commit %s", ref(j.ref)), err)
		}
	default:
		// One row the database refused must not fail the others: commit
		// them one by one.
		for _, j := range batch {
			jctx, jcancel := c.l.op(context.WithoutCancel(j.ctx))
			j.done <- c.l.execCommit(jctx, j.ref, j.args)
			jcancel()
		}
	}
}

// drain fails what is still queued at Close.
func (c *committer) drain() {
	for {
		select {
		case j := <-c.jobs:
			j.done <- c.l.check()
		default:
			return
		}
	}
}

func (c *committer) close() {
	c.stopped.Do(func() { close(c.stop) })
	c.wg.Wait()
}
