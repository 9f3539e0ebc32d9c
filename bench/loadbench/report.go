package loadbench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// Report is the outcome of one run: latest.json.
type Report struct {
	GeneratedAt string             `json:"generated_at"`
	Mode        string             `json:"mode"`
	Machine     Machine            `json:"machine"`
	LoadBefore  float64            `json:"load_average_before"`
	LoadAfter   float64            `json:"load_average_after"`
	Settings    Settings           `json:"settings"`
	Ratios      map[string]float64 `json:"ratios"`
	// RatiosByConcurrency repeats the ratios at every concurrency.
	RatiosByConcurrency map[string]map[string]float64 `json:"ratios_by_concurrency"`
	Goals               []Goal                        `json:"goals"`
	Results             []Result                      `json:"results"`
	Scale               *ScaleResult                  `json:"scale,omitempty"`
	RSS                 *RSSResult                    `json:"rss,omitempty"`
	PeakRSS             map[string]float64            `json:"peak_rss_mib"`
	// Failures say why the run's numbers are not to be trusted: a cell
	// with errors beyond maxErrorShare of its requests or with none
	// answered, a goal whose systems ran but whose ratio could not be
	// computed, a process that died, the error that ended the run. A run
	// with any exits non-zero and is written to failed-run.json, leaving
	// latest.json alone.
	Failures []string `json:"failures,omitempty"`
	// stopped: the run ended early on an error (then goals not measured
	// are no failure of their own).
	stopped bool
}

// maxErrorShare is the most errors a cell may have, as a share of its
// requests, in a run that passes.
const maxErrorShare = 0.001

func (r *Report) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	Redis    string `json:"redis"`
	Commit   string `json:"commit"`
}

// Settings are the run's parameters.
type Settings struct {
	Concurrency []int   `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	CellSeconds float64 `json:"cell_seconds"`
	OpenRate    float64 `json:"open_loop_rate"`
	OpenSeconds float64 `json:"open_loop_seconds"`
	Headline    int     `json:"headline_concurrency"`
	L1Conns     int     `json:"l1_connections"`
	// ScreenOnUnavailable is screen.on_unavailable of the Redis gateways:
	// store (hookstamp's default) confirms a first delivery with a ledger
	// claim, reject with a lookup.
	ScreenOnUnavailable string `json:"screen_on_unavailable"`
	// Systems are those the rounds measured; a goal between two of them
	// must have its ratio.
	Systems []string `json:"systems,omitempty"`
	// OrderSeed drew the systems' order in each pass of the rounds
	// (loadbench -seed runs the same orders again).
	OrderSeed uint64 `json:"order_seed,omitempty"`
}

// Result is one system at one concurrency (closed loop) or at the fixed
// rate (open loop).
type Result struct {
	System      string  `json:"system"`
	Desc        string  `json:"desc"`
	Loop        string  `json:"loop"` // closed | open
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Summary
	Outcomes map[string]uint64 `json:"outcomes,omitempty"`
	// Drain is how fast the queue left by the cells (the closed loop's)
	// or the slices (the open loop's) reached the upstream (A1 only).
	Drain *DrainResult `json:"drain,omitempty"`
}

// Summary is what an agg reduces to.
type Summary struct {
	Throughput float64 `json:"throughput"`
	// RoundMin and RoundMax are the slowest and fastest round: the noise.
	RoundMin float64 `json:"round_min"`
	RoundMax float64 `json:"round_max"`
	Requests uint64  `json:"requests"`
	Errors   uint64  `json:"errors"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	P999     float64 `json:"p999_ms"`
	Max      float64 `json:"max_ms"`
	// CPUPerReq is the system's own process CPU per request (µs): the
	// gateway or proxy child; 0 for L1/L2.
	CPUPerReq float64 `json:"cpu_us_per_req"`
	// HostCPUPerReq is every process's CPU per request (µs): load
	// generator, upstream, Redis, PostgreSQL included.
	HostCPUPerReq float64 `json:"host_cpu_us_per_req"`
	// WriteCallsPerReq is the child's write system calls per request.
	WriteCallsPerReq float64 `json:"write_syscalls_per_req"`
	// WritesPerReq is the write statements the stores ran per request:
	// LedgerWritesPerReq plus ScreenWritesPerReq (storestats.go).
	WritesPerReq float64 `json:"writes_per_req"`
	// LedgerWritesPerReq is the ledger rows inserted, updated or deleted.
	LedgerWritesPerReq float64 `json:"ledger_writes_per_req"`
	// ScreenWritesPerReq is the Redis commands that changed data, those
	// run by scripts included.
	ScreenWritesPerReq float64 `json:"screen_writes_per_req"`
	// RedisScriptsPerReq and RedisPublishesPerReq are script runs and
	// PUBLISHes; RedisCommandsPerReq every other Redis command.
	RedisScriptsPerReq   float64 `json:"redis_scripts_per_req"`
	RedisPublishesPerReq float64 `json:"redis_publishes_per_req"`
	RedisCommandsPerReq  float64 `json:"redis_commands_per_req"`
}

