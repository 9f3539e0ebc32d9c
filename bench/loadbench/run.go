package loadbench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Options configure a benchmark run. Run fills zero fields from Quick or
// Full.
type Options struct {
	Mode        string // "quick" or "full", for the report
	PostgresDSN string
	RedisAddr   string
	OutDir      string // latest.json and latest.svg go here

	Concurrency []int
	Rounds      int
	Warmup      time.Duration
	Cell        time.Duration // measured time of one closed-loop cell

	OpenRate    float64       // open-loop requests per second
	OpenDur     time.Duration // measured open-loop time of each system, split over the rounds
	OpenWorkers int

	Prefill      int // rows in the prefilled ledger
	Expired      int // of which expired, for the sweeper
	ScaleRounds  int
	ScaleCell    time.Duration
	SweepWindows int // most sweeper-on windows (each followed by an off one)

	RSSDur time.Duration // the long run of one gateway under 256 connections

	// DrainMax bounds the wait for A1's queue to empty after each of its
	// closed-loop cells.
	DrainMax time.Duration

	// ScreenOnUnavailable overrides screen.on_unavailable of the Redis
	// gateways ("" = hookstamp's default, store).
	ScreenOnUnavailable string

	// L1Conns caps L1's PostgreSQL connections (the gateway's own pool is
	// store.max_open_conns, 16).
	L1Conns int

	// Systems restricts the interleaved rounds to these names (empty = all).
	Systems    []string
	SkipScale  bool
	SkipRSS    bool
	ProfileDir string // CPU profiles of each gateway child at the headline concurrency
	// Baseline is another build of this program (e.g. from an earlier
	// commit): the Redis+PostgreSQL, ledger-only and embedded gateways are run from
	// it as well, as systems B1@base … B5@base, interleaved with the
	// others, for before/after numbers from one run.
	Baseline string
	// Keep leaves the work directory (configurations, child logs) in place.
	Keep bool
	Log  io.Writer
}

// Quick is make bench-quick: every configuration and every number, on
// short windows and a 200k-row prefill; about four minutes.
func Quick() Options {
	return Options{
		Mode: "quick", Concurrency: []int{16, 64, 256}, Rounds: 2, Warmup: 300 * time.Millisecond, Cell: time.Second,
		OpenRate: 1000, OpenDur: 2 * time.Second, OpenWorkers: 512,
		Prefill: 200_000, Expired: 40_000, ScaleRounds: 2, ScaleCell: 1500 * time.Millisecond, SweepWindows: 2,
		RSSDur: 15 * time.Second, L1Conns: 16, DrainMax: 20 * time.Second,
	}
}

// Full is make bench: longer windows, more rounds, the 5-million-row
// ledger with 1 million expired rows, and the 10-minute memory run.
func Full() Options {
	return Options{
		Mode: "full", Concurrency: []int{16, 64, 256}, Rounds: 4, Warmup: time.Second, Cell: 4 * time.Second,
		OpenRate: 1000, OpenDur: 10 * time.Second, OpenWorkers: 512,
		Prefill: 5_000_000, Expired: 1_000_000, ScaleRounds: 4, ScaleCell: 5 * time.Second, SweepWindows: 20,
		RSSDur: 10 * time.Minute, L1Conns: 16, DrainMax: time.Minute,
	}
}

// Headline is the concurrency the ratios are quoted at.
const Headline = 64

// system is one configuration under test.
type system struct {
	name, desc string
	doer       Doer
	child      *Child // nil for U0, L1 and L2: no process of their own
	schema     string // its ledger's PostgreSQL schema, for its writes; "" for none
	closed     map[int]*agg
	open       *agg
	drain      *asyncDrain // A1's only
}

// agg accumulates a system's cells at one concurrency over the rounds.
type agg struct {
	cell   Cell
	cpu    time.Duration // the child's
	host   time.Duration // the whole machine's
	writes uint64
	stores StoreDelta
	rounds []float64 // throughput of each round
	drain  *drainAgg
}

func (a *agg) add(c *Cell, w *window) {
	a.cell.Elapsed += c.Elapsed
	a.cell.merge(c)
	a.cpu += w.cpu()
	a.host += w.h1 - w.h0
	a.writes += w.c1.WriteCalls - w.c0.WriteCalls
	a.stores.add(w.s0.delta(w.s1))
	a.rounds = append(a.rounds, c.Throughput())
}

