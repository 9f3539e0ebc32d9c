package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hookstamp/hookstamp/internal/faultproxy"
)

// Options configure a run. Zero values take the defaults named.
type Options struct {
	// Seed draws the fault schedule and every provider's events; print it
	// to replay a run. Zero picks one from the clock.
	Seed uint64
	// Duration is how long providers create new events (2m). Faults happen
	// within it; its last tenth is quiet.
	Duration time.Duration
	// Drain bounds how long providers may take to settle the events they
	// are on once Duration is over (60s).
	Drain time.Duration
	// Faults are the kinds the schedule draws from (nil: AllFaults; empty:
	// no fault).
	Faults []FaultKind
	// FaultSpacing is the mean quiet time between two faults (2.5s).
	FaultSpacing time.Duration
	// MaxHold caps how long each fault lasts (0: the kinds' own ranges,
	// up to 5s).
	MaxHold time.Duration
	// Senders is the number of independent senders (18).
	Senders int
	// Think is a sender's mean pause between events (150ms).
	Think time.Duration
	// Lease and Timeout are screen.lease and every route's upstream.timeout
	// (3s, 1s): short, so that takeovers happen within the run.
	Lease, Timeout time.Duration
	// StorePass sets store.on_unavailable: pass (default reject).
	StorePass bool
	// Inbox makes the upstream apply every effect through the inbox
	// library, in a PostgreSQL database of its own, and the audit count
	// effects: none may happen twice, not even after a lease takeover.
	Inbox bool
	// Async adds the store-and-forward route "relay" (delivery: async) and
	// senders on it; the audit checks its deliveries (async.go).
	Async bool
	// GatewayBin is the gateway binary; empty builds ./cmd/gateway from the
	// module into the work directory.
	GatewayBin string
	// Race builds the gateway with the race detector; a race it reports
	// is a violation. It cannot go with GatewayBin: build that binary
	// with -race instead.
	Race bool
	// WorkDir holds the logs, configurations and the upstream log; empty
	// makes a temporary one, removed after a clean run unless Keep.
	WorkDir string
	Keep    bool
	// PostgresAdminDSN is where the run's database is created
	// (DefaultPostgresAdminDSN).
	PostgresAdminDSN string
	// SampleEvery is how often RSS and goroutines are sampled (1s).
	SampleEvery time.Duration
	// Soak checks that RSS and goroutines stay flat.
	Soak bool
	// Progress receives a line per fault and a status every 10s (nil: none).
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Minute
	}
	if o.Drain <= 0 {
		o.Drain = 60 * time.Second
	}
	if o.Faults == nil {
		o.Faults = AllFaults
	}
	if o.Senders <= 0 {
		o.Senders = 18
	}
	if o.Think <= 0 {
		o.Think = 150 * time.Millisecond
	}
	if o.Lease <= 0 {
		o.Lease = 3 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = time.Second
	}
	if o.PostgresAdminDSN == "" {
		o.PostgresAdminDSN = DefaultPostgresAdminDSN()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Sample is one reading of a gateway process's resources.
type Sample struct {
	Time          time.Time
	Life          string
	RSS           int64
	Goroutines    float64
	HasGoroutines bool
}

// Report is the outcome of a run.
type Report struct {
	Seed     uint64
	Duration time.Duration
	// Load is how long providers created events: Duration, or longer when
	// the faults took longer to inject than planned.
	Load     time.Duration
	Elapsed  time.Duration
	WorkDir  string
	Options  Options
	Schedule []Fault
	Injected []FaultRecord
	Lives    []*Life
	Audit    *Audit
	// Samples are per gateway index.
	Samples [3][]Sample
	// Stalls are the moments the harness process was frozen.
	Stalls []Stall
	// OperatorFailures are admin calls of the operator that failed (a
	// gateway or the ledger down at the time).
	OperatorFailures int
	// SoakProblems are resource growths beyond tolerance (Soak only).
	SoakProblems []string
}

// OK reports whether the run found no violation, and did something: at
// least one event acknowledged and one delivery applied (a run where
// every send failed would otherwise pass). TestChaosShort sets firmer
// floors for the run inside make test.
func (r *Report) OK() bool {
	return r.Audit != nil && len(r.Audit.Violations) == 0 && len(r.SoakProblems) == 0 &&
		r.Audit.Acked > 0 && r.Audit.Applied > 0
}

type runner struct {
	o        Options
	progress *lockedWriter
	start    time.Time
	work     string
	redis    *RedisServer
	rproxies []*faultproxy.Proxy // one per gateway: Redis can be cut for all, or for one
	pproxy   *faultproxy.Proxy
	db       *Database
	up       *Upstream
	effects  *Effects // Inbox only
	gws      []*GatewayProc
	// providers send the load (set once it starts).
	providers *Providers
	metrics   *http.Client

	mu       sync.Mutex
	injected []FaultRecord
	samples  [3][]Sample
	stalls   []Stall
}

// Run starts the deployment, drives it through the fault schedule, audits
// the result and tears everything down. An error means the harness could
// not run (a dependency missing, a gateway that would not start); the
// gateway's violations are in the Report.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if o.Race && o.GatewayBin != "" {
		return nil, errors.New("-race builds the gateway with the race detector, and -gateway names one built already: build that one with go build -race, and leave -race out")
	}
	o.defaults()
	r := &runner{o: o, progress: &lockedWriter{w: o.Progress}, metrics: &http.Client{Timeout: 2 * time.Second}}
	rep = &Report{Seed: o.Seed, Duration: o.Duration, Options: o}
	if r.work, err = workDir(o.WorkDir); err != nil {
		return nil, err
	}
	rep.WorkDir = r.work
	defer func() {
		r.teardown()
		if err == nil && rep.OK() && !o.Keep && o.WorkDir == "" {
			os.RemoveAll(r.work)
			rep.WorkDir = ""
		}
	}()

	if err := r.setup(ctx); err != nil {
		return rep, err
	}
	rep.Schedule = r.planFaults()
	op, err := r.runLoad(ctx, rep)
	if err != nil {
		return rep, err
	}
	in, err := r.auditInput(op, rep)
	if err != nil {
		return rep, err
	}
	rep.Injected, rep.Lives, rep.Stalls = in.Faults, in.Lives, in.Stalls
	rep.Audit = RunAudit(in)
	if o.Soak {
		rep.SoakProblems = flatness(rep.Samples)
	}
	writeSends(filepath.Join(r.work, "sends.jsonl"), in.Events)
	return rep, nil
}

