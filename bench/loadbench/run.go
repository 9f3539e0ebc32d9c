package loadbench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
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
	// closed-loop cells and open-loop slices.
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
	// Seed draws the order of the systems in each pass of the rounds (0:
	// one from the clock); the report records it, so that an order can
	// be run again.
	Seed uint64
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
	drain      drainer // A1's only
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
	a.stores.add(w.storeDelta())
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

// storeDelta is what the stores did in the window (nothing when they were
// not sampled).
func (w *window) storeDelta() StoreDelta {
	if w.stats == nil {
		return StoreDelta{}
	}
	return w.s0.delta(w.s1, w.stats.writes)
}

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
	order  *mrand.Rand // shuffles each pass of the rounds (passOrder)
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
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	r := &run{o: o, id: "hsbench_" + hex.EncodeToString(b[:]), order: newRand(o.Seed)}
	var err error
	if r.dir, err = os.MkdirTemp("", "hookstamp-bench-"); err != nil {
		return nil, err
	}
	r.report = newReport(o)
	r.logf("run %s: %s mode, load average %.2f, work dir %s, order seed %d", r.id, o.Mode, LoadAvg(), r.dir, o.Seed)
	defer r.cleanup()
	err = r.main(ctx)
	r.report.LoadAfter = LoadAvg()
	r.report.stopped = err != nil
	r.report.finish()
	if err != nil {
		r.report.Failures = append(r.report.Failures, err.Error())
	}
	if n := len(r.report.Failures); n > 0 {
		return r.report, fmt.Errorf("the run failed (%d failures): %s", n, strings.Join(r.report.Failures, "; "))
	}
	return r.report, nil
}

// alive fails when one of the run's processes has exited: every cell of
// its systems after that would measure errors, not the system.
func (r *run) alive() error {
	for _, k := range r.kids {
		if exited, err := k.Exited(); exited {
			err := fmt.Errorf("%s (pid %d) exited during the run (%v); its log: %s", k.Name, k.PID(), err, k.Log)
			if t := strings.TrimSpace(tail(k.Log)); t != "" {
				err = fmt.Errorf("%w, which ends:\n%s", err, t)
			}
			return err
		}
	}
	return nil
}

