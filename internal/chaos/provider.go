package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// SendKind says why a provider sent a request.
type SendKind string

// Send kinds.
const (
	// KindGenuine: the provider's delivery of the event and its retries.
	KindGenuine SendKind = "genuine"
	// KindDuplicate: an extra copy sent concurrently, with jitter, the way
	// providers double-send.
	KindDuplicate SendKind = "duplicate"
	// KindLate: a copy sent again after the event was acknowledged.
	KindLate SendKind = "late"
	// KindTamper: the event's key reused with a different body (expect 422,
	// never forwarded).
	KindTamper SendKind = "tamper"
	// KindForged: a request with the event's key, a different body and a bad
	// signature, sent before the genuine one (expect 401; it must not
	// occupy the key).
	KindForged SendKind = "forged"
)

// Send is one HTTP request a provider made, and what came back.
type Send struct {
	Event   *Event `json:"-"`
	EventID string
	Kind    SendKind
	Attempt int
	// Gateway is the index of the gateway sent to; Incarnation the process
	// that was running there when the send started ("" if none was).
	Gateway     int
	Incarnation string
	Start, End  time.Time
	// Answered: an HTTP response came back; then Status, Outcome,
	// Replayed, ContentType and Body are what it said.
	Answered    bool
	Status      int
	Outcome     string
	Replayed    bool
	ContentType string
	Body        []byte
	// Err is the failure when nothing came back; Timeout is set when it was
	// the provider's own client timeout, Aborted when the harness stopped it.
	Err     string
	Timeout bool
	Aborted bool
}

// Settled reports whether the answer is the event's final answer: the
// upstream's recorded answer, first-hand or replayed, or an async route's
// acknowledgement of a stored delivery (SPEC §10).
func (s *Send) Settled() bool {
	return s.Answered && (s.Outcome == "forwarded" || s.Outcome == "replayed" || s.Outcome == "accepted" ||
		(s.Outcome == "passthrough" && s.Status < 500))
}

// Event is one business event: its ground-truth identity, the key the
// gateway will extract, the body every genuine copy carries, and what the
// provider saw.
type Event struct {
	ID     string
	Route  string
	Key    string
	Sender string
	Body   []byte
	// Decline: the upstream refuses it with a final 402 (recorded and
	// replayed like a success, but not an acknowledgement).
	Decline bool

	mu    sync.Mutex
	Sends []*Send
	// Final is the send that settled the event (nil: never settled).
	Final  *Send
	GaveUp string // why the provider gave up, if it did
}

func (e *Event) add(s *Send) {
	e.mu.Lock()
	e.Sends = append(e.Sends, s)
	e.mu.Unlock()
}

// Acked reports whether the provider saw a 2xx settle the event.
func (e *Event) Acked() bool {
	return e.Final != nil && e.Final.Status >= 200 && e.Final.Status < 300
}

// ProviderOptions shape the simulated providers.
type ProviderOptions struct {
	Seed    uint64
	Senders int // independent senders, spread over the routes (Async adds one)
	// Think is the mean pause between a sender's events.
	Think time.Duration
	// ClientTimeout is each request's timeout; a timed-out request is resent.
	ClientTimeout time.Duration
	// GiveUp bounds the attempts and the time spent on one event.
	MaxAttempts int
	GiveUp      time.Duration
	// StripeSecret signs the stripe route's deliveries.
	StripeSecret string
	// Async adds senders on the store-and-forward route.
	Async bool
	// Probabilities per event.
	PDuplicate, PLate, PTamper, PForged, PDecline float64
}

func (o *ProviderOptions) defaults() {
	if o.Senders <= 0 {
		o.Senders = 18
	}
	if o.Think <= 0 {
		o.Think = 150 * time.Millisecond
	}
	if o.ClientTimeout <= 0 {
		o.ClientTimeout = 15 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 80
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 90 * time.Second
	}
}

// Target is a gateway as providers see it: an address, and (for the
// records) which process was serving it.
type Target interface {
	URL() string
	Current() *Life
}