// workDir is dir, made if missing, or a new temporary directory if dir is
// empty.
func workDir(dir string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", "hookstamp-chaos-")
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// planFaults draws the run's fault schedule and prints it.
func (r *runner) planFaults() []Fault {
	o := r.o
	schedule := NewSchedule(o.Seed, o.Duration, o.Faults, o.FaultSpacing, o.MaxHold)
	r.logf("seed %d: %d faults over %v, %d senders, work dir %s", o.Seed, len(schedule), o.Duration, o.Senders, r.work)
	for _, f := range schedule {
		r.logf("  planned %s", f)
	}
	return schedule
}

// runLoad drives the providers' load through rep.Schedule, lets them
// settle their events and stops the gateways. It returns the operator
// for its results.
func (r *runner) runLoad(ctx context.Context, rep *Report) (*operator, error) {
	o := r.o
	r.providers = NewProviders(ProviderOptions{
		Seed: o.Seed, Senders: o.Senders, Think: o.Think, StripeSecret: stripeSecret(o.Seed), Async: o.Async,
		PDuplicate: 0.3, PLate: 0.1, PTamper: 0.04, PForged: 0.05, PDecline: 0.05,
	}, r.targets())
	r.start = time.Now()
	genCtx, stopGen := context.WithCancel(ctx)
	defer stopGen()
	hardCtx, stopHard := context.WithCancel(ctx)
	defer stopHard()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { defer bg.Done(); r.sample(sampleCtx) }()
	go func() { defer bg.Done(); r.watchStalls(sampleCtx) }()
	go func() { defer bg.Done(); r.status(sampleCtx, r.providers) }()
	loadDone := make(chan struct{})
	go func() { r.providers.Run(genCtx, hardCtx); close(loadDone) }()
	// The operator resolves keys held on holdRoute while providers retry
	// them, as on-call would.
	op := newOperator(r.gws, r.up, 2500*time.Millisecond)
	opCtx, stopOp := context.WithCancel(ctx)
	defer stopOp()
	bg.Add(1)
	go func() { defer bg.Done(); op.run(opCtx, 500*time.Millisecond) }()

	faultErr := r.runSchedule(ctx, rep.Schedule)
	if faultErr == nil {
		r.awaitLoadEnd(ctx)
	}
	stopGen()
	drain := time.AfterFunc(o.Drain, stopHard)
	defer drain.Stop()
	r.restoreAll()
	rep.Load = time.Since(r.start)
	r.logf("load stopped after %v; waiting for providers to settle their events", rep.Load.Round(time.Second))
	<-loadDone
	stopOp()
	r.closeOut(ctx, op)
	stopSampling()
	bg.Wait()
	rep.Elapsed = time.Since(r.start)
	if faultErr != nil && ctx.Err() == nil {
		return op, faultErr
	}
	return op, ctx.Err()
}

// awaitLoadEnd lets the load last Duration, and longer if injecting the
// faults took longer than planned: every planned fault happens under load,
// and a quiet stretch follows the last one.
func (r *runner) awaitLoadEnd(ctx context.Context) {
	quiet := max(4*time.Second, r.o.Duration/10)
	sleepCtx(ctx, max(time.Until(r.start.Add(r.o.Duration)), quiet-time.Since(r.lastFaultEnd())))
}

// closeOut gives the operator a last pass over the held keys, lets the
// async queue drain and stops the gateways.
func (r *runner) closeOut(ctx context.Context, op *operator) {
	if !op.pass(ctx) {
		r.logf("the operator's last pass over the held keys did not complete")
	}
	if r.o.Async {
		r.drainQueue(ctx)
	}
	r.logf("providers done; stopping the gateways (SIGTERM)")
	for _, g := range r.gws {
		r.scrape(ctx, g)
		g.Terminate(r.shutdownTimeout() + 5*time.Second)
	}
}

// auditInput closes the upstream and gathers what the audit reads.
func (r *runner) auditInput(op *operator, rep *Report) (in *AuditInput, err error) {
	if err := r.up.Close(); err != nil {
		return nil, fmt.Errorf("close upstream: %w", err)
	}
	o := r.o
	in = &AuditInput{Events: r.providers.Events(), Lease: o.Lease, Timeout: o.Timeout, ShutdownTimeout: r.shutdownTimeout(),
		StorePass: o.StorePass, Inbox: o.Inbox}
	in.Resolutions, in.HoldCutoff, rep.OperatorFailures = op.results()
	if in.Upstream, err = ReadUpstreamLog(filepath.Join(r.work, "upstream.log")); err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if in.Ledger, err = r.db.Ledger(actx); err != nil {
		return nil, err
	}
	if r.effects != nil {
		if in.Effects, err = r.effects.Read(actx); err != nil {
			return nil, err
		}
	}
	if err := r.readGatewayLogs(in); err != nil {
		return nil, err
	}
	r.mu.Lock()
	in.Faults = append([]FaultRecord(nil), r.injected...)
	in.Stalls = append([]Stall(nil), r.stalls...)
	rep.Samples = r.samples
	r.mu.Unlock()
	return in, nil
}

// readGatewayLogs adds every gateway incarnation, its log and the log's
// problems to in.
func (r *runner) readGatewayLogs(in *AuditInput) error {
	in.Logs = map[string][]LogLine{}
	for _, g := range r.gws {
		for _, l := range g.Lives() {
			in.Lives = append(in.Lives, l)
			lines, problems, err := ReadGatewayLog(l.LogPath)
			if err != nil {
				return fmt.Errorf("read %s log: %w", l.Name, err)
			}
			in.Logs[l.Name] = lines
			for _, p := range problems {
				in.LogProblems = append(in.LogProblems, l.Name+": "+p)
			}
		}
	}
	return nil
}

func stripeSecret(seed uint64) string { return fmt.Sprintf("whsec_chaos_%d", seed) }

func (r *runner) shutdownTimeout() time.Duration { return 5 * time.Second }

func (r *runner) logf(format string, args ...any) {
	el := time.Duration(0)
	if !r.start.IsZero() {
		el = time.Since(r.start)
	}
	fmt.Fprintf(r.progress, "[%6.1fs] %s\n", el.Seconds(), fmt.Sprintf(format, args...))
}

// setup starts Redis, the proxies, the database, the upstream and the
// gateways.
func (r *runner) setup(ctx context.Context) (err error) {
	bin := r.o.GatewayBin
	if bin == "" {
		if bin, err = buildGateway(ctx, r.work, r.o.Race); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(r.work, "redis"), 0o755); err != nil {
		return err
	}
	if r.redis, err = StartRedis(filepath.Join(r.work, "redis")); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		p, err := faultproxy.New(fmt.Sprintf("redis-g%d", i+1), r.redis.Addr)
		if err != nil {
			return err
		}
		r.rproxies = append(r.rproxies, p)
	}
	if r.db, err = CreateDatabase(ctx, r.o.PostgresAdminDSN); err != nil {
		return err
	}
	u, _ := url.Parse(r.o.PostgresAdminDSN)
	pgAddr := u.Host
	if u.Port() == "" {
		pgAddr += ":5432"
	}
	if r.pproxy, err = faultproxy.New("postgres", pgAddr); err != nil {
		return err
	}
	dsn, err := r.db.DSNVia(r.pproxy.Addr())
	if err != nil {
		return err
	}
	if r.up, err = StartUpstream(filepath.Join(r.work, "upstream.log")); err != nil {
		return err
	}
	if r.o.Inbox {
		if r.effects, err = OpenEffects(ctx, r.o.PostgresAdminDSN); err != nil {
			return err
		}
		r.up.ApplyThrough(r.effects)
	}
	storeMode := "reject"
	if r.o.StorePass {
		storeMode = "pass"
	}
	s := GatewaySettings{PostgresDSN: dsn, UpstreamURL: r.up.URL(),
		StripeSecret: stripeSecret(r.o.Seed), Lease: r.o.Lease, Timeout: r.o.Timeout, WaitTimeout: 2 * time.Second,
		Shutdown: r.shutdownTimeout(), StoreFailMode: storeMode, LocalCache: "8MiB", LogLevel: "info", Async: r.o.Async}
	for i := 0; i < 3; i++ {
		s.RedisAddr = r.rproxies[i].Addr()
		g, err := newGatewayProc(i, bin, r.work, s)
		if err != nil {
			return err
		}
		r.gws = append(r.gws, g)
	}
	cfg, err := r.gws[0].ConfigPath("migrate")
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate", "-config", cfg).CombinedOutput(); err != nil {
		return fmt.Errorf("gateway migrate: %w\n%s", err, out)
	}
	for _, g := range r.gws {
		if err := g.Start(); err != nil {
			return err
		}
	}
	return nil
}

