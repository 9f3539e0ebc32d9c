package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// asyncEvent is an acknowledged event of the async route, stored.
func (f *fixture) asyncEvent(id string) *Event {
	ev := &Event{ID: id, Route: asyncRoute, Key: "relay-" + id, Sender: "s01", Body: asyncBody("relay-"+id, id, "book", 1)}
	ev.Final = &Send{Event: ev, EventID: id, Kind: KindGenuine, Answered: true, Status: 202, Outcome: "accepted", Start: f.at(0), End: f.at(0)}
	ev.Sends = append(ev.Sends, ev.Final)
	f.in.Events = append(f.in.Events, ev)
	f.in.Ledger[refKey(ev.Route, ev.Key)] = &LedgerRow{Route: ev.Route, Key: ev.Key, State: "done"}
	return ev
}

// wantOneDuplicate checks that audit a found exactly one second copy:
// allowed with cause, or not allowed and reported as a violation.
func wantOneDuplicate(t *testing.T, a *Audit, allowed bool, cause DuplicateCause) {
	t.Helper()
	if len(a.Duplicates) != 1 {
		t.Fatalf("duplicates %+v, want one", a.Duplicates)
	}
	if d := a.Duplicates[0]; d.Allowed != allowed || (allowed && d.Cause != cause) {
		t.Errorf("duplicate %s allowed=%v, want allowed=%v", d.Cause, d.Allowed, allowed)
	} else if d.Evidence == "" {
		t.Errorf("duplicate %s names no evidence", d.Cause)
	}
	if got := len(a.Violations) > 0; got == allowed {
		t.Errorf("violations %v", a.Violations)
	}
}

// A second copy of an async delivery after a ledger cut is allowed when
// the gateway that sent it logged delivering a lost attempt again, and a
// violation when nothing explains it.
func TestAsyncSecondCopyNeedsALoggedRedelivery(t *testing.T) {
	for _, logged := range []bool{true, false} {
		t.Run(fmt.Sprint("logged=", logged), func(t *testing.T) {
			f := newFixture()
			ev := f.asyncEvent("e1")
			f.apply(ev, "g1.1", time.Second)
			f.in.Faults = append(f.in.Faults, FaultRecord{Fault: Fault{Kind: FaultPGCutCompletion}, Start: f.at(900 * time.Millisecond), End: f.at(3 * time.Second)})
			if logged {
				f.in.Logs["g2.1"] = []LogLine{{Time: f.at(14 * time.Second), Level: "WARN", Route: asyncRoute, Key: ev.Key,
					Msg: redeliveryMsg + "; the upstream may get it twice, with the same key"}}
			}
			f.apply(ev, "g2.1", 14*time.Second+5*time.Millisecond)
			wantOneDuplicate(t, RunAudit(f.in), logged, CauseRescued)
		})
	}
}

// A SIGKILL explains a second copy only when it hit the gateway that
// forwarded the first, after it did.
func TestAsyncSecondCopyAfterACrash(t *testing.T) {
	tests := []struct {
		name    string
		killed  string
		at      time.Duration // after the first copy arrived
		allowed bool
	}{
		{name: "its forwarder killed mid-attempt", killed: "g1.1", at: 300 * time.Millisecond, allowed: true},
		{name: "another gateway killed", killed: "g2.1", at: 300 * time.Millisecond},
		{name: "its forwarder killed before it", killed: "g1.1", at: -time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			ev := f.asyncEvent("e1")
			first := f.apply(ev, "g1.1", 5*time.Second)
			l := f.life(tc.killed)
			l.How, l.Stopping, l.End = "killed", first.Time.Add(tc.at), first.Time.Add(tc.at+10*time.Millisecond)
			f.apply(ev, "g2.1", 12*time.Second)
			wantOneDuplicate(t, RunAudit(f.in), tc.allowed, CauseCrashTakeover)
		})
	}
}

