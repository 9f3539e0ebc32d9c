package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/chaos"
)

// TestChaosInbox runs the chaos harness with the upstream applying its
// effects through the inbox library (-inbox), the async route's too, under
// a schedule of kills mid-forward (each SIGKILLs a gateway while the
// upstream holds one of its forwards, applied) and lost answers, and
// audits effects: no event may be applied twice, not even after a lease
// takeover, and a takeover's second copy must have reached the inbox and
// been absorbed there.
// HOOKSTAMP_CHAOS_SEED replays a seed.
func TestChaosInbox(t *testing.T) {
	seed := chaosSeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Options{
		Seed:         seed,
		Duration:     30 * time.Second,
		Drain:        30 * time.Second,
		Faults:       []chaos.FaultKind{chaos.FaultKill, chaos.FaultUpLost},
		FaultSpacing: 1500 * time.Millisecond,
		MaxHold:      1500 * time.Millisecond,
		Senders:      6,
		Think:        200 * time.Millisecond,
		Race:         raceBuild,
		Inbox:        true,
		Async:        true,
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
			len(rep.Audit.Violations), seed, rep.ReplayCommand())
	}
	caught := 0
	for _, f := range rep.Injected {
		if f.Kind == chaos.FaultKill && strings.Contains(f.Note, "applied upstream and unanswered") {
			caught++
		}
	}
	if caught == 0 {
		t.Errorf("no kill caught a forward in flight: the schedule did not test a takeover")
	}
	if rep.Audit.AbsorbedByCause[chaos.CauseCrashTakeover] == 0 {
		t.Errorf("the inbox absorbed no takeover's second copy (absorbed: %v)", rep.Audit.AbsorbedByCause)
	}
	if rep.Audit.Effects != rep.Audit.Applied || rep.Audit.Acked < 50 {
		t.Errorf("%d effects for %d applied deliveries, %d events acknowledged", rep.Audit.Effects, rep.Audit.Applied, rep.Audit.Acked)
	}
}