// buildGateway builds ./cmd/gateway of the module the harness runs in.
func buildGateway(ctx context.Context, dir string, race bool) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the hookstamp module: cannot build ./cmd/gateway (pass the binary instead)")
	}
	bin := filepath.Join(dir, "gateway")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/gateway")...)
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gateway: %w\n%s", err, out)
	}
	return bin, nil
}

func (r *runner) targets() []Target {
	t := make([]Target, len(r.gws))
	for i, g := range r.gws {
		t[i] = g
	}
	return t
}

// teardown stops everything the run started; safe on a partial setup.
func (r *runner) teardown() {
	for _, g := range r.gws {
		g.Kill()
	}
	if r.up != nil {
		r.up.Close()
	}
	if r.pproxy != nil {
		r.pproxy.Close()
	}
	for _, p := range r.rproxies {
		p.Close()
	}
	if r.redis != nil {
		r.redis.Kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.db != nil {
		if err := r.db.Drop(ctx); err != nil {
			r.logf("warning: %v", err)
		}
	}
	if r.effects != nil {
		if err := r.effects.Close(ctx); err != nil {
			r.logf("warning: %v", err)
		}
	}
}

// lastFaultEnd is when the last injected fault was undone (the start of
// the load if none was).
func (r *runner) lastFaultEnd() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.injected); n > 0 {
		return r.injected[n-1].End
	}
	return r.start
}

