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
	r := &run{o: Options{Rounds: 2, Concurrency: []int{1}, Cell: 10 * time.Millisecond, Log: io.Discard}, kids: []*Child{c}}
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