func summarize(a *agg) Summary {
	s := Summary{Requests: a.cell.Requests, Errors: a.cell.Errors, Throughput: a.cell.Throughput()}
	if len(a.rounds) > 0 {
		s.RoundMin, s.RoundMax = slices.Min(a.rounds), slices.Max(a.rounds)
	}
	h := &a.cell.Hist
	s.P50, s.P99, s.P999, s.Max = ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max())
	if n := float64(a.cell.Requests); n > 0 {
		s.CPUPerReq = float64(a.cpu.Microseconds()) / n
		s.HostCPUPerReq = float64(a.host.Microseconds()) / n
		s.WriteCallsPerReq = float64(a.writes) / n
		st := a.stores
		s.LedgerWritesPerReq, s.ScreenWritesPerReq = float64(st.LedgerRows)/n, float64(st.RedisWrites)/n
		s.WritesPerReq = s.LedgerWritesPerReq + s.ScreenWritesPerReq
		s.RedisScriptsPerReq, s.RedisPublishesPerReq = float64(st.RedisScripts)/n, float64(st.RedisPublishes)/n
		s.RedisCommandsPerReq = float64(st.RedisCommands) / n
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ScaleResult is the large-ledger part.
type ScaleResult struct {
	Rows         int     `json:"rows"`
	Expired      int     `json:"expired"`
	Concurrency  int     `json:"concurrency"`
	Empty        Summary `json:"b1_empty"`
	Prefilled    Summary `json:"b1_prefilled"`
	SweepOff     Summary `json:"b3_sweeper_off"`
	SweepOn      Summary `json:"b3_sweeper_on"`
	Swept        int64   `json:"rows_swept_during_on_windows"`
	SweepWindows int     `json:"sweeper_windows"`
	ExpiredLeft  int64   `json:"expired_rows_left"`
}

// RSSResult is the long run of one gateway.
type RSSResult struct {
	Concurrency int       `json:"concurrency"`
	Duration    string    `json:"duration"`
	Throughput  float64   `json:"throughput"`
	Requests    uint64    `json:"requests"`
	Errors      uint64    `json:"errors"`
	PeakRSS     float64   `json:"peak_rss_mib"` // the largest sample
	FirstMinute float64   `json:"rss_first_minute_mib"`
	LastMinute  float64   `json:"rss_last_minute_mib"`
	Samples     []float64 `json:"rss_samples_mib"`
}

// finish sums up the samples: the first and last minute's means and the
// peak, the largest sample. Not VmHWM: the process's peak since it
// started included the rounds before the memory run.
func (m *RSSResult) finish() {
	n := len(m.Samples)
	if n == 0 {
		return
	}
	m.PeakRSS = slices.Max(m.Samples)
	span := min(60, max(n/4, 1))
	m.FirstMinute = mean(m.Samples[:span])
	m.LastMinute = mean(m.Samples[n-span:])
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// Goal is one target of the performance issue.
type Goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Actual float64 `json:"actual"`
	Met    bool    `json:"met"`
	Note   string  `json:"note,omitempty"`
}

func newReport(o Options) *Report {
	return &Report{
		GeneratedAt: time.Now().UTC().Format(time.RFC3339), Mode: o.Mode, LoadBefore: LoadAvg(),
		Settings: Settings{Concurrency: o.Concurrency, Rounds: o.Rounds, CellSeconds: o.Cell.Seconds(),
			OpenRate: o.OpenRate, OpenSeconds: o.OpenDur.Seconds(), Headline: Headline, L1Conns: o.L1Conns,
			ScreenOnUnavailable: cmp.Or(o.ScreenOnUnavailable, "store"), OrderSeed: o.Seed},
		PeakRSS: map[string]float64{},
	}
}

func (r *Report) addSystem(s *system) {
	concs := make([]int, 0, len(s.closed))
	for c := range s.closed {
		concs = append(concs, c)
	}
	slices.Sort(concs)
	for _, c := range concs {
		a := s.closed[c]
		r.Results = append(r.Results, Result{System: s.name, Desc: s.desc, Loop: "closed", Concurrency: c, Summary: summarize(a), Outcomes: a.cell.Outcomes, Drain: a.drain.result()})
	}
	if s.open != nil {
		r.Results = append(r.Results, Result{System: s.name, Desc: s.desc, Loop: "open", Rate: r.Settings.OpenRate, Summary: summarize(s.open), Outcomes: s.open.cell.Outcomes, Drain: s.open.drain.result()})
	}
}

func (r *Report) find(system, loop string, conc int) *Result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.System == system && x.Loop == loop && (loop == "open" || x.Concurrency == conc) {
			return x
		}
	}
	return nil
}

