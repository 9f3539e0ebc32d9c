package gateway

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/ingress"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/telemetry"
)

// MigrateStore creates or upgrades the ledger's tables and the queue's
// beside them. Processes migrating one SQLite file take turns for the
// whole of it; on PostgreSQL each migration has its own advisory lock.
func MigrateStore(ctx context.Context, l *sqlledger.Ledger) error {
	unlock, err := l.LockMigrations(ctx)
	if err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	defer unlock()
	if err := l.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	if err := queue.Migrate(ctx, l); err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	return nil
}

// queueParts deliver the stored requests of async routes, of any route
// storing requests redelivered by an operator, and those of a route that
// stores no requests now (adopted: adoptFormer).
type queueParts struct {
	q      *queue.Queue             // nil when no route is configured
	async  map[string]bool          // the async routes
	stores map[string]time.Duration // the routes storing requests, async ones included, and their retention
	// adoptEvery is how often watchFormer looks for deliveries of the
	// routes storing no requests.
	adoptEvery time.Duration
	checked    bool // adoptFormer has read the ledger once

	mu      sync.Mutex // guards started and stopped, never held across a call to the database
	started bool       // River runs: stopQueue stops it
	stopped bool
}

// adoptEveryMin bounds adoptEvery below: every replica counts the jobs of
// its routes storing no requests that often, and while a replica of the
// route's former configuration runs, it delivers them itself.
const adoptEveryMin = 5 * time.Second

// storing reports whether the queue serves routes storing requests, for
// the admin API's redeliveries and the console's queue pages.
func (p *queueParts) storing() bool { return p.q != nil && len(p.stores) > 0 }

// hasAsync reports whether any route is async.
func hasAsync(cfg *config.Config) bool {
	for _, r := range cfg.Routes {
		if r.Delivery == config.DeliveryAsync {
			return true
		}
	}
	return false
}

// openQueue builds the queue of the routes storing requests; the ledger
// inserts their jobs with its intake transactions. The other routes are
// the queue's former ones, for adoptFormer.
func (g *Gateway) openQueue(routes []*ingress.Route, o Options) error {
	var qr, former []queue.Route
	var names []string
	g.queue.async, g.queue.stores = map[string]bool{}, map[string]time.Duration{}
	for i, rc := range g.cfg.Routes {
		r := routes[i]
		a := rc.Async
		if !rc.StoresRequests() && config.CheckQueueing(a) != nil {
			// Never checked on such a route: the defaults deliver
			// what it may have queued.
			a = config.DefaultRoute().Async
		}
		route := queue.Route{Name: rc.Name, Policy: r.Policy, UpstreamURL: r.UpstreamURL, KeyHeader: r.KeyHeader,
			Timeout: r.UpstreamTimeout, MaxAttempts: a.MaxAttempts, MaxAge: a.MaxAge,
			Backoff: queue.Backoff{Initial: a.Backoff.Initial, Max: a.Backoff.Max}, Concurrency: a.Concurrency,
			PollInterval: cmp.Or(o.QueuePollInterval, a.PollInterval)}
		if !rc.StoresRequests() {
			former = append(former, route)
			continue
		}
		g.queue.stores[rc.Name] = r.Policy.Retention
		qr = append(qr, route)
		if rc.Delivery == config.DeliveryAsync {
			g.queue.async[rc.Name] = true
			names = append(names, rc.Name)
		}
	}
	if len(qr) == 0 && len(former) == 0 {
		return nil
	}
	if len(former) > 0 {
		poll := slices.MinFunc(former, func(a, b queue.Route) int { return cmp.Compare(a.PollInterval, b.PollInterval) }).PollInterval
		g.queue.adoptEvery = max(adoptEveryMin, poll)
	}
	m, err := g.tel.ObserveQueue(names, g.queueCounts, g.now)
	if err != nil {
		return err
	}
	q, err := queue.New(queue.Options{
		Driver: g.cfg.Store.Driver, Ledger: g.ledger, Forwarder: g.fwd, Routes: qr, Former: former,
		Replica:      replicaName(),
		RescueMargin: o.RescueMargin,
		Hooks: queue.Hooks{Attempt: m.Attempt, Lag: m.Lag, Takeover: g.tel.Hooks().Takeover, HeldChanged: g.tel.AddHeld,
			Upstream: g.tel.ObserveUpstream, Replaced: g.answerReplaced},
		Tracer: g.tel.Tracer(), TracerProvider: g.tel.TracerProvider(), Logger: g.log, Now: g.now,
	})
	if err != nil {
		return err
	}
	g.queue.q = q
	g.ledger.UseJobs(q)
	return nil
}

