package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind names a fault the schedule can inject.
type FaultKind string

// Fault kinds.
const (
	// FaultKill: SIGKILL a gateway while the upstream holds one of its
	// forwards (after acting on it), then restart it.
	FaultKill FaultKind = "kill_mid_forward"
	// FaultRolling: SIGTERM each gateway in turn, restarting it before the
	// next (a rolling deploy).
	FaultRolling FaultKind = "rolling_restart"
	// FaultFreeze: SIGSTOP a gateway while the upstream holds one of its
	// forwards, let the upstream answer into the stopped process, and
	// SIGCONT it after a while, sometimes past its claims' lease: to the
	// other replicas it was dead, and it wakes believing it owns them.
	FaultFreeze FaultKind = "gateway_frozen"

	FaultRedisCut       FaultKind = "redis_cut"       // connections reset, new ones refused
	FaultRedisBlackhole FaultKind = "redis_blackhole" // no byte moves: clients time out
	FaultRedisSlow      FaultKind = "redis_slow"      // added latency
	FaultRedisFlush     FaultKind = "redis_flushall"  // every screen entry forgotten
	FaultRedisRestart   FaultKind = "redis_restart"   // SIGKILL, down for a while, start empty
	// FaultRedisHostLost: Redis's host vanishes with its connections, then
	// new connections reach it again (postgres_host_lost's twin).
	FaultRedisHostLost FaultKind = "redis_host_lost"
	// FaultRedisPartition: one gateway loses Redis, the others keep it (a
	// network partition), while the upstream answers slowly; the cut-off
	// gateway claims in the ledger meanwhile.
	FaultRedisPartition FaultKind = "redis_partition"

	FaultPGCut FaultKind = "postgres_cut"
	// FaultPGCutIntake: PostgreSQL slowed until async intakes are in
	// flight (their rows, requests and jobs being written), then cut.
	FaultPGCutIntake FaultKind = "postgres_cut_intake"
	// FaultPGCutCompletion: the upstream holds its answers to the async
	// route's attempts; once some are held PostgreSQL is cut and the
	// answers go out, so the attempts settle against a cut ledger.
	FaultPGCutCompletion FaultKind = "postgres_cut_completion"
	FaultPGBlackhole     FaultKind = "postgres_blackhole"
	FaultPGSlow          FaultKind = "postgres_slow"
	// FaultPGLostReplies: PostgreSQL runs every statement it is sent and
	// its replies are lost: the gateways cannot tell a commit that landed
	// from one that did not.
	FaultPGLostReplies FaultKind = "postgres_lost_replies"
	// FaultPGHostLost: the database's host vanishes with its connections,
	// which never answer nor reset, those opened meanwhile too; then the
	// database answers again on new connections (a failover).
	FaultPGHostLost FaultKind = "postgres_host_lost"

	FaultUpSlow    FaultKind = "upstream_slow"    // answers within the timeout, slowly
	FaultUpFailing FaultKind = "upstream_failing" // a share of 5xx, nothing applied
	FaultUpHang    FaultKind = "upstream_hang"    // no answer: the gateways time out
	FaultUpReset   FaultKind = "upstream_reset"   // connections dropped after the request
	// FaultUpLost: requests are applied but never answered; the gateways
	// time out on an effect that happened (record.ambiguous).
	FaultUpLost FaultKind = "upstream_lost_answers"
)

// AllFaults is every fault kind, the schedule of make chaos.
var AllFaults = []FaultKind{
	FaultKill, FaultRolling, FaultFreeze,
	FaultRedisCut, FaultRedisBlackhole, FaultRedisSlow, FaultRedisFlush, FaultRedisRestart, FaultRedisPartition, FaultRedisHostLost,
	FaultPGCut, FaultPGCutIntake, FaultPGCutCompletion, FaultPGBlackhole, FaultPGSlow, FaultPGLostReplies, FaultPGHostLost,
	FaultUpSlow, FaultUpFailing, FaultUpHang, FaultUpReset, FaultUpLost,
}

// ParseFaults reads a comma-separated list of fault kinds ("all" = AllFaults,
// "none" = no fault).
func ParseFaults(s string) ([]FaultKind, error) {
	switch s {
	case "", "all":
		return AllFaults, nil
	case "none":
		return []FaultKind{}, nil
	}
	var out []FaultKind
	for _, f := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(f))
		known := false
		for _, a := range AllFaults {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("unknown fault %q (want some of %v, or all, or none)", k, AllFaults)
		}
		out = append(out, k)
	}
	return out, nil
}

// Fault is one planned injection.
type Fault struct {
	Kind FaultKind
	// At is the offset from the start of the load.
	At time.Duration
	// Hold is how long the fault lasts (the down time for kills and
	// restarts; zero for a flush and a rolling restart).
	Hold    time.Duration
	Gateway int           // kill target (index)
	Latency time.Duration // slow faults
	Ratio   float64       // upstream_failing
}

func (f Fault) String() string {
	s := fmt.Sprintf("%7.1fs  %-18s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case FaultKill:
		s += fmt.Sprintf(" g%d, restarted after %v", f.Gateway+1, f.Hold.Round(time.Millisecond))
	case FaultFreeze:
		s += fmt.Sprintf(" g%d, continued after %v", f.Gateway+1, f.Hold.Round(time.Millisecond))
	case FaultRedisPartition:
		s += fmt.Sprintf(" g%d cut off from Redis, upstream slow, for %v", f.Gateway+1, f.Hold.Round(time.Millisecond))
	case FaultRedisSlow, FaultPGSlow:
		s += fmt.Sprintf(" +%v per chunk for %v", f.Latency, f.Hold.Round(time.Millisecond))
	case FaultUpFailing:
		s += fmt.Sprintf(" %.0f%% 5xx for %v", f.Ratio*100, f.Hold.Round(time.Millisecond))
	case FaultRolling, FaultRedisFlush:
	default:
		s += fmt.Sprintf(" for %v", f.Hold.Round(time.Millisecond))
	}
	return s
}