// window samples the child, the stores and the machine around a
// measurement.
type window struct {
	child  *Child
	c0, c1 ProcSample
	h0, h1 time.Duration
	stats  *storeStats // nil: not sampled
	schema string
	s0, s1 StoreSample
}

// window is a window on s.
func (r *run) window(s *system) *window {
	return &window{child: s.child, stats: r.stats, schema: s.schema}
}

func (w *window) Begin() {
	w.s0 = w.storeSample()
	if w.child != nil {
		w.c0, _ = w.child.Sample()
	}
	w.h0, _ = HostCPU()
}

func (w *window) End() {
	if w.child != nil {
		w.c1, _ = w.child.Sample()
	}
	w.h1, _ = HostCPU()
	w.s1 = w.storeSample()
}

func (w *window) storeSample() StoreSample {
	if w.stats == nil {
		return StoreSample{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.stats.sample(ctx, w.schema)
}

func (w *window) cpu() time.Duration { return w.c1.CPU - w.c0.CPU }

// run holds one benchmark run's resources.
type run struct {
	o      Options
	id     string
	dir    string
	pg     *Postgres
	stats  *storeStats
	up     *Upstream
	ups    []*Upstream // the systems' own upstreams
	kids   []*Child
	report *Report
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// Run runs the benchmark and writes its report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.ProfileDir != "" {
		// Made before an hour of measuring, not found missing at its end.
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("profile directory: %w", err)
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &run{o: o, id: "hsbench_" + hex.EncodeToString(b[:])}
	var err error
	if r.dir, err = os.MkdirTemp("", "hookstamp-bench-"); err != nil {
		return nil, err
	}
	r.report = newReport(o)
	r.logf("run %s: %s mode, load average %.2f, work dir %s", r.id, o.Mode, LoadAvg(), r.dir)
	defer r.cleanup()
	if err := r.main(ctx); err != nil {
		return r.report, err
	}
	r.report.finish()
	return r.report, nil
}

func (r *run) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, k := range r.kids {
		k.Stop()
	}
	for _, u := range append(r.ups, r.up) {
		if u != nil {
			_ = u.Close()
		}
	}
	if r.stats != nil {
		r.stats.close()
	}
	if r.pg != nil {
		if err := r.pg.Close(ctx); err != nil {
			r.logf("cleanup: %v", err)
		}
	}
	if n, err := CleanRedis(ctx, r.o.RedisAddr, r.prefix("")); err != nil {
		r.logf("cleanup redis: %v", err)
	} else {
		r.logf("cleanup: dropped schemas %s_*, deleted %d Redis keys under %s", r.id, n, r.prefix(""))
	}
	if r.o.Keep {
		r.logf("kept %s", r.dir)
		return
	}
	_ = os.RemoveAll(r.dir)
}

func (r *run) prefix(name string) string {
	p := "hookstamp-bench:" + r.id + ":"
	if name != "" {
		p += name + ":"
	}
	return p
}

func (r *run) start(ctx context.Context, name, kind string, args ...string) (*Child, error) {
	return r.startExe(ctx, "", name, kind, args...)
}

func (r *run) startExe(ctx context.Context, exe, name, kind string, args ...string) (*Child, error) {
	c, err := StartChild(ctx, exe, r.dir, name, kind, args...)
	if err != nil {
		return nil, err
	}
	r.logf("%s: pid %d on %s, pprof on http://%s/debug/pprof/", name, c.PID(), c.Addr, c.Debug)
	r.kids = append(r.kids, c)
	return c, nil
}

func (r *run) stop(c *Child) {
	c.Stop()
	r.kids = slices.DeleteFunc(r.kids, func(k *Child) bool { return k == c })
}

func (r *run) gateway(ctx context.Context, name string, gc GatewayConfig) (*Child, error) {
	return r.gatewayExe(ctx, "", name, gc)
}

func (r *run) gatewayExe(ctx context.Context, exe, name string, gc GatewayConfig) (*Child, error) {
	gc.UpstreamURL = cmp.Or(gc.UpstreamURL, r.up.URL)
	gc.RedisAddr = r.o.RedisAddr
	path, err := gc.Write(r.dir, name)
	if err != nil {
		return nil, err
	}
	return r.startExe(ctx, exe, name, "gateway", path)
}

func (r *run) main(ctx context.Context) error {
	o := r.o
	var err error
	if r.up, err = StartUpstream(); err != nil {
		return err
	}
	if r.pg, err = OpenPostgres(ctx, o.PostgresDSN); err != nil {
		return err
	}
	r.report.Machine = describeMachine(ctx, r.pg, o.RedisAddr)
	r.stats = newStoreStats(r.pg, o.RedisAddr)

	mainDSN, err := r.pg.Schema(ctx, r.id+"_main")
	if err != nil {
		return err
	}
	ledgerDSN, err := r.pg.Schema(ctx, r.id+"_ledger")
	if err != nil {
		return err
	}
	l1DSN, err := r.pg.Schema(ctx, r.id+"_l1")
	if err != nil {
		return err
	}

	proxy, err := r.start(ctx, "b0-proxy", "proxy", r.up.URL)
	if err != nil {
		return err
	}
	gwMain, err := r.gateway(ctx, "gw-redis-pg", GatewayConfig{Store: "postgres", DSN: mainDSN, Screen: "redis", Prefix: r.prefix("main"), OnUnavailable: o.ScreenOnUnavailable})
	if err != nil {
		return err
	}
	gwLedger, err := r.gateway(ctx, "gw-ledger-only", GatewayConfig{Store: "postgres", DSN: ledgerDSN, Screen: "none", LocalCache: "0"})
	if err != nil {
		return err
	}
	gwEmbedded, err := r.gateway(ctx, "gw-embedded", GatewayConfig{Store: "sqlite", DSN: filepath.Join(r.dir, "b5.db"), Screen: "memory"})
	if err != nil {
		return err
	}

	async, err := r.asyncSystemUnder(ctx)
	if err != nil {
		return err
	}
	peers, err := r.peers(ctx)
	if err != nil {
		return err
	}
	mainT := NewHTTPTarget(gwMain.Addr, nil)
	ledgerT := NewHTTPTarget(gwLedger.Addr, nil)
	working := make([]string, 10_000)
	wr := newRand(42)
	for i := range working {
		working[i] = UniqueKey(wr, "evt_")
	}
	r.logf("recording the 10 000 keys of B2's working set")
	if failed := Prerecord(ctx, mainT.WithMix(nil), working, 64); failed > 0 {
		return fmt.Errorf("B2 working set: %d of %d deliveries failed", failed, len(working))
	}
	gwTLS, tlsT, tlsNewT, err := r.tlsGateway(ctx, working)
	if err != nil {
		return err
	}
	peerSystems, err := peers.systems(ctx, r, working)
	if err != nil {
		return err
	}

	maxConc := slices.Max(o.Concurrency)
	l1, err := NewPGInsert(ctx, l1DSN, min(o.L1Conns, maxConc))
	if err != nil {
		return err
	}
	defer l1.Close()
	l2 := NewRedisSetNX(o.RedisAddr, r.prefix(""), maxConc)
	defer l2.Close()

	systems := []*system{
		{name: "U0", desc: "the upstream alone, no hop (ceiling of any HTTP hop here)", doer: NewHTTPTarget(strings.TrimPrefix(r.up.URL, "http://"), &Mix{Unique: 1, Prefix: "evt_"})},
		{name: "B0", desc: "bare Fiber v2 proxy hop", doer: NewHTTPTarget(proxy.Addr, &Mix{Unique: 1, Prefix: "evt_"}), child: proxy},
		{name: "B1", desc: "Redis+PG, 100% unique", doer: mainT.WithMix(&Mix{Unique: 1, Prefix: "evt_"}), child: gwMain, schema: r.id + "_main"},
		{name: "B2", desc: "Redis+PG, 100% repeats (10k recorded keys)", doer: mainT.WithMix(&Mix{Working: working}), child: gwMain, schema: r.id + "_main"},
		{name: "B3", desc: "Redis+PG, 70% unique / 30% repeats", doer: mainT.WithMix(&Mix{Unique: 0.7, Prefix: "evt_"}), child: gwMain, schema: r.id + "_main"},
		{name: "B3s", desc: "Redis+PG, retry storm 10/90", doer: mainT.WithMix(&Mix{Unique: 0.1, Prefix: "evt_"}), child: gwMain, schema: r.id + "_main"},
		{name: "B4u", desc: "ledger only (screen.driver: none), 100% unique", doer: ledgerT.WithMix(&Mix{Unique: 1, Prefix: "evt_"}), child: gwLedger, schema: r.id + "_ledger"},
		{name: "B4", desc: "ledger only (seed design), 70/30", doer: ledgerT.WithMix(&Mix{Unique: 0.7, Prefix: "evt_"}), child: gwLedger, schema: r.id + "_ledger"},
		{name: "B4s", desc: "ledger only (seed design), 10/90", doer: ledgerT.WithMix(&Mix{Unique: 0.1, Prefix: "evt_"}), child: gwLedger, schema: r.id + "_ledger"},
		{name: "B5", desc: "embedded SQLite+memory, 70/30", doer: NewHTTPTarget(gwEmbedded.Addr, &Mix{Unique: 0.7, Prefix: "evt_"}), child: gwEmbedded},
		{name: "B1t", desc: "Redis+PG over TLS (kept connections), 100% unique", doer: tlsT.WithMix(&Mix{Unique: 1, Prefix: "evt_"}), child: gwTLS, schema: r.id + "_tls"},
		{name: "B2t", desc: "Redis+PG over TLS (kept connections), 100% repeats", doer: tlsT.WithMix(&Mix{Working: working}), child: gwTLS, schema: r.id + "_tls"},
		{name: "B2tn", desc: "Redis+PG over TLS, a handshake per request, 100% repeats", doer: tlsNewT.WithMix(&Mix{Working: working}), child: gwTLS, schema: r.id + "_tls"},
		{name: "L1", desc: fmt.Sprintf("PostgreSQL single-row INSERT tx (≤%d conns)", min(o.L1Conns, maxConc)), doer: l1, schema: r.id + "_l1"},
		{name: "L2", desc: "Redis SET NX, unpipelined", doer: l2},
		async,
	}
	systems = append(systems, peerSystems...)
	var baseChildren []*Child
	if o.Baseline != "" {
		bmDSN, err := r.pg.Schema(ctx, r.id+"_bmain")
		if err != nil {
			return err
		}
		blDSN, err := r.pg.Schema(ctx, r.id+"_bledger")
		if err != nil {
			return err
		}
		bMain, err := r.gatewayExe(ctx, o.Baseline, "base-redis-pg", GatewayConfig{Store: "postgres", DSN: bmDSN, Screen: "redis", Prefix: r.prefix("bmain"), OnUnavailable: o.ScreenOnUnavailable})
		if err != nil {
			return err
		}
		bLedger, err := r.gatewayExe(ctx, o.Baseline, "base-ledger-only", GatewayConfig{Store: "postgres", DSN: blDSN, Screen: "none", LocalCache: "0"})
		if err != nil {
			return err
		}
		bEmbedded, err := r.gatewayExe(ctx, o.Baseline, "base-embedded", GatewayConfig{Store: "sqlite", DSN: filepath.Join(r.dir, "b5-base.db"), Screen: "memory"})
		if err != nil {
			return err
		}
		baseChildren = []*Child{bMain, bLedger, bEmbedded}
		bmT, blT := NewHTTPTarget(bMain.Addr, nil), NewHTTPTarget(bLedger.Addr, nil)
		r.logf("recording B2's working set on the baseline")
		if failed := Prerecord(ctx, bmT, working, 64); failed > 0 {
			return fmt.Errorf("baseline B2 working set: %d of %d deliveries failed", failed, len(working))
		}
		systems = append(systems,
			&system{name: "B1@base", desc: "baseline: Redis+PG, 100% unique", doer: bmT.WithMix(&Mix{Unique: 1, Prefix: "evt_"}), child: bMain, schema: r.id + "_bmain"},
			&system{name: "B2@base", desc: "baseline: Redis+PG, 100% repeats", doer: bmT.WithMix(&Mix{Working: working}), child: bMain, schema: r.id + "_bmain"},
			&system{name: "B3@base", desc: "baseline: Redis+PG, 70/30", doer: bmT.WithMix(&Mix{Unique: 0.7, Prefix: "evt_"}), child: bMain, schema: r.id + "_bmain"},
			&system{name: "B3s@base", desc: "baseline: Redis+PG, 10/90", doer: bmT.WithMix(&Mix{Unique: 0.1, Prefix: "evt_"}), child: bMain, schema: r.id + "_bmain"},
			&system{name: "B4u@base", desc: "baseline: ledger only, 100% unique", doer: blT.WithMix(&Mix{Unique: 1, Prefix: "evt_"}), child: bLedger, schema: r.id + "_bledger"},
			&system{name: "B4@base", desc: "baseline: ledger only, 70/30", doer: blT.WithMix(&Mix{Unique: 0.7, Prefix: "evt_"}), child: bLedger, schema: r.id + "_bledger"},
			&system{name: "B4s@base", desc: "baseline: ledger only, 10/90", doer: blT.WithMix(&Mix{Unique: 0.1, Prefix: "evt_"}), child: bLedger, schema: r.id + "_bledger"},
			&system{name: "B5@base", desc: "baseline: embedded SQLite+memory, 70/30", doer: NewHTTPTarget(bEmbedded.Addr, &Mix{Unique: 0.7, Prefix: "evt_"}), child: bEmbedded},
		)
	}
	if len(o.Systems) > 0 {
		systems = slices.DeleteFunc(systems, func(s *system) bool { return !slices.Contains(o.Systems, s.name) })
	}
	for _, s := range systems {
		s.closed = map[int]*agg{}
	}

	// Closed loop, interleaved: every round visits every concurrency and
	// every system, in an order rotated each round, so that drift (other
	// load, a growing ledger, checkpoints) hits all of them alike.
	seed := uint64(1)
	for round := range o.Rounds {
		r.logf("round %d/%d (load %.2f)", round+1, o.Rounds, LoadAvg())
		for ci, c := range o.Concurrency {
			for k := range systems {
				s := systems[(k+round+ci)%len(systems)]
				w := r.window(s)
				seed++
				profile := o.ProfileDir != "" && round == o.Rounds-1 && c == Headline && s.child != nil && s.child.Debug != ""
				var prof chan error
				if profile {
					prof = make(chan error, 1)
					go func() {
						sleepCtx(ctx, o.Warmup)
						prof <- s.child.Profile(ctx, o.Cell, filepath.Join(o.ProfileDir, s.name+".pprof"))
					}()
				}
				cell := ClosedLoop(ctx, s.doer, c, o.Warmup, o.Cell, seed, w)
				if prof != nil {
					if err := <-prof; err != nil {
						r.logf("profile %s: %v", s.name, err)
					}
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				a := s.closed[c]
				if a == nil {
					a = &agg{}
					s.closed[c] = a
				}
				a.add(cell, w)
				if s.drain != nil {
					if err := r.drainAfter(ctx, s, a); err != nil {
						return err
					}
				}
				r.logf("  %-4s c=%-3d %8.0f/s  p50 %-8v p99 %-8v err %d %v", s.name, c, cell.Throughput(),
					cell.Hist.Quantile(0.5).Round(time.Microsecond), cell.Hist.Quantile(0.99).Round(time.Microsecond), cell.Errors, fmtOutcomes(cell.Outcomes))
			}
		}
	}

	// Open loop at a fixed rate, for latency without coordinated omission.
	// Interleaved like the closed loop: OpenDur is split over the rounds,
	// each round visits every system in a rotated order, and a system's
	// percentiles come from all its slices together. One slice per system
	// in a fixed order let whatever the machine did at one moment (a
	// checkpoint after the ledger systems' inserts, autovacuum) land on
	// one system's whole tail.
	r.logf("open loop at %.0f req/s, %d rounds", o.OpenRate, o.Rounds)
	slice := o.OpenDur / time.Duration(max(1, o.Rounds))
	for round := range max(1, o.Rounds) {
		for k := range systems {
			s := systems[(k+round)%len(systems)]
			w := r.window(s)
			seed++
			cell := OpenLoop(ctx, s.doer, o.OpenRate, o.OpenWorkers, o.Warmup, slice, seed, w)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.open == nil {
				s.open = &agg{}
			}
			s.open.add(cell, w)
			r.logf("  %-4s %6.0f/s  p50 %-8v p99 %-8v p99.9 %-8v err %d", s.name, cell.Throughput(), cell.Hist.Quantile(0.5).Round(time.Microsecond),
				cell.Hist.Quantile(0.99).Round(time.Microsecond), cell.Hist.Quantile(0.999).Round(time.Microsecond), cell.Errors)
		}
	}
	for _, s := range systems {
		r.report.addSystem(s)
	}
	for _, c := range append(append([]*Child{proxy, gwLedger, gwEmbedded, gwTLS, async.child}, peers.children()...), baseChildren...) {
		if s, err := c.Sample(); err == nil {
			r.report.PeakRSS[c.Name] = mib(s.PeakRSS)
		}
		r.stop(c)
	}

	if !o.SkipScale {
		if err := r.scale(ctx); err != nil {
			return err
		}
	}
	if !o.SkipRSS {
		if err := r.memory(ctx, gwMain, mainT); err != nil {
			return err
		}
	}
	if s, err := gwMain.Sample(); err == nil {
		r.report.PeakRSS[gwMain.Name] = mib(s.PeakRSS)
	}
	r.report.LoadAfter = LoadAvg()
	return nil
}

// tlsGateway starts the Redis+PG gateway again with server.tls (its own
// schema and prefix), records B2's working set on it, and returns it with
// a target keeping its connections and one opening a connection per
// request.
func (r *run) tlsGateway(ctx context.Context, working []string) (*Child, *HTTPTarget, *HTTPTarget, error) {
	cert, err := writeBenchCert(r.dir)
	if err != nil {
		return nil, nil, nil, err
	}
	dsn, err := r.pg.Schema(ctx, r.id+"_tls")
	if err != nil {
		return nil, nil, nil, err
	}
	gw, err := r.gateway(ctx, "gw-redis-pg-tls", GatewayConfig{Store: "postgres", DSN: dsn, Screen: "redis",
		Prefix: r.prefix("tls"), OnUnavailable: r.o.ScreenOnUnavailable, Server: cert.serverYAML()})
	if err != nil {
		return nil, nil, nil, err
	}
	t := NewHTTPSTarget(gw.Addr, nil, cert.pool, false)
	r.logf("recording B2's working set on the TLS gateway")
	if failed := Prerecord(ctx, t, working, 64); failed > 0 {
		return nil, nil, nil, fmt.Errorf("B2t working set: %d of %d deliveries failed", failed, len(working))
	}
	return gw, t, NewHTTPSTarget(gw.Addr, nil, cert.pool, true), nil
}

// scale measures B1 on an empty ledger against one holding o.Prefill rows,
// then B3 on the full ledger with and without a sweeper replica deleting
// its o.Expired expired rows.
func (r *run) scale(ctx context.Context) error {
	o := r.o
	emptyDSN, err := r.pg.Schema(ctx, r.id+"_empty")
	if err != nil {
		return err
	}
	preDSN, err := r.pg.Schema(ctx, r.id+"_prefilled")
	if err != nil {
		return err
	}
	t0 := time.Now()
	r.logf("prefilling the ledger with %d rows (%d expired)", o.Prefill, o.Expired)
	if err := r.pg.Prefill(ctx, r.id+"_prefilled", "bench", o.Prefill, o.Expired); err != nil {
		return err
	}
	r.logf("prefilled in %v", time.Since(t0).Round(time.Second))
	// Their own sweepers stay idle (1h): the sweeper is measured apart.
	gwEmpty, err := r.gateway(ctx, "gw-empty", GatewayConfig{Store: "postgres", DSN: emptyDSN, Screen: "redis", Prefix: r.prefix("empty"), Sweep: "1h", OnUnavailable: o.ScreenOnUnavailable})
	if err != nil {
		return err
	}
	defer r.stop(gwEmpty)
	gwPre, err := r.gateway(ctx, "gw-prefilled", GatewayConfig{Store: "postgres", DSN: preDSN, Screen: "redis", Prefix: r.prefix("prefilled"), Sweep: "1h", OnUnavailable: o.ScreenOnUnavailable})
	if err != nil {
		return err
	}
	defer r.stop(gwPre)

	sc := &ScaleResult{Rows: o.Prefill, Expired: o.Expired, Concurrency: Headline}
	empty := &system{name: "B1-empty", child: gwEmpty, doer: NewHTTPTarget(gwEmpty.Addr, &Mix{Unique: 1, Prefix: "evt_"})}
	pre := &system{name: "B1-prefilled", child: gwPre, doer: NewHTTPTarget(gwPre.Addr, &Mix{Unique: 1, Prefix: "evt_"})}
	ea, pa := &agg{}, &agg{}
	for round := range o.ScaleRounds {
		order := []*system{empty, pre}
		if round%2 == 1 {
			order = []*system{pre, empty}
		}
		for _, s := range order {
			w := &window{child: s.child}
			cell := ClosedLoop(ctx, s.doer, Headline, o.Warmup, o.ScaleCell, uint64(900+round), w)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a := ea
			if s == pre {
				a = pa
			}
			a.add(cell, w)
			r.logf("  %-12s %8.0f/s  p99 %v", s.name, cell.Throughput(), cell.Hist.Quantile(0.99).Round(time.Microsecond))
		}
	}
	sc.Empty, sc.Prefilled = summarize(ea), summarize(pa)

	// The sweeper: a second gateway replica on the same ledger, with no
	// traffic and sweep_interval 200ms, started for the "on" windows and
	// stopped for the "off" ones: exactly the gateway's own sweeper
	// (SweepAll in batches of 1000 with SKIP LOCKED), deleting the expired
	// rows while B3's mix runs on the first replica.
	sweepCfg := GatewayConfig{Store: "postgres", DSN: preDSN, Screen: "none", LocalCache: "0", Sweep: "200ms"}
	b3 := &system{name: "B3-prefilled", child: gwPre, doer: NewHTTPTarget(gwPre.Addr, &Mix{Unique: 0.7, Prefix: "evt_"})}
	off, on := &agg{}, &agg{}
	for i := range o.SweepWindows {
		left, err := r.pg.CountExpired(ctx, r.id+"_prefilled")
		if err != nil {
			return err
		}
		if left == 0 {
			break
		}
		w := &window{child: gwPre}
		cell := ClosedLoop(ctx, b3.doer, Headline, o.Warmup, o.ScaleCell, uint64(950+i), w)
		off.add(cell, w)
		r.logf("  B3 sweeper off %8.0f/s  p99 %v", cell.Throughput(), cell.Hist.Quantile(0.99).Round(time.Microsecond))

		sw, err := r.gateway(ctx, "gw-sweeper", sweepCfg)
		if err != nil {
			return err
		}
		w = &window{child: gwPre}
		cell = ClosedLoop(ctx, b3.doer, Headline, o.Warmup, o.ScaleCell, uint64(970+i), w)
		r.stop(sw)
		after, err := r.pg.CountExpired(ctx, r.id+"_prefilled")
		if err != nil {
			return err
		}
		on.add(cell, w)
		sc.Swept += left - after
		sc.SweepWindows++
		r.logf("  B3 sweeper on  %8.0f/s  p99 %v  (deleted %d, %d expired left)", cell.Throughput(),
			cell.Hist.Quantile(0.99).Round(time.Microsecond), left-after, after)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	sc.SweepOff, sc.SweepOn = summarize(off), summarize(on)
	if left, err := r.pg.CountExpired(ctx, r.id+"_prefilled"); err == nil {
		sc.ExpiredLeft = left
	}
	r.report.Scale = sc
	return nil
}

// memory runs B3's mix at 256 connections against one gateway for RSSDur,
// sampling its resident memory every second.
func (r *run) memory(ctx context.Context, gw *Child, t *HTTPTarget) error {
	r.logf("memory: B3 mix at 256 connections for %v", r.o.RSSDur)
	m := &RSSResult{Concurrency: 256, Duration: r.o.RSSDur.String()}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if s, err := gw.Sample(); err == nil {
					m.Samples = append(m.Samples, mib(s.RSS))
				}
			}
		}
	}()
	w := &window{child: gw}
	cell := ClosedLoop(ctx, t.WithMix(&Mix{Unique: 0.7, Prefix: "evt_"}), 256, 0, r.o.RSSDur, 777, w)
	close(stop)
	<-done
	m.Throughput = cell.Throughput()
	m.Errors = cell.Errors
	m.PeakRSS = mib(w.c1.PeakRSS)
	m.finish()
	r.report.RSS = m
	r.logf("memory: %.0f req/s, RSS first minute %.1f MiB, last minute %.1f MiB, peak %.1f MiB", m.Throughput, m.FirstMinute, m.LastMinute, m.PeakRSS)
	return ctx.Err()
}

func fmtOutcomes(m map[string]uint64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