// adoptFormer gives the queue the routes that store no requests now but
// have deliveries waiting from when they did: a route switched from
// delivery: async to sync keeps its queued rows, a replica still running
// its former configuration queues more, and an operator's redelivery of a
// done record waits as a job only. No worker would run their jobs: the
// provider was acknowledged and will not send them again, and their
// retries get 409 until they are delivered. Its first run also names such
// a route's dead deliveries, which wait for an operator.
func (g *Gateway) adoptFormer(ctx context.Context) error {
	former := g.queue.q.Former()
	if len(former) == 0 {
		return nil
	}
	jobs, err := g.queue.q.FormerJobs(ctx)
	if err != nil {
		return err
	}
	var stats map[string]sqlledger.QueueStat
	if !g.queue.checked || len(jobs) > 0 {
		if stats, err = g.ledger.QueueStats(ctx); err != nil {
			return fmt.Errorf("count the deliveries of routes storing no requests: %w", err)
		}
	}
	var adopt []string
	for _, name := range former {
		st := stats[name]
		if jobs[name] > 0 {
			adopt = append(adopt, name)
			args := []any{"route", name, "jobs", jobs[name], "queued", st.Queued}
			if st.Queued > 0 {
				args = append(args, "oldest", st.OldestQueued)
			}
			g.log.Warn("route stores no requests now (not async, no record.request) but has deliveries waiting from when it did, or from replicas still running its former configuration: the queue delivers them, by the route's async settings; until then their retries get 409",
				args...)
		}
		if !g.queue.checked && st.Dead > 0 {
			g.log.Warn("route stores no requests now but has dead deliveries from when it did: their retries get 409 held until an operator deletes them, or sets record.request: true and redrives them",
				"route", name, "dead", st.Dead)
		}
	}
	g.queue.checked = true
	return g.queue.q.Adopt(ctx, adopt...)
}

// watchFormer runs adoptFormer every adoptEvery, and starts the queue if
// it adopted a route into an idle one, until every route is adopted and
// the queue runs, the queue stops, or ctx ends.
func (g *Gateway) watchFormer(ctx context.Context) {
	if len(g.queue.q.Former()) == 0 {
		return
	}
	t := time.NewTicker(g.queue.adoptEvery)
	defer t.Stop()
	for len(g.queue.q.Former()) > 0 || !g.queue.q.Running() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.queue.mu.Lock()
		stopped := g.queue.stopped
		g.queue.mu.Unlock()
		if stopped {
			return
		}
		if err := g.adoptFormer(ctx); err != nil {
			g.log.Warn("routes storing no requests: deliveries not looked for; trying again", "err", err, "in", g.queue.adoptEvery)
			continue
		}
		if err := g.tryStartQueue(ctx); err != nil {
			g.log.Warn("delivery queue not started; trying again", "err", err, "in", g.queue.adoptEvery)
		}
	}
}

// queueCounts reads the queue gauges from the ledger.
func (g *Gateway) queueCounts(ctx context.Context) (map[string]telemetry.QueueCount, error) {
	stats, err := g.ledger.QueueStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]telemetry.QueueCount, len(stats))
	for r, s := range stats {
		out[r] = telemetry.QueueCount{Queued: s.Queued, Dead: s.Dead, Oldest: s.OldestQueued}
	}
	return out, nil
}