// runSchedule injects each fault at its planned time, or as soon as the
// previous one is over when injecting ran late.
func (r *runner) runSchedule(gen context.Context, schedule []Fault) error {
	for _, f := range schedule {
		if !sleepCtx(gen, time.Until(r.start.Add(f.At))) {
			return nil
		}
		rec := FaultRecord{Fault: f, Start: time.Now()}
		r.logf("inject  %s", f)
		note, err := r.inject(gen, f)
		rec.End, rec.Note = time.Now(), note
		r.mu.Lock()
		r.injected = append(r.injected, rec)
		r.mu.Unlock()
		if note != "" {
			r.logf("        %s", note)
		}
		if err != nil {
			return fmt.Errorf("inject %s: %w", f.Kind, err)
		}
	}
	return nil
}

func (r *runner) inject(ctx context.Context, f Fault) (string, error) {
	switch f.Kind {
	case FaultKill:
		return r.killMidForward(ctx, r.gws[f.Gateway], f.Hold)
	case FaultRolling:
		return r.rollingRestart(ctx)
	case FaultFreeze:
		return r.freezeMidForward(ctx, r.gws[f.Gateway], f.Hold)
	case FaultRedisCut:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Cut, r.rproxies...)
	case FaultRedisHostLost:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Strand, r.rproxies...)
	case FaultRedisBlackhole:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Blackhole, r.rproxies...)
	case FaultRedisSlow:
		holdNetFault(ctx, f.Hold, func(p *faultproxy.Proxy) { p.Slow(f.Latency) }, r.rproxies...)
	case FaultRedisPartition:
		// With the application slow, deliveries stay in flight long
		// enough for the two sides of the partition to meet.
		r.up.SetMode(UpstreamMode{SlowMin: r.o.Timeout / 10, SlowMax: r.o.Timeout * 45 / 100})
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Cut, r.rproxies[f.Gateway])
		r.up.SetMode(UpstreamMode{})
	case FaultRedisFlush:
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return "", r.redis.FlushAll(fctx)
	case FaultRedisRestart:
		r.redis.Kill()
		sleepCtx(ctx, f.Hold)
		return "", r.redis.Start()
	case FaultPGCut:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Cut, r.pproxy)
	case FaultPGCutIntake:
		return r.cutDuringIntake(ctx, f.Hold), nil
	case FaultPGCutCompletion:
		return r.cutDuringCompletion(ctx, f.Hold), nil
	case FaultPGBlackhole:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Blackhole, r.pproxy)
	case FaultPGLostReplies:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Mute, r.pproxy)
	case FaultPGHostLost:
		holdNetFault(ctx, f.Hold, (*faultproxy.Proxy).Strand, r.pproxy)
	case FaultPGSlow:
		holdNetFault(ctx, f.Hold, func(p *faultproxy.Proxy) { p.Slow(f.Latency) }, r.pproxy)
	case FaultUpSlow:
		r.holdUpstreamMode(ctx, f.Hold, UpstreamMode{SlowMin: r.o.Timeout / 10, SlowMax: r.o.Timeout * 45 / 100})
	case FaultUpFailing:
		r.holdUpstreamMode(ctx, f.Hold, UpstreamMode{FailRatio: f.Ratio})
	case FaultUpHang:
		r.holdUpstreamMode(ctx, f.Hold, UpstreamMode{Hang: true})
	case FaultUpReset:
		r.holdUpstreamMode(ctx, f.Hold, UpstreamMode{Reset: true})
	case FaultUpLost:
		r.holdUpstreamMode(ctx, f.Hold, UpstreamMode{LoseAnswers: true})
	default:
		return "", fmt.Errorf("unknown fault %q", f.Kind)
	}
	return "", nil
}

