package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Write prints the report: the summary table, the faults as injected, every
// duplicate delivery, every violation and, for a soak, the resources over
// time.
func (r *Report) Write(w io.Writer) {
	row := func(name string, n any, detail string) {
		fmt.Fprintf(w, "%-28s %-8v %s\n", name, n, detail)
	}
	fmt.Fprintln(w, "hookstamp chaos report")
	fmt.Fprintln(w, "======================")
	r.writeRunRows(row)
	if r.Audit == nil {
		fmt.Fprintln(w, "no audit: the run did not complete")
		return
	}
	r.writeDeliveryRows(row)
	r.writeStateRows(row)
	r.writeFaults(w)
	r.writeFindings(w)
	if r.Options.Soak {
		r.writeResources(w)
	}
	if r.WorkDir != "" {
		fmt.Fprintf(w, "\nartifacts: %s (gateway logs, configurations, upstream.log, sends.jsonl)\n", r.WorkDir)
	}
}

// writeRunRows: the seed, the load, the faults and the gateway processes.
func (r *Report) writeRunRows(row func(name string, n any, detail string)) {
	row("seed", r.Seed, "replay: "+r.ReplayCommand())
	row("load", r.Load.Round(time.Second), fmt.Sprintf("%v in all (planned %v of load); 3 gateways, %d senders, lease %v, upstream timeout %v",
		r.Elapsed.Round(time.Second), r.Duration, r.Options.Senders, r.Options.Lease, r.Options.Timeout))
	kinds := map[string]int{}
	for _, f := range r.Injected {
		kinds[string(f.Kind)]++
	}
	row("faults injected", len(r.Injected), joinCounts(kinds))
	how := map[string]int{}
	for _, l := range r.Lives {
		how[orRunning(l.How)]++
	}
	row("gateway processes", len(r.Lives), joinCounts(how))
}

// writeDeliveryRows: the sends and their answers, the events, what reached
// the upstream, and what reached it twice.
func (r *Report) writeDeliveryRows(row func(name string, n any, detail string)) {
	a := r.Audit
	sk := map[string]int{}
	for k, n := range a.SendsByKind {
		sk[string(k)] = n
	}
	row("sends", a.Sends, joinCounts(sk))
	row("  answered", a.Sends-a.Unanswered, joinCounts(a.Outcomes))
	row("  unanswered", a.Unanswered, fmt.Sprintf("%d while their gateway was down, starting or stopping; %d lost",
		a.UnansweredExpected, a.Unanswered-a.UnansweredExpected))
	row("events", a.Events, fmt.Sprintf("acknowledged %d, declined (final 402) %d, gave up %d", a.Acked, a.Declined, a.GaveUp))
	row("upstream deliveries", a.UpstreamReceived, fmt.Sprintf("applied %d; %s", a.Applied, joinCounts(a.UpstreamByAction)))
	dc := map[string]int{}
	for c, n := range a.DuplicatesByCause {
		tag := ""
		if !c.Allowed(r.Options.StorePass) {
			tag = " (VIOLATION)"
		}
		dc[string(c)+tag] = n
	}
	row("duplicates delivered", len(a.Duplicates), joinCounts(dc))
	if r.Options.Inbox {
		r.writeInboxRows(row)
	}
	if len(a.Unrecorded) > 0 {
		row("acknowledged, unrecorded", len(a.Unrecorded), "commit failed after the upstream answered (SPEC §1: answered, counted, logged; repeats caught only while the screen remembers)")
	}
	if a.PassedReuse > 0 {
		row("reused keys passed", a.PassedReuse, "copies with another body under an event's key, forwarded without deduplication while the ledger was down")
	}
	if a.UnrecordedPassthroughs > 0 {
		row("replayed, unrecorded", a.UnrecordedPassthroughs, "answers of deliveries that passed through with the ledger down, replayed from the screen")
	}
}

// writeStateRows: the held keys, the replays, the gateways' counters, the
// ledger, the host's stalls and the verdict.
func (r *Report) writeStateRows(row func(name string, n any, detail string)) {
	a := r.Audit
	row("keys held ("+holdRoute+")", a.Holds, fmt.Sprintf("resolved by the operator: %s; admin calls failed: %d",
		joinCounts(a.Resolved), r.OperatorFailures))
	row("replays", a.Replays, fmt.Sprintf("byte-identical to the original answer: %d", a.ReplaysIdentical))
	switch {
	case a.HasTakeovers:
		row("hookstamp_takeovers_total", a.Takeovers, "summed over every gateway process (last scrape before it stopped)")
	case a.MetricsScraped:
		row("hookstamp_takeovers_total", "n/a", "/metrics answered without the series: takeover count not checked")
	default:
		row("hookstamp_takeovers_total", "n/a", "no /metrics on the admin listener: takeover count not checked")
	}
	if a.HasCommitFailures {
		row("hookstamp_commit_failures", a.CommitFailures, "commits that failed after the upstream answered")
	}
	ls := map[string]int{}
	total := 0
	for s, n := range a.LedgerByState {
		ls[s], total = n, total+n
	}
	row("ledger rows", total, joinCounts(ls))
	var longest, stalled time.Duration
	for _, st := range r.Stalls {
		d := st.End.Sub(st.Start)
		stalled += d
		longest = max(longest, d)
	}
	row("host stalls", len(r.Stalls), fmt.Sprintf("harness clock jumps over %v: %v in all, longest %v", stallThreshold, stalled.Round(time.Millisecond), longest.Round(time.Millisecond)))
	row("violations", len(a.Violations)+len(r.SoakProblems), verdict(r.OK()))
}