// A second copy of an async delivery with no fault about is allowed when
// the gateway that forwarded the first logged the attempt unanswered,
// while it was in flight.
func TestAsyncSecondCopyAfterAnUnansweredAttempt(t *testing.T) {
	tests := []struct {
		name    string
		logBy   string
		logAt   time.Duration // after the first copy arrived
		allowed bool
	}{
		{name: "logged by its forwarder", logBy: "g1.1", logAt: time.Second, allowed: true},
		{name: "not logged"},
		{name: "logged by the other gateway", logBy: "g2.1", logAt: time.Second},
		{name: "logged of an earlier attempt", logBy: "g1.1", logAt: -2 * time.Second},
		{name: "logged long after", logBy: "g1.1", logAt: 4 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			ev := f.asyncEvent("e1")
			first := f.apply(ev, "g1.1", 5*time.Second)
			if tc.logBy != "" {
				f.in.Logs[tc.logBy] = []LogLine{{Time: first.Time.Add(tc.logAt), Level: "INFO", Route: asyncRoute, Key: ev.Key,
					Msg: unansweredMsg + "; the next attempt delivers it again, with the same key"}}
			}
			f.apply(ev, "g2.1", 12*time.Second)
			wantOneDuplicate(t, RunAudit(f.in), tc.allowed, CauseAmbiguous)
		})
	}
}

// With the inbox, the async route's effects are audited like the others:
// its applied delivery's row matches, a second copy the inbox absorbed is
// classified, and a row no applied delivery explains is a violation.
func TestAsyncEffectsAreAudited(t *testing.T) {
	tests := []struct {
		name       string
		build      func(f *fixture, ev *Event)
		violations int
		absorbed   map[DuplicateCause]int
	}{
		{
			name:  "applied once, one effect row",
			build: func(f *fixture, ev *Event) { f.effect(f.apply(ev, "g1.1", time.Second)) },
		},
		{
			name: "an attempt timed out by its gateway's freeze, its retry absorbed",
			build: func(f *fixture, ev *Event) {
				first := f.apply(ev, "g1.1", time.Second)
				f.effect(first)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(1100 * time.Millisecond), End: f.at(4 * time.Second)}}
				f.absorb(ev, first, "g2.1", 9*time.Second)
			},
			absorbed: map[DuplicateCause]int{CauseAmbiguous: 1},
		},
		{
			name: "a second copy absorbed with nothing to explain it",
			build: func(f *fixture, ev *Event) {
				first := f.apply(ev, "g1.1", time.Second)
				f.effect(first)
				f.absorb(ev, first, "g2.1", 9*time.Second)
			},
			violations: 1,
			absorbed:   map[DuplicateCause]int{CauseUnexplained: 1},
		},
		{
			name: "an effect row no applied delivery explains",
			build: func(f *fixture, ev *Event) {
				f.effect(f.apply(ev, "g1.1", time.Second))
				f.in.Effects = append(f.in.Effects, Effect{ID: 2, Route: asyncRoute, Key: ev.Key, Seq: 99, Gateway: "g2.1"})
			},
			violations: 2, // a row of no delivery, and the event applied twice
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.in.Inbox = true
			ev := f.asyncEvent("e1")
			tc.build(f, ev)
			a := RunAudit(f.in)
			if len(a.Violations) != tc.violations {
				t.Errorf("violations %v, want %d", a.Violations, tc.violations)
			}
			if a.Effects != len(f.in.Effects) {
				t.Errorf("effects counted %d, want %d", a.Effects, len(f.in.Effects))
			}
			for c, n := range tc.absorbed {
				if a.AbsorbedByCause[c] != n {
					t.Errorf("absorbed by %s = %d, want %d (all: %v)", c, a.AbsorbedByCause[c], n, a.AbsorbedByCause)
				}
			}
		})
	}
}

// fixedTarget is a gateway at url with no process behind it to record.
type fixedTarget string

func (t fixedTarget) URL() string  { return string(t) }
func (fixedTarget) Current() *Life { return nil }