// holdNetFault applies fault to the network through each of proxies for
// hold, then restores it.
func holdNetFault(ctx context.Context, hold time.Duration, fault func(*faultproxy.Proxy), proxies ...*faultproxy.Proxy) {
	for _, p := range proxies {
		fault(p)
	}
	sleepCtx(ctx, hold)
	for _, p := range proxies {
		p.Restore()
	}
}

// holdUpstreamMode puts the upstream in mode for hold, then back to normal.
func (r *runner) holdUpstreamMode(ctx context.Context, hold time.Duration, mode UpstreamMode) {
	r.up.SetMode(mode)
	sleepCtx(ctx, hold)
	r.up.SetMode(UpstreamMode{})
}

// rollingRestart stops each gateway with SIGTERM and starts it again, one
// after the other.
func (r *runner) rollingRestart(ctx context.Context) (string, error) {
	var notes []string
	for _, g := range r.gws {
		r.scrape(ctx, g)
		life := g.Current()
		code := g.Terminate(r.shutdownTimeout() + 5*time.Second)
		if life != nil {
			notes = append(notes, fmt.Sprintf("%s exit %d", life.Name, code))
		}
		if err := r.startGateway(g); err != nil {
			return strings.Join(notes, ", "), err
		}
	}
	return strings.Join(notes, ", "), nil
}