// estimate is how long a fault takes to inject and undo, for planning.
func (f Fault) estimate() time.Duration {
	switch f.Kind {
	case FaultKill:
		return f.Hold + 2*time.Second // catch a forward, restart
	case FaultFreeze:
		return f.Hold + time.Second // catch a forward
	case FaultRolling:
		return 3 * time.Second
	case FaultRedisRestart:
		return f.Hold + 500*time.Millisecond
	}
	return f.Hold
}

// NewSchedule draws a fault schedule for a load of duration d from seed:
// every kind in kinds once, in random order, then random kinds until the
// load's last stretch, which stays quiet so that the run ends settled.
// Faults do not overlap: each one's effect can be read in the report.
// spacing is the mean quiet time between two faults (0: 2.5s), shortened
// for the first round when every kind would not fit otherwise; maxHold,
// if positive, caps how long each fault lasts.
func NewSchedule(seed uint64, d time.Duration, kinds []FaultKind, spacing, maxHold time.Duration) []Fault {
	if len(kinds) == 0 {
		return nil
	}
	if spacing <= 0 {
		spacing = 2500 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	order := append([]FaultKind(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	first := make([]Fault, len(order))
	var busy time.Duration
	for i, k := range order {
		first[i] = drawFault(rng, k, maxHold)
		busy += first[i].estimate()
	}
	tail := max(4*time.Second, d/10)
	t := 2 * time.Second
	// gap draws the quiet time after the i-th fault: within the first
	// round, at most its share of the room every kind leaves.
	room := d - tail - t - busy
	gap := func(i int) time.Duration {
		if n := time.Duration(len(order)); i < len(order) && room > 0 && room < n*spacing*7/5 {
			return between(rng, room/n/2, room/n)
		}
		return between(rng, spacing*3/5, spacing*7/5)
	}
	var out []Fault
	for i := 0; ; i++ {
		var f Fault
		if i < len(order) {
			f = first[i]
		} else {
			f = drawFault(rng, kinds[rng.IntN(len(kinds))], maxHold)
		}
		f.At = t
		if t+f.estimate() > d-tail {
			if i < len(order) {
				continue // try the kinds that still fit
			}
			break
		}
		out = append(out, f)
		t += f.estimate() + gap(i)
		if i > 10*len(kinds)+100 {
			break
		}
	}
	return out
}

// drawFault draws how a fault of kind k is injected: its hold (capped by
// maxHold when positive) and what else its kind needs.
func drawFault(rng *rand.Rand, k FaultKind, maxHold time.Duration) Fault {
	f := Fault{Kind: k}
	switch k {
	case FaultKill:
		f.Gateway, f.Hold = rng.IntN(3), between(rng, 300*time.Millisecond, 2*time.Second)
	case FaultFreeze:
		// Around the default lease (3s): some thaw within it, most
		// after it.
		f.Gateway, f.Hold = rng.IntN(3), between(rng, time.Second, 5*time.Second)
	case FaultRedisPartition:
		f.Gateway, f.Hold = rng.IntN(3), between(rng, 1500*time.Millisecond, 4*time.Second)
	case FaultRedisSlow:
		f.Latency, f.Hold = between(rng, 20*time.Millisecond, 150*time.Millisecond), between(rng, 2*time.Second, 5*time.Second)
	case FaultPGSlow:
		f.Latency, f.Hold = between(rng, 20*time.Millisecond, 150*time.Millisecond), between(rng, 2*time.Second, 5*time.Second)
	case FaultUpFailing:
		f.Ratio, f.Hold = 0.3+rng.Float64()*0.5, between(rng, 2*time.Second, 5*time.Second)
	case FaultRedisBlackhole, FaultRedisHostLost, FaultPGBlackhole, FaultPGLostReplies, FaultPGHostLost:
		f.Hold = between(rng, 1500*time.Millisecond, 3500*time.Millisecond)
	case FaultRedisRestart:
		f.Hold = between(rng, 500*time.Millisecond, 3*time.Second)
	case FaultRolling, FaultRedisFlush:
	default:
		f.Hold = between(rng, 1*time.Second, 4*time.Second)
	}
	if maxHold > 0 && f.Hold > maxHold {
		f.Hold = maxHold
	}
	return f
}

// between draws a duration in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// SoakFaults are the faults of a soak: those that leave the gateway
// processes running, so that their memory and goroutines can be followed
// over the whole run.
var SoakFaults = []FaultKind{
	FaultFreeze,
	FaultRedisCut, FaultRedisBlackhole, FaultRedisSlow, FaultRedisFlush, FaultRedisRestart, FaultRedisPartition, FaultRedisHostLost,
	FaultPGCut, FaultPGBlackhole, FaultPGSlow, FaultPGLostReplies, FaultPGHostLost,
	FaultUpSlow, FaultUpFailing, FaultUpHang, FaultUpReset, FaultUpLost,
}

// ShortFaults are the faults of the short run inside make test: one of
// each family, short enough to fit in well under a minute.
var ShortFaults = []FaultKind{
	FaultKill, FaultRolling, FaultFreeze,
	FaultRedisCut, FaultRedisFlush, FaultRedisRestart, FaultRedisPartition,
	FaultPGCut,
	FaultUpFailing, FaultUpHang, FaultUpLost,
}
