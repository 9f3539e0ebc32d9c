package loadbench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// sleepDoer answers every operation after a fixed latency and counts the
// operations it has completed.
type sleepDoer struct {
	latency time.Duration
	done    atomic.Uint64
}

func (d *sleepDoer) NewWorker(uint64) Worker { return sleepWorker{d} }

type sleepWorker struct{ d *sleepDoer }

func (w sleepWorker) Do(context.Context) (string, bool) {
	time.Sleep(w.d.latency)
	w.d.done.Add(1)
	return "", true
}

// countWindow snapshots the doer's completions at the window's edges.
type countWindow struct {
	d      *sleepDoer
	c0, c1 uint64
}

func (w *countWindow) Begin() { w.c0 = w.d.done.Load() }
func (w *countWindow) End()   { w.c1 = w.d.done.Load() }

// A closed-loop cell counts every operation completed in its window (what
// Cell.Requests says, and what the window's CPU time is divided by),
// including those started during the warmup: leaving out the conc
// operations in flight when the window opens would understate throughput
// by latency/window — more for slower systems.
func TestClosedLoopCountsCompletionsInWindow(t *testing.T) {
	d := &sleepDoer{latency: 25 * time.Millisecond}
	const conc = 40
	w := &countWindow{d: d}
	cell := ClosedLoop(context.Background(), d, conc, 100*time.Millisecond, 500*time.Millisecond, 1, w)
	completed := w.c1 - w.c0
	diff := int64(completed) - int64(cell.Requests)
	if diff < -3 || diff > 3 {
		t.Errorf("cell counted %d operations, %d completed in its window (%.1f%% off); throughput %.0f/s",
			cell.Requests, completed, 100*float64(diff)/float64(completed), cell.Throughput())
	}
	if cell.Hist.Count() != cell.Requests {
		t.Errorf("histogram holds %d latencies for %d operations", cell.Hist.Count(), cell.Requests)
	}
}

type nopDoer struct{}

func (nopDoer) NewWorker(uint64) Worker { return nopDoer{} }

func (nopDoer) Do(context.Context) (string, bool) { return "", true }

type nopWindow struct{}

func (nopWindow) Begin() {}
func (nopWindow) End()   {}

// The open loop charges each request from its due time; its own lateness
// in sending at that time must be small against the latencies it
// measures (a cached repeat or a proxy hop: ~0.5–1 ms on loopback). A
// system that answers at once must come out with a median near zero.
func TestOpenLoopAddsLittleLatencyOfItsOwn(t *testing.T) {
	c := OpenLoop(context.Background(), nopDoer{}, 1000, 64, 200*time.Millisecond, time.Second, 1, nopWindow{})
	if c.Requests != 1000 || c.Errors != 0 {
		t.Fatalf("requests %d errors %d, want 1000 and 0", c.Requests, c.Errors)
	}
	if p50 := c.Hist.Quantile(0.5); p50 > 200*time.Microsecond {
		t.Errorf("a no-op system measured p50 %v (p99 %v): the generator's own lateness", p50, c.Hist.Quantile(0.99))
	}
	t.Logf("no-op system: p50 %v p99 %v", c.Hist.Quantile(0.5), c.Hist.Quantile(0.99))
}

// Host CPU is what the machine's processes used: user, nice, system, irq,
// softirq. Not steal (the hypervisor ran another guest: nothing here
// used it), nor guest and guest_nice (already counted in user and nice).
func TestHostCPUCountsOnlyThisMachinesWork(t *testing.T) {
	stat := []byte("cpu  1000 20 300 5000 40 5 6 700 80 9\ncpu0 500 10 150 2500 20 2 3 350 40 4\n")
	got, err := parseHostCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Duration(1000+20+300+5+6) * clockTick; got != want {
		t.Errorf("host CPU %v, want %v (user+nice+system+irq+softirq)", got, want)
	}
}

// An open-loop cell's throughput is what the system answered, over the
// span from the first due time to the last answer: one that cannot keep
// up with the offered rate reads its own rate, not the offered one; one
// that keeps up reads the offered rate.
func TestOpenLoopThroughputIsWhatWasAnswered(t *testing.T) {
	slow := &sleepDoer{latency: 20 * time.Millisecond} // 2 workers: 100/s at most
	c := OpenLoop(context.Background(), slow, 1000, 2, 0, 100*time.Millisecond, 1, nopWindow{})
	if c.Requests != 100 {
		t.Fatalf("requests %d, want the 100 offered", c.Requests)
	}
	if tp := c.Throughput(); tp < 70 || tp > 110 {
		t.Errorf("a system answering 100/s at most, offered 1000/s: throughput %.0f/s (over %v)", tp, c.Elapsed)
	}
	c = OpenLoop(context.Background(), nopDoer{}, 1000, 4, 0, 500*time.Millisecond, 1, nopWindow{})
	if tp := c.Throughput(); tp < 950 || tp > 1000 {
		t.Errorf("a system keeping up with 1000/s: throughput %.0f/s (%d over %v)", tp, c.Requests, c.Elapsed)
	}
}