// ratioDef is a ratio: numerator and denominator system, of throughput or
// (p99) of the 99th percentile; of their closed-loop cells at each
// concurrency or (open) of their open-loop cells, both at the run's one
// offered rate.
type ratioDef struct {
	name, num, den string
	p99, open      bool
}

// of is the ratio of n to m; false when either is missing or answered
// nothing (a percentile of no request is not a latency).
func (d ratioDef) of(n, m *Result) (float64, bool) {
	if n == nil || m == nil || n.Throughput == 0 || m.Throughput == 0 {
		return 0, false
	}
	num, den := n.Throughput, m.Throughput
	if d.p99 {
		num, den = n.P99, m.P99
	}
	if den == 0 {
		return 0, false
	}
	return round3(num / den), true
}

// ratioDefs are the ratios of the issue.
var ratioDefs = []ratioDef{
	// The goals: hookstamp against what its users would otherwise run and
	// against the physical limit of its own stack, in the same run.
	{name: "repeats_vs_upstream_alone", num: "B2", den: "U0"},
	{name: "repeats_vs_nginx_hop", num: "B2", den: "N0"},
	{name: "repeats_vs_fiber_idempotency", num: "B2", den: "F1r"},
	{name: "unique_vs_ledger_only", num: "B1", den: "B4u"},
	{name: "unique_vs_fiber_idempotency", num: "B1", den: "F1u"},
	// Latency from the open loop, where both get the same offered rate: at
	// a fixed concurrency a system's latency is concurrency/throughput
	// (Little's law), so a closed-loop p99 ratio restates the throughput
	// one.
	{name: "unique_p99_vs_ledger_only", num: "B1", den: "B4u", p99: true, open: true},
	// Store-and-forward's intake, left out of runs without asyncSystem.
	{name: "async_intake_vs_pg_insert", num: asyncSystem, den: "L1"},
	// Not goals any more (the first performance issue's), kept to compare
	// runs: the hop, PostgreSQL's insert rate, the ledger-only mixes.
	{name: "repeats_vs_proxy_hop", num: "B2", den: "B0"},
	{name: "unique_vs_pg_insert", num: "B1", den: "L1"},
	{name: "mix_vs_ledger_only", num: "B3", den: "B4"},
	{name: "storm_vs_ledger_only", num: "B3s", den: "B4s"},
	{name: "nginx_hop_vs_proxy_hop", num: "N0", den: "B0"},
	// Not goals: what TLS on the delivery listener keeps of the plain
	// throughput, with kept connections and with a handshake per request.
	{name: "tls_unique_vs_plain", num: "B1t", den: "B1"},
	{name: "tls_repeats_vs_plain", num: "B2t", den: "B2"},
	{name: "tls_handshake_repeats_vs_plain", num: "B2tn", den: "B2"},
	{name: "upstream_alone_vs_proxy_hop", num: "U0", den: "B0"},
	// Not a goal: the closed-loop p99 ratio the goal used to be, to
	// compare with the runs before.
	{name: "unique_p99_vs_ledger_only_closed", num: "B1", den: "B4u", p99: true},
}

