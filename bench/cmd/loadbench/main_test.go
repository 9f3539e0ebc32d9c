package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookstamp/hookstamp/bench/loadbench"
)

// A failed run exits non-zero and leaves the last good run's latest.json
// as it was, its own report going to failed-run.json; a run that passes
// writes latest.json and removes a failed run's file left from before.
func TestAFailedRunLeavesLatestJSONAlone(t *testing.T) {
	out := t.TempDir()
	latest, failed := filepath.Join(out, "latest.json"), filepath.Join(out, failedJSON)
	if err := os.WriteFile(latest, []byte("the last good run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := &loadbench.Report{Mode: "quick", Failures: []string{"F1r closed c=64: no request answered (15000 errors)"}}
	if code := write(rep, errors.New("the run failed"), out, io.Discard, io.Discard); code == 0 {
		t.Error("a failed run exits 0")
	}
	if b, _ := os.ReadFile(latest); string(b) != "the last good run\n" {
		t.Errorf("latest.json after a failed run: %q", b)
	}
	if _, err := os.Stat(failed); err != nil {
		t.Errorf("no %s after a failed run: %v", failedJSON, err)
	}

	if code := write(&loadbench.Report{Mode: "quick", GeneratedAt: "2026-12-07T08:00:00Z"}, nil, out, io.Discard, io.Discard); code != 0 {
		t.Errorf("a run that passed exits %d", code)
	}
	if b, _ := os.ReadFile(latest); string(b) == "the last good run\n" {
		t.Error("a run that passed left latest.json as it was")
	}
	if _, err := os.Stat(failed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after a run that passed: %v", failedJSON, err)
	}
}