// Providers simulates the senders.
type Providers struct {
	o       ProviderOptions
	targets []Target

	mu     sync.Mutex
	events []*Event
	sends  atomic.Int64
	// asyncInFlight are the sends on the async route awaiting an answer.
	asyncInFlight atomic.Int64
	extras        sync.WaitGroup // duplicates, late copies and tampers in flight
}

// NewProviders prepares o.Senders senders delivering to targets.
func NewProviders(o ProviderOptions, targets []Target) *Providers {
	o.defaults()
	return &Providers{o: o, targets: targets}
}

// Events are every event created so far.
func (p *Providers) Events() []*Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Event(nil), p.events...)
}

// Sends is the number of requests made so far.
func (p *Providers) Sends() int64 { return p.sends.Load() }

// AsyncInFlight is the number of sends on the async route awaiting their
// answer: intakes under way.
func (p *Providers) AsyncInFlight() int64 { return p.asyncInFlight.Load() }

// Run makes every sender deliver events until gen is done, each finishing
// the event it is on; sends still running when hard is done are aborted.
func (p *Providers) Run(gen, hard context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < p.o.Senders; i++ {
		s := p.newSender(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(gen, hard)
		}()
	}
	wg.Wait()
	p.extras.Wait()
}

var routesBySender = []string{"stripe", "orders", "generic", holdRoute}

type sender struct {
	p      *Providers
	index  int
	id     string // "s07"
	route  string
	client *http.Client
	n      uint64
}

func (p *Providers) newSender(i int) *sender {
	routes := routesBySender
	if p.o.Async {
		routes = append(routes[:len(routes):len(routes)], asyncRoute)
	}
	s := &sender{p: p, index: i, id: fmt.Sprintf("s%02d", i+1), route: routes[i%len(routes)]}
	// Every sender delivers from an address of its own (127.0.0.x):
	// the orders route tells senders apart by IP.
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i%200))}
	dialer := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: local}
	s.client = &http.Client{
		Timeout: p.o.ClientTimeout,
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
	}
	return s
}

func (s *sender) run(gen, hard context.Context) {
	defer s.client.CloseIdleConnections()
	for gen.Err() == nil {
		s.n++
		rng := rand.New(rand.NewPCG(s.p.o.Seed, uint64(s.index)<<32|s.n))
		ev := s.newEvent(rng)
		s.p.mu.Lock()
		s.p.events = append(s.p.events, ev)
		s.p.mu.Unlock()
		s.deliver(hard, ev, rng)
		pause := time.Duration(rng.Float64() * 2 * float64(s.p.o.Think))
		if !sleepCtx(gen, pause) {
			return
		}
	}
}

// newEvent draws the event's identity and body.
func (s *sender) newEvent(rng *rand.Rand) *Event {
	ev := &Event{Route: s.route, Sender: s.id, ID: fmt.Sprintf("%s-%06d", s.id, s.n)}
	ev.Decline = rng.Float64() < s.p.o.PDecline
	effect := "book"
	if ev.Decline {
		effect = "decline"
	}
	tag := strconv.FormatUint(s.p.o.Seed, 36)
	amount := 100 + rng.IntN(99900)
	switch s.route {
	case "stripe":
		ev.Key = fmt.Sprintf("evt_%s_%s_%06d", tag, s.id, s.n)
		ev.Body = fmt.Appendf(nil, `{"id":%q,"object":"event","type":"payment_intent.succeeded","chaos_event":%q,"chaos_effect":%q,"data":{"object":{"id":"pi_%s_%s_%d","amount":%d,"currency":"eur"}}}`,
			ev.Key, ev.ID, effect, tag, s.id, s.n, amount)
	case "orders":
		order := fmt.Sprintf("%s%s%06d", tag, s.id, s.n)
		seq := fmt.Sprintf("%02d", 1+rng.IntN(3))
		ev.Key = order + "-CREATE-" + seq
		ev.Body = fmt.Appendf(nil, `{"order_id":%q,"event":"CREATE","seq":%q,"chaos_event":%q,"chaos_effect":%q,"total_amount":"%d.%02d"}`,
			order, seq, ev.ID, effect, amount/100, amount%100)
	case asyncRoute:
		ev.Key = fmt.Sprintf("rl_%s_%s_%06d", tag, s.id, s.n)
		ev.Body = asyncBody(ev.Key, ev.ID, effect, amount)
	case holdRoute:
		ev.Key = fmt.Sprintf("po_%s_%s_%06d", tag, s.id, s.n)
		ev.Body = fmt.Appendf(nil, `{"payout_id":%q,"chaos_event":%q,"chaos_effect":%q,"amount":%d,"currency":"eur"}`,
			ev.Key, ev.ID, effect, amount)
	default:
		ev.Key = fmt.Sprintf("gen-%s-%s-%06d", tag, s.id, s.n)
		ev.Body = fmt.Appendf(nil, `{"chaos_event":%q,"chaos_effect":%q,"amount":%d}`, ev.ID, effect, amount)
	}
	return ev
}