// asyncSystem names the closed-loop cell of the store-and-forward intake
// (acknowledged deliveries a second), for async_intake_vs_pg_insert.
const asyncSystem = "A1"

func (r *Report) finish() {
	r.Ratios = map[string]float64{}
	r.RatiosByConcurrency = map[string]map[string]float64{}
	for _, d := range ratioDefs {
		if d.open {
			if v, ok := d.of(r.find(d.num, "open", 0), r.find(d.den, "open", 0)); ok {
				r.Ratios[d.name] = v
			}
			continue
		}
		for _, c := range r.Settings.Concurrency {
			v, ok := d.of(r.find(d.num, "closed", c), r.find(d.den, "closed", c))
			if !ok {
				continue
			}
			if r.RatiosByConcurrency[d.name] == nil {
				r.RatiosByConcurrency[d.name] = map[string]float64{}
			}
			r.RatiosByConcurrency[d.name][fmt.Sprint(c)] = v
			if c == Headline {
				r.Ratios[d.name] = v
			}
		}
	}
	if s := r.Scale; s != nil && s.Empty.Throughput > 0 {
		r.Ratios["prefilled_vs_empty"] = round3(s.Prefilled.Throughput / s.Empty.Throughput)
		if s.SweepOff.Throughput > 0 {
			r.Ratios["sweeper_throughput"] = round3(s.SweepOn.Throughput / s.SweepOff.Throughput)
			r.Ratios["sweeper_p99"] = round3(s.SweepOn.P99 / s.SweepOff.P99)
		}
	}
	r.goals()
	r.checkCells()
}

// checkCells fails every cell with more errors than maxErrorShare of its
// requests, or no request answered.
func (r *Report) checkCells() {
	for _, x := range r.Results {
		label := fmt.Sprintf("%s closed c=%d", x.System, x.Concurrency)
		if x.Loop == "open" {
			label = fmt.Sprintf("%s open %.0f/s", x.System, x.Rate)
		}
		r.checkCell(label, x.Requests, x.Errors)
	}
	if s := r.Scale; s != nil {
		r.checkCell("scale B1 empty ledger", s.Empty.Requests, s.Empty.Errors)
		r.checkCell("scale B1 prefilled ledger", s.Prefilled.Requests, s.Prefilled.Errors)
		if s.SweepWindows > 0 {
			r.checkCell("scale B3 sweeper off", s.SweepOff.Requests, s.SweepOff.Errors)
			r.checkCell("scale B3 sweeper on", s.SweepOn.Requests, s.SweepOn.Errors)
		}
	}
	if m := r.RSS; m != nil {
		r.checkCell("memory run", m.Requests, m.Errors)
	}
}

func (r *Report) checkCell(label string, ok, errs uint64) {
	switch total := ok + errs; {
	case ok == 0:
		r.fail("%s: no request answered (%d errors)", label, errs)
	case float64(errs) > maxErrorShare*float64(total):
		r.fail("%s: %d errors in %d requests (%.2f%%, more than %.1f%%)", label, errs, total,
			100*float64(errs)/float64(total), 100*maxErrorShare)
	}
}