// startQueue starts working jobs. A database that cannot be reached now
// does not stop the gateway: intake answers 503 until it is back, and the
// queue keeps trying to start in the background until ctx ends. Once
// started, it looks for deliveries of the routes storing no requests
// (watchFormer).
func (g *Gateway) startQueue(ctx context.Context) {
	if g.queue.q == nil {
		return
	}
	g.retry(ctx, func(ctx context.Context) error {
		if err := g.adoptFormer(ctx); err != nil {
			return err
		}
		if err := g.tryStartQueue(ctx); err != nil {
			return err
		}
		g.watchFormer(ctx)
		return nil
	}, func(err error, wait time.Duration) {
		g.log.Warn("delivery queue not started; trying again", "err", err, "in", wait)
	})
}

// retry calls try in the background until it succeeds or ctx ends, with
// failed told of each failure and the wait before the next try.
func (g *Gateway) retry(ctx context.Context, try func(context.Context) error, failed func(err error, wait time.Duration)) {
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		wait := 100 * time.Millisecond
		for {
			err := try(ctx)
			if err == nil {
				return
			}
			failed(err, wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}()
}

// warnUnconfigured warns of every route the configuration does not name
// that has deliveries waiting in the ledger: a route renamed or removed
// with rows queued, dead or held. Its queued ones are never swept and no
// queue works them, and the admin API answers only for configured
// routes, so without this word they would wait unseen.
func (g *Gateway) warnUnconfigured(ctx context.Context) error {
	stats, err := g.ledger.QueueStats(ctx)
	if err != nil {
		return err
	}
	held, err := g.ledger.CountHeldByRoute(ctx)
	if err != nil {
		return err
	}
	var names []string
	for name := range stats {
		names = append(names, name)
	}
	for name := range held {
		if _, ok := stats[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.ContainsFunc(g.cfg.Routes, func(r config.Route) bool { return r.Name == name }) {
			continue
		}
		st := stats[name]
		args := []any{"route", name, "queued", st.Queued, "dead", st.Dead, "held", held[name]}
		if st.Queued > 0 {
			args = append(args, "oldest", st.OldestQueued)
		}
		g.log.Warn("route no longer configured has deliveries waiting in the ledger: nothing delivers its queued ones, which are never swept, "+
			"and the admin API serves configured routes only. Configure a route of that name again to deliver them, "+
			"and to redrive or delete its dead ones and resolve its held ones through the admin API; left so, those are swept after their retention",
			args...)
	}
	return nil
}

// tryStartQueue starts the queue unless it runs or is being stopped. A
// stalled database fails it (queue.Options.StartTimeout), and the end of
// ctx, the gateway's, cuts it short.
func (g *Gateway) tryStartQueue(ctx context.Context) error {
	g.queue.mu.Lock()
	skip := g.queue.stopped || g.queue.q.Running()
	g.queue.mu.Unlock()
	if skip {
		return nil
	}
	err := g.queue.q.Start(ctx)
	g.queue.mu.Lock()
	stopped := g.queue.stopped
	g.queue.started = err == nil && !stopped && g.queue.q.Running()
	g.queue.mu.Unlock()
	if !stopped {
		return err
	}
	if err == nil {
		// stopQueue came during the start: it found nothing to stop.
		// ctx lasts until the gateway closes, as the drain does.
		g.stopRunner(ctx)
	}
	return nil
}

// stopQueue stops fetching jobs and lets the attempts in flight finish
// until ctx is done (SIGTERM, SPEC §10); the rest stay queued. A start
// under way stops the queue itself when it ends.
func (g *Gateway) stopQueue(ctx context.Context) {
	g.queue.mu.Lock()
	started := g.queue.started
	g.queue.started, g.queue.stopped = false, true
	g.queue.mu.Unlock()
	if started {
		g.stopRunner(ctx)
	}
}

func (g *Gateway) stopRunner(ctx context.Context) {
	if err := g.queue.q.Stop(ctx); err != nil {
		g.log.Warn("stop the delivery queue", "err", err)
	}
}

// stopQueueNow is stopQueue for a gateway closing without a drain.
func (g *Gateway) stopQueueNow() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.stopQueue(ctx)
}