// redisNet applies f to the network between every gateway and Redis.
func (r *runner) redisNet(f func(*faultproxy.Proxy)) {
	for _, p := range r.rproxies {
		f(p)
	}
}

// holdAForward makes the upstream apply and hold life's forwards until
// one is held (caught) or 3 s passed; the caller ends the hold.
func (r *runner) holdAForward(life *Life) (caught bool, held int) {
	r.up.HoldFrom(life.Name, true)
	caught = poll(3*time.Second, 2*time.Millisecond, func() error {
		if r.up.Holding(life.Name) == 0 {
			return errors.New("none held")
		}
		return nil
	}) == nil
	return caught, r.up.Holding(life.Name)
}

// killMidForward makes the upstream apply and hold g's forwards, SIGKILLs g
// as soon as one is held (the upstream acted, the gateway never hears the
// answer), and restarts g after down.
func (r *runner) killMidForward(ctx context.Context, g *GatewayProc, down time.Duration) (string, error) {
	life := g.Current()
	if life == nil {
		return "was not running", r.startGateway(g)
	}
	caught, held := r.holdAForward(life)
	r.scrape(ctx, g)
	g.Kill()
	r.up.HoldFrom(life.Name, false)
	note := fmt.Sprintf("SIGKILLed %s with %d forward(s) applied upstream and unanswered", life.Name, held)
	if !caught {
		note = fmt.Sprintf("SIGKILLed %s (no forward in flight within 3s)", life.Name)
	}
	sleepCtx(ctx, down)
	return note, r.startGateway(g)
}

// freezeMidForward makes the upstream apply and hold g's forwards, stops g
// with SIGSTOP as soon as one is held, lets the upstream answer into the
// stopped process, and continues it after frozen.
func (r *runner) freezeMidForward(ctx context.Context, g *GatewayProc, frozen time.Duration) (string, error) {
	life := g.Current()
	if life == nil {
		return "was not running", r.startGateway(g)
	}
	caught, held := r.holdAForward(life)
	r.scrape(ctx, g)
	err := g.Freeze(life)
	r.up.HoldFrom(life.Name, false)
	if err != nil {
		return "", fmt.Errorf("freeze %s: %w", life.Name, err)
	}
	sleepCtx(ctx, frozen)
	g.Thaw(life)
	if !caught {
		return fmt.Sprintf("froze %s (no forward in flight within 3s)", life.Name), nil
	}
	return fmt.Sprintf("froze %s with %d forward(s) applied upstream, answered into the stopped process", life.Name, held), nil
}

// cutDuringIntake slows PostgreSQL so that the async route's intake
// transactions stay open, waits until intakes are in flight, and cuts the
// connections under them for hold.
func (r *runner) cutDuringIntake(ctx context.Context, hold time.Duration) string {
	r.pproxy.Slow(intakeSlow)
	var inFlight int64
	caught := poll(3*time.Second, 2*time.Millisecond, func() error {
		if inFlight = r.providers.AsyncInFlight(); inFlight == 0 {
			return errors.New("no intake in flight")
		}
		return nil
	}) == nil
	// Past a round trip or two, the intakes are inside the database.
	sleepCtx(ctx, 2*intakeSlow)
	r.pproxy.Cut()
	sleepCtx(ctx, hold)
	r.pproxy.Restore()
	if !caught {
		return "cut PostgreSQL (no async intake in flight within 3s)"
	}
	return fmt.Sprintf("cut PostgreSQL with %d async intake(s) in flight", inFlight)
}

// intakeSlow is the latency added to PostgreSQL before an intake cut.
const intakeSlow = 20 * time.Millisecond