func (r *Report) writeFaults(w io.Writer) {
	fmt.Fprintln(w, "\nfaults")
	for _, f := range r.Injected {
		note := ""
		if f.Note != "" {
			note = " — " + f.Note
		}
		fmt.Fprintf(w, "  %s%s\n", f.Fault, note)
	}
}

// writeFindings lists the duplicate deliveries, the unrecorded
// acknowledgements, the events given up and the violations.
func (r *Report) writeFindings(w io.Writer) {
	a := r.Audit
	if len(a.Duplicates) > 0 {
		fmt.Fprintln(w, "\nduplicate deliveries (each carried the same Idempotency-Key both times)")
		for _, d := range a.Duplicates {
			fmt.Fprintf(w, "  %s key %q: delivery %d via %s, again %d via %s %v later — %s: %s\n",
				d.Event, d.Key, d.Earlier.Seq, d.Earlier.Gateway, d.Later.Seq, d.Later.Gateway,
				d.Later.Time.Sub(d.Earlier.Time).Round(time.Millisecond), d.Cause, d.Evidence)
		}
	}
	if len(a.Unrecorded) > 0 {
		fmt.Fprintln(w, "\nacknowledged but unrecorded (commit failures, SPEC §1)")
		for _, u := range a.Unrecorded {
			fmt.Fprintf(w, "  %s\n", u)
		}
	}
	if a.GaveUp > 0 {
		fmt.Fprintln(w, "\nevents given up")
		for reason, n := range a.GaveUpReasons {
			fmt.Fprintf(w, "  %d × %s\n", n, reason)
		}
	}
	if n := len(a.Violations); n > 0 {
		fmt.Fprintf(w, "\nviolations (%d)\n", n)
		for i, v := range a.Violations {
			if i == 200 {
				fmt.Fprintf(w, "  … %d more\n", n-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
}

// writeInboxRows: the -inbox mode counts effects, and the second copies
// the application's inbox absorbed, by what sent them.
func (r *Report) writeInboxRows(row func(name string, n any, detail string)) {
	a := r.Audit
	row("effects (inbox mode)", a.Effects, fmt.Sprintf("rows in the application's own database; events applied twice: %d", a.EffectsTwice))
	ac := map[string]int{}
	for c, n := range a.AbsorbedByCause {
		ac[string(c)] = n
	}
	row("  absorbed by the inbox", a.Absorbed, joinCounts(ac))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func orRunning(s string) string {
	if s == "" {
		return "running"
	}
	return s
}

// joinCounts prints "a 3, b 1" in decreasing order of counts.
func joinCounts(m map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range m {
		if k == "" {
			k = "(none)"
		}
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].k < all[j].k
	})
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %d", e.k, e.n)
	}
	return strings.Join(parts, ", ")
}

// writeResources prints RSS and goroutines of each gateway at ten points
// of the run, and the growth verdict.
func (r *Report) writeResources(w io.Writer) {
	fmt.Fprintln(w, "\nresources (RSS MiB / goroutines) over time")
	hasG := false
	for _, ss := range r.Samples {
		for _, s := range ss {
			hasG = hasG || s.HasGoroutines
		}
	}
	fmt.Fprintf(w, "  %-8s", "time")
	for i := range r.Samples {
		fmt.Fprintf(w, " %-22s", fmt.Sprintf("g%d", i+1))
	}
	fmt.Fprintln(w)
	for step := 0; step <= 10; step++ {
		at := r.Elapsed * time.Duration(step) / 10
		fmt.Fprintf(w, "  %-8v", at.Round(time.Second))
		for _, ss := range r.Samples {
			s, ok := sampleAt(ss, at, r.Elapsed)
			cell := "-"
			if ok {
				cell = fmt.Sprintf("%.1f", float64(s.RSS)/(1<<20))
				if s.HasGoroutines {
					cell += fmt.Sprintf(" / %.0f", s.Goroutines)
				}
				cell += " (" + s.Life + ")"
			}
			fmt.Fprintf(w, " %-22s", cell)
		}
		fmt.Fprintln(w)
	}
	if !hasG {
		fmt.Fprintln(w, "  goroutines: the gateways export no go_goroutines on /metrics; RSS only")
	}
	judged := false
	for _, ss := range r.Samples {
		per := map[string]int{}
		for _, s := range ss {
			per[s.Life]++
			judged = judged || per[s.Life] >= minSoakSamples
		}
	}
	switch {
	case !judged:
		fmt.Fprintf(w, "  too short to judge growth: no process has %d samples\n", minSoakSamples)
	case len(r.SoakProblems) == 0:
		fmt.Fprintln(w, "  flat: no growth beyond tolerance")
	}
	for _, p := range r.SoakProblems {
		fmt.Fprintf(w, "  GROWTH: %s\n", p)
	}
}

// sampleAt is the sample nearest to offset at (from the first sample).
func sampleAt(ss []Sample, at, total time.Duration) (Sample, bool) {
	if len(ss) == 0 {
		return Sample{}, false
	}
	start := ss[0].Time
	best, bestD := ss[0], time.Duration(1<<62)
	for _, s := range ss {
		d := s.Time.Sub(start) - at
		if d < 0 {
			d = -d
		}
		if d < bestD {
			best, bestD = s, d
		}
	}
	return best, bestD <= total/10+time.Second
}

// Growth tolerances of a soak: the end of an incarnation's life against
// its warmed-up state.
const (
	rssGrowthFactor  = 1.3
	rssGrowthSlack   = 24 << 20
	goroutinesFactor = 1.5
	goroutinesSlack  = 50
	minSoakSamples   = 20
)

// flatness compares, for every incarnation sampled long enough, the median
// of its last 15% of samples with the median of its warmed-up window (25%
// to 40% of its samples).
func flatness(samples [3][]Sample) []string {
	var problems []string
	for _, ss := range samples {
		by := map[string][]Sample{}
		var order []string
		for _, s := range ss {
			if _, ok := by[s.Life]; !ok {
				order = append(order, s.Life)
			}
			by[s.Life] = append(by[s.Life], s)
		}
		for _, life := range order {
			s := by[life]
			n := len(s)
			if n < minSoakSamples {
				continue
			}
			warm, end := s[n/4:n*2/5], s[n*85/100:]
			wr, er := median(warm, func(x Sample) float64 { return float64(x.RSS) }), median(end, func(x Sample) float64 { return float64(x.RSS) })
			if er > wr*rssGrowthFactor+rssGrowthSlack {
				problems = append(problems, fmt.Sprintf("%s RSS grew from %.1f MiB to %.1f MiB", life, wr/(1<<20), er/(1<<20)))
			}
			if s[0].HasGoroutines {
				wg, eg := median(warm, func(x Sample) float64 { return x.Goroutines }), median(end, func(x Sample) float64 { return x.Goroutines })
				if eg > wg*goroutinesFactor+goroutinesSlack {
					problems = append(problems, fmt.Sprintf("%s goroutines grew from %.0f to %.0f", life, wg, eg))
				}
			}
		}
	}
	return problems
}

func median(s []Sample, f func(Sample) float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// writeSends keeps every send as a JSON line, for post-mortems.
func writeSends(path string, events []*Event) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, ev := range events {
		for _, s := range ev.Sends {
			_ = enc.Encode(struct {
				*Send
				Route, Key, Body string
			}{s, ev.Route, ev.Key, string(s.Body)})
		}
	}
	_ = bw.Flush()
}

// ReplayCommand is the command line that replays this run's schedule and
// events with cmd/chaos.
func (r *Report) ReplayCommand() string {
	o := r.Options
	args := []string{"go run ./cmd/chaos", fmt.Sprintf("-seed %d", r.Seed), fmt.Sprintf("-duration %v", o.Duration)}
	if o.Drain != 60*time.Second {
		args = append(args, fmt.Sprintf("-drain %v", o.Drain))
	}
	if !o.Async {
		args = append(args, "-async=false")
	}
	if o.Soak {
		args = append(args, "-soak")
	}
	if o.Inbox {
		args = append(args, "-inbox")
	}
	if !slices.Equal(o.Faults, AllFaults) && !(o.Soak && slices.Equal(o.Faults, SoakFaults)) {
		names := make([]string, len(o.Faults))
		for i, f := range o.Faults {
			names[i] = string(f)
		}
		list := strings.Join(names, ",")
		if list == "" {
			list = "none"
		}
		args = append(args, "-faults "+list)
	}
	if o.FaultSpacing > 0 {
		args = append(args, fmt.Sprintf("-fault-spacing %v", o.FaultSpacing))
	}
	if o.MaxHold > 0 {
		args = append(args, fmt.Sprintf("-max-hold %v", o.MaxHold))
	}
	if o.Senders != 18 {
		args = append(args, fmt.Sprintf("-senders %d", o.Senders))
	}
	if o.Think != 150*time.Millisecond {
		args = append(args, fmt.Sprintf("-think %v", o.Think))
	}
	if o.Lease != 3*time.Second {
		args = append(args, fmt.Sprintf("-lease %v", o.Lease))
	}
	if o.Timeout != time.Second {
		args = append(args, fmt.Sprintf("-timeout %v", o.Timeout))
	}
	if o.StorePass {
		args = append(args, "-store-pass")
	}
	if o.Race {
		args = append(args, "-race")
	}
	return strings.Join(args, " ")
}
