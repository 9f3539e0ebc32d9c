package loadbench

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Worker performs one operation at a time: an HTTP delivery, a PostgreSQL
// INSERT, a Redis SET NX. Each load goroutine owns one.
type Worker interface {
	// Do performs one operation and reports its outcome label ("" when the
	// system has none) and whether it succeeded.
	Do(ctx context.Context) (outcome string, ok bool)
}

// Doer makes the workers of one system under test.
type Doer interface {
	NewWorker(seed uint64) Worker
}

// Cell is what one measurement window recorded.
type Cell struct {
	Requests uint64 // successful operations completed in the window
	Errors   uint64
	Elapsed  time.Duration
	Hist     Hist
	Outcomes map[string]uint64
}

// Throughput is successful operations per second.
func (c *Cell) Throughput() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Requests) / c.Elapsed.Seconds()
}

// record counts one operation that finished in the window.
func (c *Cell) record(outcome string, ok bool, latency time.Duration) {
	if !ok {
		c.Errors++
		return
	}
	c.Hist.Record(latency)
	c.Requests++
	if outcome != "" {
		c.Outcomes[outcome]++
	}
}

// sum is the workers' cells merged, over elapsed.
func sum(cells []*Cell, elapsed time.Duration) *Cell {
	total := &Cell{Elapsed: elapsed, Outcomes: map[string]uint64{}}
	for _, c := range cells {
		total.merge(c)
	}
	return total
}

func (c *Cell) merge(o *Cell) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.Hist.Merge(&o.Hist)
	if c.Outcomes == nil {
		c.Outcomes = map[string]uint64{}
	}
	for k, v := range o.Outcomes {
		c.Outcomes[k] += v
	}
}

// Phases of a run: workers record only while measuring.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// Window brackets the measured part of a run: the orchestrator samples
// /proc at its start and end.
type Window interface {
	Begin()
	End()
}

// ClosedLoop runs conc workers back to back (each sends its next request
// when the previous is answered) for warmup, then measures for dur.
func ClosedLoop(ctx context.Context, d Doer, conc int, warmup, dur time.Duration, seed uint64, win Window) *Cell {
	var phase atomic.Int32
	cells := make([]*Cell, conc)
	var wg sync.WaitGroup
	for i := range conc {
		cells[i] = &Cell{Outcomes: map[string]uint64{}}
		w := d.NewWorker(seed*1_000_003 + uint64(i))
		wg.Add(1)
		go func(c *Cell) {
			defer wg.Done()
			for ctx.Err() == nil {
				if phase.Load() == phaseStop {
					return
				}
				start := time.Now()
				outcome, ok := w.Do(ctx)
				// Count what completes in the window, whenever it
				// started: leaving out the conc operations in flight
				// when it opens would understate throughput (and
				// overstate CPU per request) by latency/window.
				if phase.Load() == phaseMeasure {
					c.record(outcome, ok, time.Since(start))
				}
			}
		}(cells[i])
	}
	sleepCtx(ctx, warmup)
	win.Begin()
	t0 := time.Now()
	phase.Store(phaseMeasure)
	sleepCtx(ctx, dur)
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	win.End()
	wg.Wait()
	return sum(cells, elapsed)
}

// OpenLoop sends at a fixed rate whatever the answers do, and measures
// each request's latency from the moment it was due to be sent, not from
// when a free worker got to it: a stall delays every request scheduled
// during it, and each of them is charged the wait (no coordinated
// omission). workers bounds the requests in flight; requests due while
// all are busy queue, their latency growing. The cell's throughput is the
// requests answered over the span from the first measured one's due time
// to the last answer (at least dur): a system that keeps up reads the
// offered rate, one that falls behind what it managed.
func OpenLoop(ctx context.Context, d Doer, rate float64, workers int, warmup, dur time.Duration, seed uint64, win Window) *Cell {
	type job struct {
		due     time.Time
		measure bool
	}
	jobs := make(chan job, int(rate*(warmup+dur).Seconds())+16)
	cells := make([]*Cell, workers)
	last := make([]time.Time, workers) // each worker's last measured answer
	var wg sync.WaitGroup
	for i := range workers {
		cells[i] = &Cell{Outcomes: map[string]uint64{}}
		w := d.NewWorker(seed*1_000_003 + uint64(i))
		wg.Add(1)
		go func(c *Cell, last *time.Time) {
			defer wg.Done()
			clock := newDueClock()
			defer clock.close()
			for j := range jobs {
				clock.sleepUntil(j.due)
				outcome, ok := w.Do(ctx)
				if j.measure {
					now := time.Now()
					c.record(outcome, ok, now.Sub(j.due))
					*last = now
				}
			}
		}(cells[i], &last[i])
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	nWarm := int(warmup / interval)
	nAll := nWarm + int(dur/interval)
	began := false
	for i := 0; i < nAll && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if i == nWarm && !began {
			sleepCtx(ctx, time.Until(due))
			win.Begin()
			began = true
		}
		// Hand the job over early; the worker waits for its due time.
		// The dispatcher never waits for a worker: the channel holds the
		// whole schedule.
		if ahead := time.Until(due) - 2*time.Millisecond; ahead > 0 {
			time.Sleep(ahead)
		}
		jobs <- job{due: due, measure: i >= nWarm}
	}
	close(jobs)
	wg.Wait()
	if !began {
		win.Begin()
	}
	win.End()
	first := start.Add(time.Duration(nWarm) * interval)
	end := first.Add(dur)
	for _, t := range last {
		if t.After(end) {
			end = t
		}
	}
	return sum(cells, end.Sub(first))
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// newRand gives each worker its own generator.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
