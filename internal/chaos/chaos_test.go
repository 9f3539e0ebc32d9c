package chaos_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/chaos"
)

// TestChaosShort runs a short schedule of the chaos harness — the real
// gateway binary three times, a Redis and a PostgreSQL database of its
// own behind fault-injecting proxies, one fault of each family — and fails
// on any violation of exactly-once. The seed is random and logged;
// HOOKSTAMP_CHAOS_SEED replays one.
func TestChaosShort(t *testing.T) {
	seed := chaosSeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Options{
		Seed:         seed,
		Duration:     42 * time.Second, // room for every kind of ShortFaults: TestScheduleHasEveryKind
		Drain:        30 * time.Second,
		Faults:       chaos.ShortFaults,
		FaultSpacing: 1500 * time.Millisecond,
		MaxHold:      1500 * time.Millisecond,
		Senders:      6,
		Think:        200 * time.Millisecond,
		Async:        true,
		Race:         raceBuild,
		Progress:     testWriter{t},
	})
	if rep != nil {
		var b strings.Builder
		rep.Write(&b)
		t.Log("\n" + b.String())
	}
	if err != nil {
		t.Fatalf("the harness could not run: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("%d violations (listed above); replay with HOOKSTAMP_CHAOS_SEED=%d, or: %s",
			len(rep.Audit.Violations)+len(rep.SoakProblems), seed, rep.ReplayCommand())
	}
	// A pass must mean the run exercised something.
	if rep.Audit.Acked < 200 {
		t.Errorf("only %d events acknowledged: the load did not run", rep.Audit.Acked)
	}
	if rep.Audit.Replays == 0 {
		t.Errorf("no replay was seen: duplicates did not reach the gateways")
	}
	if len(rep.Injected) != len(rep.Schedule) {
		t.Errorf("%d faults planned, %d injected", len(rep.Schedule), len(rep.Injected))
	}
	kinds := map[chaos.FaultKind]bool{}
	for _, f := range rep.Injected {
		kinds[f.Kind] = true
	}
	for _, k := range []chaos.FaultKind{chaos.FaultKill, chaos.FaultRedisFlush, chaos.FaultPGCut} {
		if !kinds[k] {
			t.Errorf("fault %s was not injected", k)
		}
	}
}

// testWriter sends the harness's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// chaosSeed is a random seed, logged with how to replay it, or the one
// HOOKSTAMP_CHAOS_SEED names.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano()%1_000_000_000) + 1
	if s := os.Getenv("HOOKSTAMP_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HOOKSTAMP_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay: HOOKSTAMP_CHAOS_SEED=%d go test -race -run %s ./internal/chaos)", seed, seed, t.Name())
	return seed
}