// tamperedBody is the event with a different amount: the same key, a
// different meaning.
func tamperedBody(ev *Event) []byte {
	return bytes.Replace(ev.Body, []byte(`"chaos_event":`), []byte(`"chaos_tamper":true,"chaos_event":`), 1)
}

// deliver sends the event until a final answer settles it, like an
// at-least-once provider, with the extra copies its plan draws.
func (s *sender) deliver(ctx context.Context, ev *Event, rng *rand.Rand) {
	o := &s.p.o
	dups := 0
	switch r := rng.Float64(); {
	case r < o.PDuplicate*0.25:
		dups = 2
	case r < o.PDuplicate:
		dups = 1
	}
	late := rng.Float64() < o.PLate
	tamper := rng.Float64() < o.PTamper
	forged := ev.Route == "stripe" && rng.Float64() < o.PForged
	jitters := []time.Duration{time.Duration(rng.IntN(250)) * time.Millisecond, time.Duration(rng.IntN(250)) * time.Millisecond}
	lateAfter := time.Duration(rng.IntN(2000)) * time.Millisecond
	seed := rng.Uint64()

	if forged {
		s.send(ctx, ev, KindForged, 0, rng.IntN(len(s.p.targets)))
	}
	for i := 0; i < dups; i++ {
		gw, d := rng.IntN(len(s.p.targets)), jitters[i]
		s.extra(func() {
			if sleepCtx(ctx, d) {
				s.send(ctx, ev, KindDuplicate, 0, gw)
			}
		})
	}

	// Its own generator from here on: the extras above draw nothing more.
	r := rand.New(rand.NewPCG(seed, 1))
	if !s.untilSettled(ctx, ev, r) {
		return
	}

	if late {
		gw := r.IntN(len(s.p.targets))
		s.extra(func() {
			if sleepCtx(ctx, lateAfter) {
				s.send(ctx, ev, KindLate, 0, gw)
			}
		})
	}
	if tamper {
		gw := r.IntN(len(s.p.targets))
		s.extra(func() { s.tamper(ctx, ev, gw) })
	}
}