// A provider takes the async route's acknowledgement as the event's final
// answer (SPEC §10: 202 accepted, a repeat the same answer replayed), as it
// takes any 2xx: it neither gives up on it nor sends it again.
func TestAsyncAcknowledgementSettles(t *testing.T) {
	var sends atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sends.Add(1)
		w.Header().Set("Hookstamp-Outcome", "accepted")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	p := NewProviders(ProviderOptions{Seed: 1, Senders: 5, Async: true}, []Target{fixedTarget(srv.URL), fixedTarget(srv.URL)})
	s := p.newSender(4)
	if s.route != asyncRoute {
		t.Fatalf("sender 4 delivers on %s, want %s", s.route, asyncRoute)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	ev := s.newEvent(rng)
	s.deliver(t.Context(), ev, rng)
	if !ev.Acked() || ev.GaveUp != "" || sends.Load() != 1 {
		t.Errorf("final %+v, gave up %q, %d sends: want acknowledged by the one send", ev.Final, ev.GaveUp, sends.Load())
	}
}

// An async event its provider gave up on is counted as given up, and its
// copies are judged all the same: a second application that nothing
// explains is a violation.
func TestAsyncEventGivenUpIsAudited(t *testing.T) {
	f := newFixture()
	ev := f.asyncEvent("e1")
	ev.Final, ev.GaveUp = nil, "answered 202 accepted: not retryable"
	f.apply(ev, "g1.1", time.Second)
	f.apply(ev, "g2.1", 9*time.Second)
	a := RunAudit(f.in)
	if a.GaveUp != 1 || a.GaveUpReasons[ev.GaveUp] != 1 {
		t.Errorf("gave up %d (%v), want 1", a.GaveUp, a.GaveUpReasons)
	}
	wantOneDuplicate(t, a, false, CauseUnexplained)
}

// A crash, a host stall, a freeze or an upstream fault explains an async
// second copy only when it hit the earlier copy while that was in flight
// (from its arrival to the upstream timeout and half a second after it),
// and only when that copy went unanswered: an answer its gateway recorded
// ended the delivery's job.
func TestAsyncSecondCopyNeedsTheFirstUnansweredInFlight(t *testing.T) {
	tests := []struct {
		name     string
		build    func(f *fixture, first *UpRecord)
		recorded bool // the ledger holds the first copy's answer
		allowed  bool
		cause    DuplicateCause
	}{
		{
			name: "a host stall while it was in flight",
			build: func(f *fixture, first *UpRecord) {
				f.in.Stalls = []Stall{{Start: first.Time.Add(200 * time.Millisecond), End: first.Time.Add(1500 * time.Millisecond)}}
			},
			allowed: true, cause: CauseStallTakeover,
		},
		{
			name: "a host stall long after it",
			build: func(f *fixture, first *UpRecord) {
				f.in.Stalls = []Stall{{Start: first.Time.Add(30 * time.Second), End: first.Time.Add(31500 * time.Millisecond)}}
			},
		},
		{
			name: "a host stall while it was in flight, its answer recorded",
			build: func(f *fixture, first *UpRecord) {
				f.in.Stalls = []Stall{{Start: first.Time.Add(200 * time.Millisecond), End: first.Time.Add(1500 * time.Millisecond)}}
			},
			recorded: true,
		},
		{
			name: "its gateway killed between the copies, long after the first",
			build: func(f *fixture, first *UpRecord) {
				l := f.life(first.Gateway)
				l.How, l.Stopping, l.End = "killed", first.Time.Add(4*time.Second), first.Time.Add(4010*time.Millisecond)
			},
		},
		{
			name: "its gateway killed mid-attempt, its answer recorded",
			build: func(f *fixture, first *UpRecord) {
				l := f.life(first.Gateway)
				l.How, l.Stopping, l.End = "killed", first.Time.Add(300*time.Millisecond), first.Time.Add(310*time.Millisecond)
			},
			recorded: true,
		},
		{
			name: "its gateway frozen mid-attempt, its answer recorded",
			build: func(f *fixture, first *UpRecord) {
				f.life(first.Gateway).Frozen = []Stall{{Start: first.Time.Add(100 * time.Millisecond), End: first.Time.Add(3 * time.Second)}}
			},
			recorded: true,
		},
		{
			name: "the upstream slow over it",
			build: func(f *fixture, first *UpRecord) {
				f.in.Faults = []FaultRecord{{Fault: Fault{Kind: FaultUpSlow}, Start: first.Time.Add(-time.Second), End: first.Time.Add(time.Second)}}
			},
		},
		{
			name: "the upstream losing answers over it, though it answered this one",
			build: func(f *fixture, first *UpRecord) {
				f.in.Faults = []FaultRecord{{Fault: Fault{Kind: FaultUpLost}, Start: first.Time.Add(-time.Second), End: first.Time.Add(time.Second)}}
			},
		},
		{
			name: "the upstream never answered it",
			build: func(f *fixture, first *UpRecord) {
				f.in.Faults = []FaultRecord{{Fault: Fault{Kind: FaultUpLost}, Start: first.Time.Add(-time.Second), End: first.Time.Add(time.Second)}}
				first.Action, first.AnswerAt = ActLost, time.Time{}
			},
			allowed: true, cause: CauseAmbiguous,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			ev := f.asyncEvent("e1")
			first := f.apply(ev, "g1.1", 5*time.Second)
			tc.build(f, first)
			f.apply(ev, "g2.1", 60*time.Second)
			if tc.recorded {
				f.record(ev, first)
			}
			wantOneDuplicate(t, RunAudit(f.in), tc.allowed, tc.cause)
		})
	}
}