// cutDuringCompletion makes the upstream apply and hold the answers to
// every gateway's requests, cuts PostgreSQL once async attempts are held,
// and lets the answers go (each after the upstream's hold, 800ms, within
// the cut): those attempts record their outcome and complete their jobs
// against a cut ledger.
func (r *runner) cutDuringCompletion(ctx context.Context, hold time.Duration) string {
	var names []string
	for _, g := range r.gws {
		if l := g.Current(); l != nil {
			names = append(names, l.Name)
			r.up.HoldFrom(l.Name, true)
		}
	}
	caught := poll(3*time.Second, 2*time.Millisecond, func() error {
		if r.up.HoldingOn(asyncRoute) == 0 {
			return errors.New("no async attempt held")
		}
		return nil
	}) == nil
	held := r.up.HoldingOn(asyncRoute)
	r.pproxy.Cut()
	for _, n := range names {
		r.up.HoldFrom(n, false)
	}
	sleepCtx(ctx, hold)
	r.pproxy.Restore()
	if !caught {
		return "cut PostgreSQL (no async attempt at the upstream within 3s)"
	}
	return fmt.Sprintf("cut PostgreSQL with %d async attempt(s) applied upstream and their answers held", held)
}

// startGateway starts a new incarnation, retrying a failed start (a
// dependency may just be coming back).
func (r *runner) startGateway(g *GatewayProc) error {
	var err error
	for i := 0; i < 3; i++ {
		if err = g.Start(); err == nil {
			return nil
		}
		r.logf("        %s did not start: %v", g.Name, err)
	}
	return err
}

// restoreAll undoes every fault (they are undone as they end; this is the
// safety net when the load stops in the middle of one).
func (r *runner) restoreAll() {
	r.redisNet((*faultproxy.Proxy).Restore)
	r.pproxy.Restore()
	r.up.SetMode(UpstreamMode{})
	if err := r.redis.Start(); err != nil {
		r.logf("warning: redis restart: %v", err)
	}
	for _, g := range r.gws {
		if g.Current() == nil {
			if err := r.startGateway(g); err != nil {
				r.logf("warning: %v", err)
			}
		}
	}
}

// scrape reads g's /metrics into its current incarnation.
func (r *runner) scrape(ctx context.Context, g *GatewayProc) *Scrape {
	life := g.Current()
	if life == nil {
		return nil
	}
	s := scrapeMetrics(ctx, r.metrics, g.AdminAddr)
	if s.Present {
		g.mu.Lock()
		if g.cur == life {
			life.Metrics = s
		}
		g.mu.Unlock()
	}
	return s
}

// sample records RSS and goroutines of every gateway, and keeps the
// metrics of each incarnation fresh, until ctx is done.
func (r *runner) sample(ctx context.Context) {
	t := time.NewTicker(r.o.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, g := range r.gws {
			life := g.Current()
			if life == nil {
				continue
			}
			sm := Sample{Time: time.Now(), Life: life.Name}
			if s := r.scrape(ctx, g); s != nil {
				sm.Goroutines, sm.HasGoroutines = s.Goroutines, s.HasGoroutines
			}
			rss, err := rssBytes(life.PID)
			if err != nil {
				continue
			}
			sm.RSS = rss
			r.mu.Lock()
			r.samples[i] = append(r.samples[i], sm)
			r.mu.Unlock()
		}
	}
}

// status prints the load's progress every 10s.
func (r *runner) status(ctx context.Context, p *Providers) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		evs := p.Events()
		acked := 0
		for _, e := range evs {
			e.mu.Lock()
			if e.Final != nil {
				acked++
			}
			e.mu.Unlock()
		}
		r.logf("status: %d sends, %d events, %d settled", p.Sends(), len(evs), acked)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Stall is a moment the harness's own clock jumped: its process, and most
// likely the whole host, was frozen.
type Stall struct{ Start, End time.Time }

// stallThreshold is the smallest clock jump recorded as a stall.
const stallThreshold = 250 * time.Millisecond

// watchStalls records every stall until ctx is done.
func (r *runner) watchStalls(ctx context.Context) {
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := time.Now()
			if gap := now.Sub(last); gap > stallThreshold {
				r.mu.Lock()
				r.stalls = append(r.stalls, Stall{Start: last.Add(tick), End: now})
				r.mu.Unlock()
			}
			last = now
		}
	}
}