// afterCell is what ends a measurement early: the run cancelled, or one of
// its processes dead.
func (r *run) afterCell(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.alive()
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

// main measures every system in interleaved rounds, then the ledger at
// scale and one gateway's memory, into r.report.
func (r *run) main(ctx context.Context) error {
	if err := r.setUp(ctx); err != nil {
		return err
	}
	f, err := r.startFleet(ctx)
	if err != nil {
		return err
	}
	defer f.raw.close()
	systems, err := selectSystems(r.systems(f), r.o.Systems)
	if err != nil {
		return err
	}
	r.report.Settings.Systems = systemNames(systems)
	seed := seeds(1)
	err = r.closedRounds(ctx, systems, &seed)
	if err == nil {
		err = r.openRounds(ctx, systems, &seed)
	}
	if err != nil {
		// The cells measured before the rounds stopped, for the failed
		// run's report.
		for _, s := range systems {
			r.report.addSystem(s)
		}
		return err
	}
	r.endRounds(systems, f.doneAfterRounds())
	if !r.o.SkipScale {
		if err := r.scale(ctx); err != nil {
			return err
		}
	}
	if !r.o.SkipRSS {
		if err := r.memory(ctx, f.trio.main, f.trio.mainT); err != nil {
			return err
		}
	}
	r.notePeakRSS(f.trio.main)
	return r.alive()
}

// setUp starts the shared upstream and opens PostgreSQL and the stores'
// counters.
func (r *run) setUp(ctx context.Context) error {
	var err error
	if r.up, err = StartUpstream(); err != nil {
		return err
	}
	if r.pg, err = OpenPostgres(ctx, r.o.PostgresDSN); err != nil {
		return err
	}
	r.report.Machine = describeMachine(ctx, r.pg, r.o.RedisAddr)
	r.stats, err = newStoreStats(ctx, r.pg, r.o.RedisAddr)
	return err
}

// fleet is every process and client the interleaved rounds measure.
type fleet struct {
	working     []string // B2's keys, recorded on every system that repeats them
	proxy       *Child   // B0
	trio        *trio    // B1–B5
	tls         *Child   // B1t, B2t, B2tn
	tlsT        *HTTPTarget
	tlsNewT     *HTTPTarget // a handshake per request
	async       *system     // A1
	peers       *peers
	peerSystems []*system
	base        *trio // B1@base … B5@base; nil without Options.Baseline
	raw         *raw  // L1, L2
}

// startFleet starts every system's process and records the working set
// on those that repeat it.
func (r *run) startFleet(ctx context.Context) (*fleet, error) {
	f := &fleet{working: workingSet()}
	var err error
	if f.proxy, err = r.start(ctx, "b0-proxy", "proxy", r.up.URL); err != nil {
		return nil, err
	}
	if f.trio, err = r.startTrio(ctx, ""); err != nil {
		return nil, err
	}
	if f.async, err = r.asyncSystemUnder(ctx); err != nil {
		return nil, err
	}
	if f.peers, err = r.peers(ctx); err != nil {
		return nil, err
	}
	if err := r.prerecord(ctx, f.trio.mainT, f.working, "B2", "the 10 000 keys of B2's working set"); err != nil {
		return nil, err
	}
	if f.tls, f.tlsT, f.tlsNewT, err = r.tlsGateway(ctx, f.working); err != nil {
		return nil, err
	}
	if f.peerSystems, err = f.peers.systems(ctx, r, f.working); err != nil {
		return nil, err
	}
	if r.o.Baseline != "" {
		if f.base, err = r.startTrio(ctx, r.o.Baseline); err != nil {
			return nil, err
		}
		if err := r.prerecord(ctx, f.base.mainT, f.working, "baseline B2", "B2's working set on the baseline"); err != nil {
			return nil, err
		}
	}
	if f.raw, err = r.openRaw(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// workingSet is B2's 10 000 keys, the same in every run.
func workingSet() []string {
	working := make([]string, 10_000)
	wr := newRand(42)
	for i := range working {
		working[i] = UniqueKey(wr, "evt_")
	}
	return working
}

// prerecord delivers the working set once through t, so that its keys
// are repeats when measured; name is the system in the error.
func (r *run) prerecord(ctx context.Context, t *HTTPTarget, working []string, name, what string) error {
	r.logf("recording %s", what)
	if failed := Prerecord(ctx, t, working, 64); failed > 0 {
		return fmt.Errorf("%s working set: %d of %d deliveries failed", name, failed, len(working))
	}
	return nil
}

// systemNames are the systems' names, in order.
func systemNames(systems []*system) []string {
	out := make([]string, len(systems))
	for i, s := range systems {
		out[i] = s.name
	}
	return out
}

// wants says whether the system named runs: Options.Systems names it, or
// names none.
func (r *run) wants(name string) bool {
	return len(r.o.Systems) == 0 || slices.Contains(r.o.Systems, name)
}

// selectSystems keeps those of all that names lists (all when it lists
// none). A name that matches none is an error, not a system silently
// left out of the run and of its goals: a typo, or N0 without nginx.
func selectSystems(all []*system, names []string) ([]*system, error) {
	if len(names) == 0 {
		return all, nil
	}
	var unknown []string
	for _, n := range names {
		if !slices.ContainsFunc(all, func(s *system) bool { return s.name == n }) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("-systems: no system %s in this run (it has %s)", strings.Join(unknown, ", "), strings.Join(systemNames(all), ","))
	}
	return slices.DeleteFunc(all, func(s *system) bool { return !slices.Contains(names, s.name) }), nil
}

// systems are every one of the fleet's cells, in the order the rounds
// start from.
func (r *run) systems(f *fleet) []*system {
	tlsSchema := r.id + "_tls"
	systems := []*system{
		{name: "U0", desc: "the upstream alone, no hop (ceiling of any HTTP hop here)", doer: NewHTTPTarget(strings.TrimPrefix(r.up.URL, "http://"), unique(1))},
		{name: "B0", desc: "bare Fiber v2 proxy hop", doer: NewHTTPTarget(f.proxy.Addr, unique(1)), child: f.proxy},
	}
	systems = append(systems, f.trio.systems(f.working)...)
	systems = append(systems,
		&system{name: "B1t", desc: "Redis+PG over TLS (kept connections), 100% unique", doer: f.tlsT.WithMix(unique(1)), child: f.tls, schema: tlsSchema},
		&system{name: "B2t", desc: "Redis+PG over TLS (kept connections), 100% repeats", doer: f.tlsT.WithMix(&Mix{Working: f.working}), child: f.tls, schema: tlsSchema},
		&system{name: "B2tn", desc: "Redis+PG over TLS, a handshake per request, 100% repeats", doer: f.tlsNewT.WithMix(&Mix{Working: f.working}), child: f.tls, schema: tlsSchema},
	)
	systems = append(systems, f.raw.systems(r.id)...)
	systems = append(systems, f.async)
	systems = append(systems, f.peerSystems...)
	if f.base != nil {
		systems = append(systems, f.base.systems(f.working)...)
	}
	for _, s := range systems {
		s.closed = map[int]*agg{}
	}
	return systems
}

// doneAfterRounds are the processes the scale and memory runs do not use.
func (f *fleet) doneAfterRounds() []*Child {
	done := append([]*Child{f.proxy, f.trio.ledger, f.trio.embedded, f.tls, f.async.child}, f.peers.children()...)
	if f.base != nil {
		done = append(done, f.base.main, f.base.ledger, f.base.embedded)
	}
	return done
}

// unique is a mix of share new keys, the rest repeats of earlier ones.
func unique(share float64) *Mix { return &Mix{Unique: share, Prefix: "evt_"} }

// trio is one build's three gateways: Redis+PostgreSQL, ledger only, and
// embedded SQLite+memory.
type trio struct {
	base                     bool // Options.Baseline's, not this program's
	main, ledger, embedded   *Child
	mainT, ledgerT           *HTTPTarget
	mainSchema, ledgerSchema string
}

// startTrio starts the gateways of exe: this program's when exe is "",
// else the baseline's, with schemas, prefix and file of their own.
func (r *run) startTrio(ctx context.Context, exe string) (*trio, error) {
	t := &trio{base: exe != ""}
	process, tag, sqlite := "gw", "", "b5.db"
	if t.base {
		process, tag, sqlite = "base", "b", "b5-base.db"
	}
	t.mainSchema, t.ledgerSchema = r.id+"_"+tag+"main", r.id+"_"+tag+"ledger"
	mainDSN, err := r.pg.Schema(ctx, t.mainSchema)
	if err != nil {
		return nil, err
	}
	ledgerDSN, err := r.pg.Schema(ctx, t.ledgerSchema)
	if err != nil {
		return nil, err
	}
	if t.main, err = r.gatewayExe(ctx, exe, process+"-redis-pg", GatewayConfig{Store: "postgres", DSN: mainDSN, Screen: "redis",
		Prefix: r.prefix(tag + "main"), OnUnavailable: r.o.ScreenOnUnavailable}); err != nil {
		return nil, err
	}
	if t.ledger, err = r.gatewayExe(ctx, exe, process+"-ledger-only", GatewayConfig{Store: "postgres", DSN: ledgerDSN, Screen: "none", LocalCache: "0"}); err != nil {
		return nil, err
	}
	if t.embedded, err = r.gatewayExe(ctx, exe, process+"-embedded", GatewayConfig{Store: "sqlite", DSN: filepath.Join(r.dir, sqlite), Screen: "memory"}); err != nil {
		return nil, err
	}
	t.mainT, t.ledgerT = NewHTTPTarget(t.main.Addr, nil), NewHTTPTarget(t.ledger.Addr, nil)
	return t, nil
}

// trioGateway picks one of a trio's gateways.
type trioGateway int

const (
	onMain trioGateway = iota
	onLedger
	onEmbedded
)

// trioCells are B1–B5; a baseline's are named name@base and described
// "baseline: " + baseDesc.
var trioCells = []struct {
	name, desc, baseDesc string
	on                   trioGateway
	unique               float64 // 0: B2's working set
}{
	{"B1", "Redis+PG, 100% unique", "Redis+PG, 100% unique", onMain, 1},
	{"B2", "Redis+PG, 100% repeats (10k recorded keys)", "Redis+PG, 100% repeats", onMain, 0},
	{"B3", "Redis+PG, 70% unique / 30% repeats", "Redis+PG, 70/30", onMain, 0.7},
	{"B3s", "Redis+PG, retry storm 10/90", "Redis+PG, 10/90", onMain, 0.1},
	{"B4u", "ledger only (screen.driver: none), 100% unique", "ledger only, 100% unique", onLedger, 1},
	{"B4", "ledger only (seed design), 70/30", "ledger only, 70/30", onLedger, 0.7},
	{"B4s", "ledger only (seed design), 10/90", "ledger only, 10/90", onLedger, 0.1},
	{"B5", "embedded SQLite+memory, 70/30", "embedded SQLite+memory, 70/30", onEmbedded, 0.7},
}

// systems are the trio's B1–B5 cells.
func (t *trio) systems(working []string) []*system {
	out := make([]*system, 0, len(trioCells))
	for _, c := range trioCells {
		s := &system{name: c.name, desc: c.desc}
		if t.base {
			s.name, s.desc = c.name+"@base", "baseline: "+c.baseDesc
		}
		mix := &Mix{Working: working}
		if c.unique > 0 {
			mix = unique(c.unique)
		}
		switch c.on {
		case onMain:
			s.doer, s.child, s.schema = t.mainT.WithMix(mix), t.main, t.mainSchema
		case onLedger:
			s.doer, s.child, s.schema = t.ledgerT.WithMix(mix), t.ledger, t.ledgerSchema
		case onEmbedded:
			s.doer, s.child = NewHTTPTarget(t.embedded.Addr, mix), t.embedded
		}
		out = append(out, s)
	}
	return out
}

// raw is L1 and L2: PostgreSQL's and Redis's own rates, no gateway in
// front.
type raw struct {
	l1      *PGInsert
	l1Conns int
	l2      *RedisSetNX
}

func (r *run) openRaw(ctx context.Context) (*raw, error) {
	dsn, err := r.pg.Schema(ctx, r.id+"_l1")
	if err != nil {
		return nil, err
	}
	maxConc := slices.Max(r.o.Concurrency)
	x := &raw{l1Conns: min(r.o.L1Conns, maxConc)}
	if x.l1, err = NewPGInsert(ctx, dsn, x.l1Conns); err != nil {
		return nil, err
	}
	x.l2 = NewRedisSetNX(r.o.RedisAddr, r.prefix(""), maxConc)
	return x, nil
}

func (x *raw) systems(id string) []*system {
	return []*system{
		{name: "L1", desc: fmt.Sprintf("PostgreSQL single-row INSERT tx (≤%d conns)", x.l1Conns), doer: x.l1, schema: id + "_l1"},
		{name: "L2", desc: "Redis SET NX, unpipelined", doer: x.l2},
	}
}

func (x *raw) close() {
	_ = x.l2.Close()
	x.l1.Close()
}

// seeds numbers the cells, so that each draws keys of its own.
type seeds uint64

func (s *seeds) next() uint64 {
	*s++
	return uint64(*s)
}

// passOrder is the systems in the order of one pass (a round's visit of
// one concurrency, or an open-loop round): shuffled afresh from the run's
// seeded generator. A rotation kept each system's predecessor fixed, so
// one system always inherited the same other's leftovers (a checkpoint
// after its inserts, a queue draining, caches it filled).
func (r *run) passOrder(systems []*system) []*system {
	out := slices.Clone(systems)
	r.order.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// closedRounds runs the closed loop, interleaved: every round visits every
// concurrency and every system, in an order shuffled each time, so that
// drift (other load, a growing ledger, checkpoints) hits all of them alike.
func (r *run) closedRounds(ctx context.Context, systems []*system, seed *seeds) error {
	for round := range r.o.Rounds {
		r.logf("round %d/%d (load %.2f)", round+1, r.o.Rounds, LoadAvg())
		for _, c := range r.o.Concurrency {
			for _, s := range r.passOrder(systems) {
				profile := r.o.ProfileDir != "" && round == r.o.Rounds-1 && c == Headline && s.child != nil && s.child.Debug != ""
				if err := r.closedCell(ctx, s, c, seed.next(), profile); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// closedCell measures s at c connections into s.closed[c], profiling its
// child meanwhile if profile is set, and times A1's drain after it.
func (r *run) closedCell(ctx context.Context, s *system, c int, seed uint64, profile bool) error {
	w := r.window(s)
	var prof <-chan error
	if profile {
		prof = r.profile(ctx, s)
	}
	cell := ClosedLoop(ctx, s.doer, c, r.o.Warmup, r.o.Cell, seed, w)
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
	return r.alive()
}

// profile takes a CPU profile of s's child over the measured part of the
// cell starting now, into Options.ProfileDir; the channel gives its error.
func (r *run) profile(ctx context.Context, s *system) <-chan error {
	prof := make(chan error, 1)
	go func() {
		sleepCtx(ctx, r.o.Warmup)
		prof <- s.child.Profile(ctx, r.o.Cell, filepath.Join(r.o.ProfileDir, s.name+".pprof"))
	}()
	return prof
}

// openRounds runs the open loop at a fixed rate, for latency without
// coordinated omission. Interleaved like the closed loop: OpenDur is split
// over the rounds, each round visits every system in a shuffled order, and
// a system's percentiles come from all its slices together. One slice per
// system in a fixed order let whatever the machine did at one moment (a
// checkpoint after the ledger systems' inserts, autovacuum) land on one
// system's whole tail.
func (r *run) openRounds(ctx context.Context, systems []*system, seed *seeds) error {
	o := r.o
	r.logf("open loop at %.0f req/s, %d rounds", o.OpenRate, o.Rounds)
	slice := o.OpenDur / time.Duration(max(1, o.Rounds))
	for range max(1, o.Rounds) {
		for _, s := range r.passOrder(systems) {
			w := r.window(s)
			cell := OpenLoop(ctx, s.doer, o.OpenRate, o.OpenWorkers, o.Warmup, slice, seed.next(), w)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.open == nil {
				s.open = &agg{}
			}
			s.open.add(cell, w)
			if s.drain != nil {
				// Else the queue a slice left is delivered during the
				// next system's slice, on the same two cores.
				if err := r.drainAfter(ctx, s, s.open); err != nil {
					return err
				}
			}
			r.logf("  %-4s %6.0f/s  p50 %-8v p99 %-8v p99.9 %-8v err %d", s.name, cell.Throughput(), cell.Hist.Quantile(0.5).Round(time.Microsecond),
				cell.Hist.Quantile(0.99).Round(time.Microsecond), cell.Hist.Quantile(0.999).Round(time.Microsecond), cell.Errors)
			if err := r.alive(); err != nil {
				return err
			}
		}
	}
	return nil
}

// endRounds reports the systems' results and stops done, noting each
// process's peak RSS.
func (r *run) endRounds(systems []*system, done []*Child) {
	for _, s := range systems {
		r.report.addSystem(s)
	}
	for _, c := range done {
		r.notePeakRSS(c)
		r.stop(c)
	}
}

func (r *run) notePeakRSS(c *Child) {
	if s, err := c.Sample(); err == nil {
		r.report.PeakRSS[c.Name] = mib(s.PeakRSS)
	}
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
	if err := r.prerecord(ctx, t, working, "B2t", "B2's working set on the TLS gateway"); err != nil {
		return nil, nil, nil, err
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
	if err := r.emptyVsPrefilled(ctx, sc, gwEmpty, gwPre); err != nil {
		return err
	}
	if err := r.sweeperWindows(ctx, sc, gwPre, preDSN); err != nil {
		return err
	}
	if left, err := r.pg.CountExpired(ctx, r.id+"_prefilled"); err == nil {
		sc.ExpiredLeft = left
	}
	r.report.Scale = sc
	return nil
}

// emptyVsPrefilled measures B1 on the empty and the prefilled ledger,
// alternating which goes first, into sc. Each first gets a cell of load
// that is not measured: the bulk load and its index builds leave the
// prefilled ledger's key index out of PostgreSQL's buffers, which a ledger
// in service has in them.
func (r *run) emptyVsPrefilled(ctx context.Context, sc *ScaleResult, gwEmpty, gwPre *Child) error {
	empty := &system{name: "B1-empty", child: gwEmpty, doer: NewHTTPTarget(gwEmpty.Addr, unique(1))}
	pre := &system{name: "B1-prefilled", child: gwPre, doer: NewHTTPTarget(gwPre.Addr, unique(1))}
	for _, s := range []*system{empty, pre} {
		ClosedLoop(ctx, s.doer, Headline, 0, r.o.ScaleCell, 890, &window{child: s.child})
	}
	ea, pa := &agg{}, &agg{}
	for round := range r.o.ScaleRounds {
		order := []*system{empty, pre}
		if round%2 == 1 {
			order = []*system{pre, empty}
		}
		for _, s := range order {
			w := &window{child: s.child}
			cell := ClosedLoop(ctx, s.doer, Headline, r.o.Warmup, r.o.ScaleCell, uint64(900+round), w)
			if err := r.afterCell(ctx); err != nil {
				return err
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
	return nil
}

// sweeperWindows measures B3 on the prefilled ledger with the sweeper off
// and on, into sc. The sweeper is a second gateway replica on the same
// ledger, with no traffic and sweep_interval 200ms, started for the "on"
// windows and stopped for the "off" ones: exactly the gateway's own
// sweeper (SweepAll in batches of 1000 with SKIP LOCKED), deleting the
// expired rows while B3's mix runs on the first replica.
func (r *run) sweeperWindows(ctx context.Context, sc *ScaleResult, gwPre *Child, preDSN string) error {
	o := r.o
	sweepCfg := GatewayConfig{Store: "postgres", DSN: preDSN, Screen: "none", LocalCache: "0", Sweep: "200ms"}
	b3 := NewHTTPTarget(gwPre.Addr, unique(0.7))
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
		cell := ClosedLoop(ctx, b3, Headline, o.Warmup, o.ScaleCell, uint64(950+i), w)
		off.add(cell, w)
		r.logf("  B3 sweeper off %8.0f/s  p99 %v", cell.Throughput(), cell.Hist.Quantile(0.99).Round(time.Microsecond))

		sw, err := r.gateway(ctx, "gw-sweeper", sweepCfg)
		if err != nil {
			return err
		}
		w = &window{child: gwPre}
		cell = ClosedLoop(ctx, b3, Headline, o.Warmup, o.ScaleCell, uint64(970+i), w)
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
		if err := r.afterCell(ctx); err != nil {
			return err
		}
	}
	sc.SweepOff, sc.SweepOn = summarize(off), summarize(on)
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
	cell := ClosedLoop(ctx, t.WithMix(unique(0.7)), 256, 0, r.o.RSSDur, 777, w)
	close(stop)
	<-done
	m.Throughput = cell.Throughput()
	m.Requests, m.Errors = cell.Requests, cell.Errors
	m.finish()
	r.report.RSS = m
	r.logf("memory: %.0f req/s, RSS first minute %.1f MiB, last minute %.1f MiB, peak %.1f MiB", m.Throughput, m.FirstMinute, m.LastMinute, m.PeakRSS)
	return r.afterCell(ctx)
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
