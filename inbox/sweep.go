package inbox

import (
	"context"
	"fmt"
	"time"
)

// sweepBatch bounds the rows one DELETE removes, so that a sweep after a
// long pause never holds a long lock.
const sweepBatch = 1000

// Sweep deletes this consumer's keys whose retention has passed and returns
// how many it deleted. A repeat of a deleted key runs again.
func (in *Inbox) Sweep(ctx context.Context) (int64, error) {
	stmt := in.d.sweepSQL(in.o.Table, in.quote)
	var total int64
	for {
		now := in.o.Now().UTC().Truncate(time.Microsecond)
		res := in.db.WithContext(ctx).Exec(stmt, in.o.Consumer, now, sweepBatch)
		if res.Error != nil {
			return total, fmt.Errorf("inbox: sweep %s: %w", in.o.Table, res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < sweepBatch {
			return total, nil
		}
	}
}

// DefaultSweepInterval is how often RunSweeper sweeps when given no
// interval.
const DefaultSweepInterval = time.Hour

// RunSweeper sweeps every interval until ctx is done. An interval of zero
// or less means DefaultSweepInterval; a negative one is also logged, as
// the mistake it likely is. A failed sweep is logged (Options.Logger) and
// tried again at the next tick.
func (in *Inbox) RunSweeper(ctx context.Context, every time.Duration) {
	if every < 0 {
		in.o.Logger.Warn("inbox sweep interval negative; using the default",
			"table", in.o.Table, "interval", every, "default", DefaultSweepInterval)
	}
	if every <= 0 {
		every = DefaultSweepInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := in.Sweep(ctx); err != nil && ctx.Err() == nil {
			in.o.Logger.Error("inbox sweep failed", "table", in.o.Table, "err", err)
		} else if n > 0 {
			in.o.Logger.Debug("inbox swept expired keys", "table", in.o.Table, "deleted", n)
		}
	}
}