// The async route is held to the checks of the others where they apply:
// every upstream request carries an event's key and body, every copy gets
// an outcome its kind may get, a repeat gets the acknowledgement byte for
// byte (SPEC §10), and the ledger records what the upstream answered; and
// to its own: once the harness drained the queue, every stored delivery is
// done (its max_attempts and max_age cannot run out within a run).
func TestAsyncRouteIsAuditedLikeTheOthers(t *testing.T) {
	tests := []struct {
		name  string
		build func(f *fixture, ev *Event, up *UpRecord)
		want  []string // the checks violated
	}{
		{
			name: "acknowledged, repeated, reused, delivered and recorded",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				f.ack(ev, KindLate, "replayed")
				f.ack(ev, KindTamper, "mismatch").Status = 422
			},
		},
		{
			name: "an upstream request without an Idempotency-Key",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				f.apply(ev, "g2.1", 3*time.Second).Key = ""
				f.record(ev, up)
			},
			want: []string{CheckUpstreamID},
		},
		{
			name: "a key reused with another body, acknowledged and delivered",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				f.ack(ev, KindTamper, "accepted")
				f.apply(ev, "g2.1", 3*time.Second).Body = tamperedBody(ev)
			},
			want: []string{CheckKeyReuse},
		},
		{
			name: "a copy forwarded at intake",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				f.answer(ev, KindDuplicate, "g1.1", time.Second, up, "forwarded")
			},
			want: []string{CheckOutcome},
		},
		{
			name: "a repeat acknowledged otherwise",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				s := f.ack(ev, KindLate, "replayed")
				s.Status, s.Body = 200, []byte(`{"ok":true}`)
			},
			want: []string{CheckReplay},
		},
		{
			name: "an acknowledged event left queued",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				row := f.in.Ledger[refKey(ev.Route, ev.Key)]
				row.State, row.Status, row.Body = "queued", 0, nil
			},
			want: []string{CheckAsyncDelivered},
		},
		{
			name: "a delivery recorded with an answer the upstream never gave",
			build: func(f *fixture, ev *Event, up *UpRecord) {
				f.in.Ledger[refKey(ev.Route, ev.Key)].Body = []byte(`{"booked":"x","delivery":99}`)
			},
			want: []string{CheckAcked},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			ev := f.asyncEvent("e1")
			up := f.apply(ev, "g1.1", time.Second)
			f.record(ev, up)
			tc.build(f, ev, up)
			if got := checks(RunAudit(f.in)); !slices.Equal(got, tc.want) {
				t.Errorf("violated checks %v, want %v", got, tc.want)
			}
		})
	}
}

// ack records a send of the async event ev answered 202 with outcome, as
// its first acknowledgement was.
func (f *fixture) ack(ev *Event, kind SendKind, outcome string) *Send {
	s := &Send{Event: ev, EventID: ev.ID, Kind: kind, Incarnation: "g2.1", Start: f.at(2 * time.Second), End: f.at(2010 * time.Millisecond),
		Answered: true, Status: 202, Outcome: outcome, Replayed: outcome == "replayed"}
	ev.Sends = append(ev.Sends, s)
	return s
}
