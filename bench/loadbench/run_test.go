package loadbench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// -systems keeps the systems it names, in the fleet's order; a name no
// system has (a typo, N0 where nginx is missing) fails the run instead of
// leaving that system, and every goal it is part of, silently out.
func TestSelectSystems(t *testing.T) {
	all := func() []*system { return []*system{{name: "U0"}, {name: "B1"}, {name: "B2"}, {name: "F1r"}} }
	got, err := selectSystems(all(), nil)
	if err != nil || !slices.Equal(systemNames(got), []string{"U0", "B1", "B2", "F1r"}) {
		t.Errorf("no -systems: %v, %v; want every system", systemNames(got), err)
	}
	got, err = selectSystems(all(), []string{"F1r", "B2"})
	if err != nil || !slices.Equal(systemNames(got), []string{"B2", "F1r"}) {
		t.Errorf("-systems F1r,B2: %v, %v; want B2 F1r", systemNames(got), err)
	}
	_, err = selectSystems(all(), []string{"B2", "N0", "F1x"})
	if err == nil || !strings.Contains(err.Error(), "N0, F1x") {
		t.Errorf("-systems B2,N0,F1x: error %v, want one naming N0 and F1x", err)
	}
}

// A system's process that exits during the run ends it with an error at
// the next cell, instead of the rounds measuring its refusals to the end.
func TestRoundsStopWhenAChildDies(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "child.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho ready 127.0.0.1:1 127.0.0.1:2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := StartChild(context.Background(), exe, dir, "dies", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if exited, _ := c.Exited(); exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := &run{o: Options{Rounds: 2, Concurrency: []int{1}, Cell: 10 * time.Millisecond, Log: io.Discard}, kids: []*Child{c}, order: newRand(1)}
	s := &system{name: "X", doer: nopDoer{}, child: c, closed: map[int]*agg{}}
	var seed seeds
	err = r.closedRounds(context.Background(), []*system{s}, &seed)
	if err == nil || !strings.Contains(err.Error(), "dies") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("closed rounds with a dead child: error %v, want one naming it and its exit", err)
	}
	if n := len(s.closed[1].rounds); n != 1 {
		t.Errorf("%d cells measured, want the rounds to stop after the first", n)
	}
	r.o.OpenRate, r.o.OpenDur, r.o.OpenWorkers = 1000, 20*time.Millisecond, 1
	if err := r.openRounds(context.Background(), []*system{s}, &seed); err == nil {
		t.Error("open rounds with a dead child: no error")
	}
}

// orderDoer notes its name when a cell starts (makes its workers).
type orderDoer struct {
	name string
	log  *[]string
}

func (d orderDoer) NewWorker(uint64) Worker {
	*d.log = append(*d.log, d.name)
	return nopDoer{}
}

// Each pass of the closed and open rounds visits every system once, in an
// order that varies so that no system always follows the same one (and
// inherits its leftovers); the same seed gives the same orders again.
func TestRoundsShuffleTheOrderOfEachPass(t *testing.T) {
	const n, rounds = 5, 8
	visits := func(seed uint64) (closed, open []string) {
		var log []string
		var systems []*system
		for i := range n {
			systems = append(systems, &system{name: string(rune('A' + i)), doer: orderDoer{string(rune('A' + i)), &log}, closed: map[int]*agg{}})
		}
		r := &run{o: Options{Rounds: rounds, Concurrency: []int{1}, Cell: time.Millisecond, OpenRate: 1000, OpenDur: rounds * 2 * time.Millisecond,
			OpenWorkers: 1, Log: io.Discard}, order: newRand(seed)}
		var cells seeds
		if err := r.closedRounds(context.Background(), systems, &cells); err != nil {
			t.Fatal(err)
		}
		closed, log = log, nil
		if err := r.openRounds(context.Background(), systems, &cells); err != nil {
			t.Fatal(err)
		}
		return closed, log
	}
	closed, open := visits(7)
	for loop, v := range map[string][]string{"closed": closed, "open": open} {
		if len(v) != n*rounds {
			t.Fatalf("%s: %d cells, want %d", loop, len(v), n*rounds)
		}
		before := map[string]map[string]bool{}
		for p := 0; p < len(v); p += n {
			pass := slices.Clone(v[p : p+n])
			for i := 1; i < n; i++ {
				if before[pass[i]] == nil {
					before[pass[i]] = map[string]bool{}
				}
				before[pass[i]][pass[i-1]] = true
			}
			slices.Sort(pass)
			if got := strings.Join(pass, ""); got != "ABCDE" {
				t.Errorf("%s: a pass visited %s, want each system once", loop, got)
			}
		}
		for s, prev := range before {
			if len(prev) < 2 {
				t.Errorf("%s: %s always followed %v in %d passes", loop, s, prev, rounds)
			}
		}
	}
	if again, _ := visits(7); !slices.Equal(again, closed) {
		t.Errorf("seed 7 gave %v, then %v", closed, again)
	}
}

// countDrain is a drainer that delivers 100 each time it is asked.
type countDrain struct{ calls int }

func (d *countDrain) measure(context.Context) (drainAgg, error) {
	d.calls++
	return drainAgg{delivered: 100, elapsed: 100 * time.Millisecond}, nil
}

// A1's queue is drained after each of its open-loop slices as after its
// closed-loop cells, not left to be delivered during the next system's
// slice; the open-loop result shows the drain.
func TestOpenRoundsDrainAfterEachSlice(t *testing.T) {
	d := &countDrain{}
	s := &system{name: asyncSystem, doer: nopDoer{}, drain: d, closed: map[int]*agg{}}
	r := &run{o: Options{Rounds: 3, OpenRate: 1000, OpenDur: 30 * time.Millisecond, OpenWorkers: 1, Log: io.Discard}, order: newRand(1)}
	var cells seeds
	if err := r.openRounds(context.Background(), []*system{s, {name: "L1", doer: nopDoer{}}}, &cells); err != nil {
		t.Fatal(err)
	}
	if d.calls != 3 {
		t.Errorf("A1 drained %d times in 3 open-loop rounds, want 3", d.calls)
	}
	rep := &Report{Settings: Settings{OpenRate: 1000}}
	rep.addSystem(s)
	x := rep.find(asyncSystem, "open", 0)
	if x == nil || x.Drain == nil || x.Drain.Delivered != 300 {
		t.Fatalf("A1 open-loop result %+v, want a drain of 300 deliveries", x)
	}
	var out strings.Builder
	rep.printDrains(&out)
	if want := "A1 drain after the open-loop slices: 1000 deliveries/s"; !strings.Contains(out.String(), want) {
		t.Errorf("drains printed %q, want %q", out.String(), want)
	}
}
