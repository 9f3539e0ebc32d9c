package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/chaos"
)

func TestRunRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown fault", []string{"-faults", "redis_cut,meteor"}, `unknown fault "meteor"`},
		{"unknown flag", []string{"-bogus"}, "flag provided but not defined"},
		{"stray argument", []string{"now"}, "unexpected argument"},
		{"the race detector for a gateway built already", []string{"-race", "-gateway", "/nonexistent/gateway", "-q"}, "-race"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}

// The replay command a report prints runs the same options again.
func TestReplayCommandReplaysTheRun(t *testing.T) {
	for _, args := range [][]string{
		{"-seed", "7"},
		{"-seed", "7", "-async=false", "-drain", "30s"},
		{"-seed", "8", "-duration", "45s", "-faults", "redis_cut,postgres_slow", "-inbox", "-store-pass", "-race",
			"-senders", "6", "-think", "200ms", "-lease", "4s", "-timeout", "2s", "-max-hold", "1s", "-fault-spacing", "3s"},
		{"-seed", "9", "-soak", "-duration", "10m"},
		{"-seed", "10", "-faults", "none"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			o, err := parse(args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			cmd := (&chaos.Report{Seed: o.Seed, Duration: o.Duration, Options: o}).ReplayCommand()
			replay, ok := strings.CutPrefix(cmd, "go run ./cmd/chaos ")
			if !ok {
				t.Fatalf("replay command %q", cmd)
			}
			again, err := parse(strings.Fields(replay), io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			if !reflect.DeepEqual(again, o) {
				t.Errorf("%s runs\n%+v\nnot\n%+v", cmd, again, o)
			}
		})
	}
}