// unmeasured says why the goal's ratio is missing when its systems ran
// (its cell is missing, or answered nothing); "" when they did not run.
func (r *Report) unmeasured(goal string) string {
	if goal == "prefilled_vs_empty" {
		if r.Scale == nil {
			return ""
		}
		return "not measured: B1 on the empty ledger answered nothing"
	}
	i := slices.IndexFunc(ratioDefs, func(d ratioDef) bool { return d.name == goal })
	if i < 0 {
		return ""
	}
	d := ratioDefs[i]
	loop, conc, cell := "closed", Headline, fmt.Sprintf("c=%d", Headline)
	ran := slices.Contains(r.Settings.Concurrency, Headline)
	if d.open {
		loop, conc, cell, ran = "open", 0, "open-loop", r.Settings.OpenSeconds > 0
	}
	if !ran || !slices.Contains(r.Settings.Systems, d.num) || !slices.Contains(r.Settings.Systems, d.den) {
		return ""
	}
	for _, name := range []string{d.num, d.den} {
		x := r.find(name, loop, conc)
		switch {
		case x == nil:
			return fmt.Sprintf("not measured: %s has no %s cell", name, cell)
		case x.Throughput == 0:
			return fmt.Sprintf("not measured: %s answered nothing in its %s cell", name, cell)
		}
	}
	return "not measured"
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func (r *Report) goals() {
	add := func(name, target string, actual float64, met bool, note string) {
		r.Goals = append(r.Goals, Goal{Name: name, Target: target, Actual: actual, Met: met, Note: note})
	}
	for _, g := range []struct {
		name  string
		bound float64
		most  bool // the ratio must stay at or under bound
	}{
		{name: "repeats_vs_upstream_alone", bound: 0.8},
		{name: "repeats_vs_nginx_hop", bound: 1.6},
		{name: "repeats_vs_fiber_idempotency", bound: 2},
		{name: "unique_vs_ledger_only", bound: 0.95},
		{name: "unique_vs_fiber_idempotency", bound: 0.8},
		{name: "unique_p99_vs_ledger_only", bound: 1.1, most: true},
		{name: "async_intake_vs_pg_insert", bound: 1.5},
		{name: "prefilled_vs_empty", bound: 0.9},
	} {
		target := fmt.Sprintf("≥ %.2f", g.bound)
		met := func(v float64) bool { return v >= g.bound }
		if g.most {
			target = fmt.Sprintf("≤ %.2f", g.bound)
			met = func(v float64) bool { return v <= g.bound }
		}
		v, ok := r.Ratios[g.name]
		if !ok {
			// Its systems ran and it has no ratio: a failed run, not a
			// goal left out.
			if why := r.unmeasured(g.name); why != "" {
				add(g.name, target, 0, false, why)
				if !r.stopped {
					r.fail("goal %s: %s", g.name, why)
				}
			}
			continue
		}
		note := ""
		if i := slices.IndexFunc(ratioDefs, func(d ratioDef) bool { return d.name == g.name }); i >= 0 && ratioDefs[i].open {
			note = fmt.Sprintf("open loop, %.0f req/s", r.Settings.OpenRate)
		}
		add(g.name, target, v, met(v), note)
	}
	if v, ok := r.Ratios["sweeper_throughput"]; ok {
		add("sweeper_throughput (B3 on/off)", "≥ 0.9", v, v >= 0.9, fmt.Sprintf("%d rows swept", r.Scale.Swept))
		p := r.Ratios["sweeper_p99"]
		add("sweeper_p99 (B3 on/off)", "≤ 1.5", p, p <= 1.5, "")
	}
	if m := r.RSS; m != nil {
		add("peak_rss_mib (256 conns, "+m.Duration+")", "≤ 150", round3(m.PeakRSS), m.PeakRSS <= 150, "")
		growth := m.LastMinute / m.FirstMinute
		add("rss_last_vs_first_minute", "≤ 1.1 (flat)", round3(growth), growth <= 1.1, "")
	}
}

// WriteJSON writes the report.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// PrintTable prints the results, the ratios and the goals.
func (r *Report) PrintTable(w io.Writer) {
	fmt.Fprintf(w, "\nhookstamp load benchmark — %s mode, %s, %d CPUs, load average %.2f before / %.2f after\n",
		r.Mode, r.GeneratedAt, r.Machine.CPUs, r.LoadBefore, r.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tload\treq/s\t(rounds)\tp50 ms\tp99 ms\tp99.9 ms\tCPU µs/req\thost µs/req\tsyscw/req\twrites/req\t(ledger+screen)\tscripts/req\terrors\t")
	for _, x := range r.Results {
		load := fmt.Sprintf("c=%d", x.Concurrency)
		if x.Loop == "open" {
			load = fmt.Sprintf("%.0f/s", x.Rate)
		}
		cpu, syscw := "-", "-"
		if x.CPUPerReq > 0 {
			cpu, syscw = fmt.Sprintf("%.0f", x.CPUPerReq), fmt.Sprintf("%.2f", x.WriteCallsPerReq)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f–%.0f\t%.2f\t%.2f\t%.2f\t%s\t%.0f\t%s\t%.2f\t%.2f+%.2f\t%.2f\t%d\t\n", x.System, load, x.Throughput,
			x.RoundMin, x.RoundMax, x.P50, x.P99, x.P999, cpu, x.HostCPUPerReq, syscw,
			x.WritesPerReq, x.LedgerWritesPerReq, x.ScreenWritesPerReq, x.RedisScriptsPerReq, x.Errors)
	}
	_ = tw.Flush()
	r.printDrains(w)
	fmt.Fprintln(w)
	for _, x := range r.Results {
		if x.Loop == "closed" && x.Concurrency == Headline {
			fmt.Fprintf(w, "  %-4s %s\n", x.System, x.Desc)
		}
	}
	if s := r.Scale; s != nil {
		fmt.Fprintf(w, "\nscale (c=%d): B1 empty %.0f/s p99 %.2f ms; B1 with %d rows %.0f/s p99 %.2f ms\n",
			s.Concurrency, s.Empty.Throughput, s.Empty.P99, s.Rows, s.Prefilled.Throughput, s.Prefilled.P99)
		fmt.Fprintf(w, "sweeper: B3 off %.0f/s p99 %.2f ms; on %.0f/s p99 %.2f ms; %d rows swept in %d windows, %d expired left\n",
			s.SweepOff.Throughput, s.SweepOff.P99, s.SweepOn.Throughput, s.SweepOn.P99, s.Swept, s.SweepWindows, s.ExpiredLeft)
	}
	if m := r.RSS; m != nil {
		fmt.Fprintf(w, "memory (c=%d, %s): %.0f req/s, RSS first minute %.1f MiB, last minute %.1f MiB, peak %.1f MiB\n",
			m.Concurrency, m.Duration, m.Throughput, m.FirstMinute, m.LastMinute, m.PeakRSS)
	}
	if len(r.PeakRSS) > 0 {
		names := make([]string, 0, len(r.PeakRSS))
		for k := range r.PeakRSS {
			names = append(names, k)
		}
		slices.Sort(names)
		fmt.Fprint(w, "peak RSS:")
		for _, n := range names {
			fmt.Fprintf(w, " %s %.1f MiB;", n, r.PeakRSS[n])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\ngoals (same run; closed loop at c=%d unless noted):\n", Headline)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\ttarget\tactual\tmet\t")
	for _, g := range r.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%s\t%s\n", g.Name, g.Target, g.Actual, met, g.Note)
	}
	_ = tw.Flush()
	if len(r.Failures) > 0 {
		fmt.Fprintf(w, "\nthe run FAILED; its numbers are not to be trusted:\n")
		for _, f := range r.Failures {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
}

// printDrains prints a row per drained result under the table.
func (r *Report) printDrains(w io.Writer) {
	for _, x := range r.Results {
		if d := x.Drain; d != nil {
			after := fmt.Sprintf("c=%d", x.Concurrency)
			if x.Loop == "open" {
				after = "the open-loop slices"
			}
			fmt.Fprintf(w, "%s drain after %s: %.0f deliveries/s to the upstream (%d in %.1f s, %d queued left)\n",
				x.System, after, d.PerSecond, d.Delivered, d.Seconds, d.Left)
		}
	}
}

func describeMachine(ctx context.Context, pg *Postgres, redisAddr string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	_ = pg.admin.QueryRow(ctx, "SHOW server_version").Scan(&m.Postgres)
	var sc string
	_ = pg.admin.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc)
	m.Postgres += " (synchronous_commit " + sc + ")"
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				m.Redis = v
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}