// untilSettled sends the genuine copies of ev, drawing from r, until a
// final answer settles it (true) or the sender gives up (false, GaveUp
// says why).
func (s *sender) untilSettled(ctx context.Context, ev *Event, r *rand.Rand) bool {
	o := &s.p.o
	start := time.Now()
	gw := r.IntN(len(s.p.targets))
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			ev.GaveUp = "harness stopped"
			return false
		}
		if attempt > o.MaxAttempts || time.Since(start) > o.GiveUp {
			ev.GaveUp = fmt.Sprintf("no final answer after %d attempts in %v", attempt-1, time.Since(start).Round(time.Second))
			return false
		}
		snd := s.send(ctx, ev, KindGenuine, attempt, gw)
		if snd.Settled() {
			ev.mu.Lock()
			ev.Final = snd
			ev.mu.Unlock()
			return true
		}
		if snd.Answered && !retryable(snd) {
			ev.GaveUp = fmt.Sprintf("answered %d %s: not retryable", snd.Status, snd.Outcome)
			return false
		}
		var pause time.Duration
		if !snd.Answered {
			// Connection refused or reset: that replica is down; try another soon.
			pause = time.Duration(30+r.IntN(120)) * time.Millisecond
			gw = (gw + 1 + r.IntN(len(s.p.targets)-1)) % len(s.p.targets)
		} else {
			backoff := 100 * time.Millisecond << min(attempt-1, 4)
			pause = backoff/2 + time.Duration(r.Int64N(int64(backoff)))
			gw = r.IntN(len(s.p.targets))
		}
		if !sleepCtx(ctx, pause) {
			ev.GaveUp = "harness stopped"
			return false
		}
	}
}

// retryable: answers a provider retries (the gateway's 409, 503, the
// upstream's 5xx and the gateway's 502/504 for an upstream that failed).
func retryable(s *Send) bool {
	switch s.Outcome {
	case "conflict", "unavailable", "released", "held", "passthrough":
		return true
	case "":
		return true // not from a route (e.g. a 404 while starting): retry
	}
	return false
}

// tamper reuses the event's key with a different body until the gateway
// gives its verdict (422), or gives up after a bounded number of tries.
func (s *sender) tamper(ctx context.Context, ev *Event, gw int) {
	for attempt := 1; attempt <= 20 && ctx.Err() == nil; attempt++ {
		snd := s.send(ctx, ev, KindTamper, attempt, gw)
		if snd.Answered && !retryable(snd) {
			return
		}
		gw = (gw + 1) % len(s.p.targets)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

func (s *sender) extra(f func()) {
	s.p.extras.Add(1)
	go func() {
		defer s.p.extras.Done()
		f()
	}()
}

// send makes one request and records it.
func (s *sender) send(ctx context.Context, ev *Event, kind SendKind, attempt, gw int) *Send {
	t := s.p.targets[gw]
	snd := &Send{Event: ev, EventID: ev.ID, Kind: kind, Attempt: attempt, Gateway: gw}
	if l := t.Current(); l != nil {
		snd.Incarnation = l.Name
	}
	body := ev.Body
	switch kind {
	case KindTamper, KindForged:
		body = tamperedBody(ev)
	}
	path := map[string]string{"stripe": "/webhooks/stripe", "orders": "/webhooks/orders", holdRoute: "/webhooks/payouts",
		asyncRoute: "/webhooks/relay"}[ev.Route]
	if path == "" {
		path = "/hooks/" + ev.Sender + "/events"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL()+path, bytes.NewReader(body))
	if err != nil {
		panic(err) // the URL is the harness's own
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sender", ev.Sender)
	switch ev.Route {
	case "stripe":
		secret := s.p.o.StripeSecret
		if kind == KindForged {
			secret = "whsec_forged"
		}
		for k, v := range verifytest.Stripe(secret, body, time.Now()) {
			req.Header[k] = v
		}
	case "generic":
		req.Header.Set("X-Event-Id", ev.Key)
	}

	s.p.sends.Add(1)
	if ev.Route == asyncRoute {
		s.p.asyncInFlight.Add(1)
		defer s.p.asyncInFlight.Add(-1)
	}
	snd.Start = time.Now()
	resp, err := s.client.Do(req)
	if err == nil {
		snd.Body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			snd.Answered = true
			snd.Status = resp.StatusCode
			snd.Outcome = resp.Header.Get("Hookstamp-Outcome")
			snd.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
			snd.ContentType = resp.Header.Get("Content-Type")
		}
	}
	snd.End = time.Now()
	if err != nil {
		snd.Body = nil
		snd.Err = err.Error()
		var ne net.Error
		snd.Timeout = errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil
		snd.Aborted = ctx.Err() != nil
	}
	ev.add(snd)
	return snd
}

// sleepCtx sleeps d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
