package chaos

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"
)

// fixture builds the evidence of a small run by hand: events, upstream
// records, provider sends, ledger rows, gateway lives and logs.
type fixture struct {
	t0  time.Time
	in  *AuditInput
	seq int64
}

func newFixture() *fixture {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &fixture{t0: t0, in: &AuditInput{Ledger: map[string]*LedgerRow{}, Logs: map[string][]LogLine{},
		Lease: 3 * time.Second, Timeout: time.Second, ShutdownTimeout: 5 * time.Second}}
	for _, name := range []string{"g1.1", "g2.1"} {
		f.in.Lives = append(f.in.Lives, &Life{Name: name, Start: t0.Add(-2 * time.Second), Ready: t0.Add(-time.Second)})
	}
	return f
}

func (f *fixture) at(d time.Duration) time.Time { return f.t0.Add(d) }

func (f *fixture) life(name string) *Life {
	for _, l := range f.in.Lives {
		if l.Name == name {
			return l
		}
	}
	panic("no life " + name)
}

func (f *fixture) event(id string) *Event {
	ev := &Event{ID: id, Route: "generic", Key: "k-" + id, Sender: "s01",
		Body: fmt.Appendf(nil, `{"chaos_event":%q,"chaos_effect":"book","amount":1}`, id)}
	f.in.Events = append(f.in.Events, ev)
	return ev
}

// apply records that the upstream applied body (the event's own if nil)
// from gw at offset d.
func (f *fixture) apply(ev *Event, gw string, d time.Duration) *UpRecord {
	f.seq++
	r := &UpRecord{Seq: f.seq, Time: f.at(d), Gateway: gw, Route: ev.Route, Key: ev.Key, Body: ev.Body,
		Action: ActApply, Applied: true, Status: 200, ContentType: "application/json",
		Response: fmt.Appendf(nil, `{"booked":%q,"delivery":%d,"gw":%q}`, ev.Key, f.seq, gw)}
	f.in.Upstream = append(f.in.Upstream, r)
	if ev.Route == asyncRoute && f.in.Ledger[refKey(ev.Route, ev.Key)] != nil {
		f.record(ev, r) // the queue records the answer its last attempt got
	}
	return r
}

// answer records a send of ev to gw that got up's answer with outcome.
func (f *fixture) answer(ev *Event, kind SendKind, gw string, d time.Duration, up *UpRecord, outcome string) *Send {
	s := &Send{Event: ev, EventID: ev.ID, Kind: kind, Incarnation: gw, Start: f.at(d), End: f.at(d + 10*time.Millisecond),
		Answered: true, Status: up.Status, Outcome: outcome, Replayed: outcome == "replayed",
		ContentType: up.ContentType, Body: up.Response}
	ev.Sends = append(ev.Sends, s)
	if kind == KindGenuine && ev.Final == nil {
		ev.Final = s
	}
	return s
}

func (f *fixture) record(ev *Event, up *UpRecord) {
	f.in.Ledger[refKey(ev.Route, ev.Key)] = &LedgerRow{Route: ev.Route, Key: ev.Key, State: "done", Status: up.Status,
		Headers: map[string]string{"Content-Type": up.ContentType}, Body: up.Response, CompletedAt: up.Time}
}

// unrecordedThenTakenOver: g1.1 forwards e1 and fails to commit it at 5 s
// while the gateway of index partitioned is cut off from Redis (3–7 s);
// at 7 s, past the 3-s lease, g2.1 forwards it again and records it.
func (f *fixture) unrecordedThenTakenOver(partitioned int) {
	f.life("g2.1").Gateway = 1
	ev := f.event("e1")
	first := f.apply(ev, "g1.1", 0)
	f.answer(ev, KindGenuine, "g1.1", 0, first, "forwarded")
	f.in.Logs["g1.1"] = []LogLine{{Time: f.at(5 * time.Second), Msg: "commit failed after a successful forward", Route: ev.Route, Key: ev.Key}}
	f.in.Faults = append(f.in.Faults, FaultRecord{Fault: Fault{Kind: FaultRedisPartition, Gateway: partitioned},
		Start: f.at(3 * time.Second), End: f.at(7 * time.Second)})
	later := f.apply(ev, "g2.1", 7*time.Second)
	f.answer(ev, KindLate, "g2.1", 7*time.Second, later, "forwarded")
	f.record(ev, later)
}

// cut records a genuine send to gw from start to end that got no answer
// (its gateway died under it).
func (f *fixture) cut(ev *Event, gw string, start, end time.Duration) {
	ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: gw,
		Start: f.at(start), End: f.at(end), Err: "connection reset"})
}

// conflict records a send of ev to gw at offset d answered 409: another
// copy holds the key.
func (f *fixture) conflict(ev *Event, kind SendKind, gw string, d time.Duration) *Send {
	s := &Send{Event: ev, EventID: ev.ID, Kind: kind, Attempt: 2, Incarnation: gw, Start: f.at(d), End: f.at(d + 10*time.Millisecond),
		Answered: true, Status: 409, Outcome: "conflict", ContentType: "application/problem+json"}
	ev.Sends = append(ev.Sends, s)
	return s
}

// killedUnder records a genuine send of ev to gw at 0 cut by gw's
// SIGKILL at 100 ms.
func (f *fixture) killedUnder(ev *Event, gw string) {
	l := f.life(gw)
	l.How, l.Stopping, l.End = "killed", f.at(100*time.Millisecond), f.at(110*time.Millisecond)
	f.cut(ev, gw, 0, 110*time.Millisecond)
}

// cutBySIGTERM records a late copy of ev sent to gw at offset sent and
// left unanswered when gw, SIGTERMed at stop, exited at exit.
func (f *fixture) cutBySIGTERM(ev *Event, gw string, sent, stop, exit time.Duration) {
	l := f.life(gw)
	l.How, l.Stopping, l.End = "terminated", f.at(stop), f.at(exit)
	ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindLate, Incarnation: gw,
		Start: f.at(sent), End: f.at(exit - 50*time.Millisecond), Err: "connection reset"})
}

// heldAt records ev's first copy sent to gw at 0 and reaching the
// upstream at 100 ms with action act (ActHang: not applied, ActLost:
// applied), its forward held by gw at d and answered 504 held.
func (f *fixture) heldAt(ev *Event, gw, act string, d time.Duration) {
	f.seq++
	f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: f.seq, Time: f.at(100 * time.Millisecond), Gateway: gw,
		Route: ev.Route, Key: ev.Key, Body: ev.Body, Action: act, Applied: act == ActLost, Status: 200})
	f.in.Logs[gw] = append(f.in.Logs[gw], LogLine{Time: f.at(d), Msg: msgHeld + "; resolve it through the admin API", Route: ev.Route, Key: ev.Key})
	ev.Sends = append(ev.Sends, &Send{Event: ev, EventID: ev.ID, Kind: KindGenuine, Attempt: 1, Incarnation: gw,
		Start: f.at(0), End: f.at(d), Answered: true, Status: 504, Outcome: "held"})
}

// lostThenReleased records an event on route whose first copy the
// upstream applied at 0 without answering, g1.1 releasing it at 1 s, and
// whose retry was forwarded through g2.1 at 2 s.
func (f *fixture) lostThenReleased(route string) *Event {
	ev := f.event("e1")
	ev.Route = route
	f.seq++
	f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: f.seq, Time: f.at(0), Gateway: "g1.1", Route: ev.Route,
		Key: ev.Key, Body: ev.Body, Action: ActLost, Applied: true, Status: 200})
	f.in.Logs["g1.1"] = append(f.in.Logs["g1.1"], LogLine{Time: f.at(time.Second), Msg: "delivery", Route: ev.Route, Key: ev.Key,
		Outcome: "released", Err: "upstream timed out after sending"})
	up := f.apply(ev, "g2.1", 2*time.Second)
	f.answer(ev, KindGenuine, "g2.1", 2*time.Second, up, "forwarded")
	f.record(ev, up)
	return ev
}

// releasedLate records an event on "generic" whose first copy, sent to
// g1.1 just before, the upstream applied at 0 without answering, g1.1
// answering 504 and logging its release
// (timed out) at rel, after a failed screen release when screenFailed,
// and whose retry was forwarded through g2.1 at retry.
func (f *fixture) releasedLate(rel, retry time.Duration, screenFailed bool) {
	ev := f.event("e1")
	f.seq++
	f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: f.seq, Time: f.at(0), Gateway: "g1.1", Route: ev.Route,
		Key: ev.Key, Body: ev.Body, Action: ActLost, Applied: true, Status: 200})
	ev.Sends = append(ev.Sends, &Send{Event: ev, EventID: ev.ID, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
		Start: f.at(-10 * time.Millisecond), End: f.at(rel), Answered: true, Status: 504, Outcome: "released"})
	if screenFailed {
		f.in.Logs["g1.1"] = append(f.in.Logs["g1.1"], LogLine{Time: f.at(rel), Level: "WARN", Route: ev.Route, Key: ev.Key,
			Msg: "release failed; a claim it left in place expires with its lease", Err: "redisscreen: release: dependency unavailable: context deadline exceeded"})
	}
	f.in.Logs["g1.1"] = append(f.in.Logs["g1.1"], LogLine{Time: f.at(rel), Msg: "delivery", Route: ev.Route, Key: ev.Key,
		Outcome: "released", Err: "upstream timed out after sending"})
	up := f.apply(ev, "g2.1", retry)
	f.answer(ev, KindGenuine, "g2.1", retry, up, "forwarded")
	f.record(ev, up)
}

// passedUnrecorded records an event whose first copy g1.1 forwarded at
// 0 without a ledger (-store-pass) and then logged it could not record;
// the provider got the answer with outcome passthrough.
func (f *fixture) passedUnrecorded() *Event {
	f.in.StorePass = true
	ev := f.event("e1")
	up := f.apply(ev, "g1.1", 0)
	f.answer(ev, KindGenuine, "g1.1", 0, up, "passthrough")
	f.in.Logs["g1.1"] = append(f.in.Logs["g1.1"], LogLine{Time: f.at(5 * time.Millisecond), Level: "WARN", Route: ev.Route, Key: ev.Key,
		Msg: "passthrough delivery not recorded: the ledger is unavailable"},
		LogLine{Time: f.at(6 * time.Millisecond), Msg: "delivery", Route: ev.Route, Key: ev.Key, Outcome: "passthrough"})
	return ev
}

// resolved records the operator's resolution of ev's key at d.
func (f *fixture) resolved(ev *Event, action string, d time.Duration) {
	f.in.Resolutions = append(f.in.Resolutions, Resolution{Route: ev.Route, Key: ev.Key, Action: action,
		Start: f.at(d), End: f.at(d + 5*time.Millisecond), Life: "g2.1"})
}

func (f *fixture) delivered(id string) (*Event, *UpRecord) {
	ev := f.event(id)
	up := f.apply(ev, "g1.1", 0)
	f.answer(ev, KindGenuine, "g1.1", 0, up, "forwarded")
	f.record(ev, up)
	return ev, up
}

func checks(a *Audit) []string {
	var out []string
	for _, v := range a.Violations {
		if !slices.Contains(out, v.Check) {
			out = append(out, v.Check)
		}
	}
	sort.Strings(out)
	return out
}

func causes(a *Audit) []DuplicateCause {
	var out []DuplicateCause
	for _, d := range a.Duplicates {
		out = append(out, d.Cause)
	}
	return out
}

// TestAudit feeds the auditor evidence of each guarantee kept and broken,
// and checks it finds exactly the broken ones.
func TestAudit(t *testing.T) {
	tests := []struct {
		name       string
		build      func(f *fixture)
		wantChecks []string
		wantCauses []DuplicateCause
	}{
		{
			name: "delivered once, replayed identically",
			build: func(f *fixture) {
				ev, up := f.delivered("e1")
				f.answer(ev, KindDuplicate, "g2.1", 50*time.Millisecond, up, "replayed")
			},
		},
		{
			name: "takeover after a crash is the documented exception",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.apply(ev, "g1.1", 0)
				l := f.life("g1.1")
				l.How, l.Stopping = "killed", f.at(5*time.Millisecond)
				f.cut(ev, "g1.1", -5*time.Millisecond, 6*time.Millisecond)
				up := f.apply(ev, "g2.1", 3*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 3*time.Second, up, "forwarded")
				f.record(ev, up)
			},
			wantCauses: []DuplicateCause{CauseCrashTakeover},
		},
		{
			name: "two live copies forwarded together",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, first, "forwarded")
				second := f.apply(ev, "g2.1", time.Millisecond)
				f.answer(ev, KindDuplicate, "g2.1", 0, second, "forwarded")
				f.record(ev, second)
			},
			wantChecks: []string{CheckAcked, CheckDuplicate},
			wantCauses: []DuplicateCause{CauseUnexplained},
		},
		{
			name: "a FLUSHALL while the first copy was in flight",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, first, "forwarded")
				f.record(ev, first)
				f.in.Faults = append(f.in.Faults, FaultRecord{Fault: Fault{Kind: FaultRedisFlush},
					Start: f.at(2 * time.Millisecond), End: f.at(3 * time.Millisecond)})
				f.apply(ev, "g2.1", 100*time.Millisecond)
			},
			wantChecks: []string{CheckDuplicate},
			wantCauses: []DuplicateCause{CauseScreenLoss},
		},
		{
			name: "a replay that differs from the record",
			build: func(f *fixture) {
				ev, up := f.delivered("e1")
				s := f.answer(ev, KindLate, "g2.1", time.Second, up, "replayed")
				s.Body = []byte(`{"booked":"k-e1","delivery":1,"gw":"g1.1" }`)
			},
			wantChecks: []string{CheckReplay},
		},
		{
			name: "a reused key forwarded with its different body",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				r := f.apply(ev, "g2.1", time.Second)
				r.Body = tamperedBody(ev)
			},
			wantChecks: []string{CheckKeyReuse},
		},
		{
			name: "a reused key answered 422",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindTamper, Incarnation: "g2.1", Start: f.at(time.Second),
					End: f.at(time.Second), Answered: true, Status: 422, Outcome: "mismatch"})
			},
		},
		{
			name: "a forged copy that was not rejected",
			build: func(f *fixture) {
				ev, up := f.delivered("e1")
				f.answer(ev, KindForged, "g2.1", -time.Second, up, "forwarded")
			},
			wantChecks: []string{CheckOutcome},
		},
		{
			name: "a request to a serving gateway that got no answer",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindDuplicate, Incarnation: "g2.1",
					Start: f.at(0), End: f.at(15 * time.Second), Err: "timeout", Timeout: true})
			},
			wantChecks: []string{CheckLost},
		},
		{
			name: "no answer from a gateway being killed",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				l := f.life("g2.1")
				l.How, l.Stopping = "killed", f.at(5*time.Millisecond)
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindDuplicate, Incarnation: "g2.1",
					Start: f.at(0), End: f.at(6 * time.Millisecond), Err: "connection reset"})
			},
		},
		{
			name: "acknowledged without a record",
			build: func(f *fixture) {
				ev := f.event("e1")
				up := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, up, "forwarded")
			},
			wantChecks: []string{CheckAcked},
		},
		{
			name: "acknowledged without a record after a logged commit failure",
			build: func(f *fixture) {
				ev := f.event("e1")
				up := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, up, "forwarded")
				f.in.Logs["g1.1"] = []LogLine{{Msg: "commit failed after a successful forward", Route: ev.Route, Key: ev.Key}}
			},
		},
		{
			name:       "a commit failure while its gateway was cut off from Redis, then a takeover",
			build:      func(f *fixture) { f.unrecordedThenTakenOver(0) },
			wantCauses: []DuplicateCause{CauseCommitFailure},
		},
		{
			name:       "the same with another gateway cut off: the screen kept the answer",
			build:      func(f *fixture) { f.unrecordedThenTakenOver(1) },
			wantChecks: []string{CheckAcked, CheckDuplicate},
			wantCauses: []DuplicateCause{CauseScreenOutage}, // not allowed
		},
		{
			name: "a passthrough the ledger never recorded, replayed from the screen",
			build: func(f *fixture) {
				ev := f.passedUnrecorded()
				f.answer(ev, KindLate, "g2.1", time.Second, f.in.Upstream[0], "replayed")
			},
		},
		{
			name: "the same replay, after a later copy was recorded",
			build: func(f *fixture) {
				ev := f.passedUnrecorded()
				f.answer(ev, KindDuplicate, "g1.1", 100*time.Millisecond, f.in.Upstream[0], "replayed")
				f.forwardedAgain(ev, "g2.1", time.Second)
			},
			wantCauses: []DuplicateCause{CausePassMode},
		},
		{
			name: "the same replay, no passthrough logged",
			build: func(f *fixture) {
				ev := f.passedUnrecorded()
				f.in.Logs["g1.1"] = nil
				f.answer(ev, KindLate, "g2.1", time.Second, f.in.Upstream[0], "replayed")
			},
			wantChecks: []string{CheckAcked},
		},
		{
			name: "an unrecorded passthrough forwarded again (-store-pass)",
			build: func(f *fixture) {
				ev := f.passedUnrecorded()
				f.forwardedAgain(ev, "g2.1", time.Second)
			},
			wantCauses: []DuplicateCause{CausePassMode},
		},
		{
			name: "the same without -store-pass",
			build: func(f *fixture) {
				ev := f.passedUnrecorded()
				f.in.StorePass = false
				f.forwardedAgain(ev, "g2.1", time.Second)
			},
			wantChecks: []string{CheckDuplicate, CheckOutcome},
			wantCauses: []DuplicateCause{CauseUnexplained}, // no pass mode to explain it
		},
		{
			name: "a data race reported by a gateway",
			build: func(f *fixture) {
				f.delivered("e1")
				f.in.LogProblems = []string{"g1.1: WARNING: DATA RACE"}
			},
			wantChecks: []string{CheckHealth},
		},
		{
			name: "a SIGTERM that did not exit cleanly",
			build: func(f *fixture) {
				f.delivered("e1")
				l := f.life("g2.1")
				l.How, l.ExitCode = "terminated", 1
			},
			wantChecks: []string{CheckShutdown},
		},
		{
			name: "409 while another copy is in flight",
			build: func(f *fixture) {
				ev := f.event("e1")
				up := f.apply(ev, "g1.1", 500*time.Millisecond)
				first := f.answer(ev, KindGenuine, "g1.1", 0, up, "forwarded")
				first.End = f.at(600 * time.Millisecond)
				f.record(ev, up)
				f.conflict(ev, KindDuplicate, "g2.1", 200*time.Millisecond)
			},
		},
		{
			name: "409 within a lease of a copy cut by a kill",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.killedUnder(ev, "g1.1")
				f.conflict(ev, KindGenuine, "g2.1", 3*time.Second) // the dead copy's lease: 3 s
				up := f.apply(ev, "g2.1", 5*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 5*time.Second, up, "forwarded")
				f.record(ev, up)
			},
		},
		{
			name: "409 long after every claim of the key expired",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: 1, Time: f.at(0), Gateway: "g1.1", Route: ev.Route,
					Key: ev.Key, Body: ev.Body, Action: ActFail, Status: 503})
				f.seq = 1
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
					Start: f.at(0), End: f.at(20 * time.Millisecond), Answered: true, Status: 503, Outcome: "released"})
				f.conflict(ev, KindGenuine, "g2.1", 10*time.Second) // wedged: nothing holds it
				ev.GaveUp = "harness stopped"
			},
			wantChecks: []string{CheckExpires},
		},
		{
			name: "a provider's retries answered 409 long after the claim's lease",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.killedUnder(ev, "g1.1")
				for d := time.Second; d <= 12*time.Second; d += 1500 * time.Millisecond {
					f.conflict(ev, KindGenuine, "g2.1", d) // each 409 within a lease of the one before
				}
				ev.GaveUp = "harness stopped"
			},
			wantChecks: []string{CheckExpires},
		},
		{
			name: "409 from a claim a hung Redis delivered late",
			build: func(f *fixture) {
				ev := f.event("e1")
				up := f.apply(ev, "g1.1", 100*time.Millisecond)
				f.answer(ev, KindGenuine, "g1.1", 0, up, "forwarded")
				f.record(ev, up)
				f.in.Faults = append(f.in.Faults, FaultRecord{Fault: Fault{Kind: FaultRedisBlackhole},
					Start: f.at(-time.Second), End: f.at(4 * time.Second)})
				f.conflict(ev, KindLate, "g2.1", 6*time.Second) // within a lease of the fault's end
			},
		},
		{
			name: "a delivery accepted before SIGTERM was never answered",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				f.cutBySIGTERM(ev, "g2.1", time.Second, 2*time.Second, 2100*time.Millisecond)
			},
			wantChecks: []string{CheckDrain},
		},
		{
			name: "a delivery sent as SIGTERM arrived, or abandoned by a drain out of time",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				f.cutBySIGTERM(ev, "g2.1", 1950*time.Millisecond, 2*time.Second, 2100*time.Millisecond)
				ev2, _ := f.delivered("e2")
				f.cutBySIGTERM(ev2, "g1.1", time.Second, 2*time.Second, 7*time.Second)
			},
		},
		{
			name: "a held key forwarded again once the operator released it",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				held := f.conflict(ev, KindGenuine, "g2.1", 2*time.Second)
				held.Outcome = "held"
				f.resolved(ev, "release", 3*time.Second)
				up := f.apply(ev, "g2.1", 4*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 4*time.Second, up, "forwarded")
				f.record(ev, up)
			},
		},
		{
			name: "a held key forwarded once a release whose answer was lost took effect",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.resolved(ev, "release", 3*time.Second)
				f.in.Resolutions[0].Unsure = true
				f.in.Logs["g2.1"] = append(f.in.Logs["g2.1"],
					LogLine{Time: f.at(3100 * time.Millisecond), Msg: "admin: held record resolved", Route: ev.Route, Key: ev.Key})
				up := f.apply(ev, "g2.1", 4*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 4*time.Second, up, "forwarded")
				f.record(ev, up)
			},
		},
		{
			name: "a held key forwarded after a release whose answer was lost and that no gateway logged",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.resolved(ev, "release", 3*time.Second)
				f.in.Resolutions[0].Unsure = true
				up := f.apply(ev, "g2.1", 4*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 4*time.Second, up, "forwarded")
				f.record(ev, up)
			},
			wantChecks: []string{CheckHold},
		},
		{
			name: "a held key forwarded once released by a call begun before the hold was logged",
			build: func(f *fixture) {
				// The operator listed the held row between its commit and
				// the gateway's line that logged it.
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.resolved(ev, "release", 990*time.Millisecond)
				f.in.Logs["g2.1"] = append(f.in.Logs["g2.1"],
					LogLine{Time: f.at(1200 * time.Millisecond), Msg: "admin: held record resolved", Route: ev.Route, Key: ev.Key})
				up := f.apply(ev, "g2.1", 2*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 2*time.Second, up, "forwarded")
				f.record(ev, up)
			},
		},
		{
			name: "a held key forwarded before the operator resolved it",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				up := f.apply(ev, "g2.1", 2*time.Second)
				f.answer(ev, KindGenuine, "g2.1", 2*time.Second, up, "forwarded")
				f.record(ev, up)
				f.resolved(ev, "release", 3*time.Second)
			},
			wantChecks: []string{CheckHold},
		},
		{
			name: "a held answer on a route that releases ambiguous results",
			build: func(f *fixture) {
				ev := f.event("e1") // route generic
				f.heldAt(ev, "g1.1", ActHang, time.Second)
			},
			wantChecks: []string{CheckHold},
		},
		{
			name: "a held key the operator's complete pass did not resolve",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.in.Ledger[refKey(ev.Route, ev.Key)] = &LedgerRow{Route: ev.Route, Key: ev.Key, State: "held", CreatedAt: f.at(0)}
				f.in.HoldCutoff = f.at(5 * time.Second)
			},
			wantChecks: []string{CheckHold},
		},
		{
			name: "an applied, unanswered forward released on the hold route",
			build: func(f *fixture) {
				f.lostThenReleased(holdRoute)
			},
			wantChecks: []string{CheckDuplicate},
			wantCauses: []DuplicateCause{CauseUnexplained},
		},
		{
			name: "the same, when the hold itself could not be written",
			build: func(f *fixture) {
				ev := f.lostThenReleased(holdRoute)
				f.in.Logs["g1.1"] = append(f.in.Logs["g1.1"],
					LogLine{Time: f.at(time.Second), Msg: msgHoldFailed + "; releasing it", Route: ev.Route, Key: ev.Key})
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.build(f)
			a := RunAudit(f.in)
			if got := checks(a); !slices.Equal(got, tc.wantChecks) {
				t.Errorf("violated checks = %v, want %v; violations:\n%v", got, tc.wantChecks, a.Violations)
			}
			if got := causes(a); !slices.Equal(got, tc.wantCauses) {
				t.Errorf("duplicate causes = %v, want %v", got, tc.wantCauses)
			}
		})
	}
}

func TestAuditComparesTakeoversWithTheMetric(t *testing.T) {
	f := newFixture()
	ev := f.event("e1")
	f.apply(ev, "g1.1", 0)
	l := f.life("g1.1")
	l.How, l.Stopping = "killed", f.at(5*time.Millisecond)
	f.cut(ev, "g1.1", -5*time.Millisecond, 6*time.Millisecond)
	up := f.apply(ev, "g2.1", 3*time.Second)
	f.answer(ev, KindGenuine, "g2.1", 3*time.Second, up, "forwarded")
	f.record(ev, up)
	// The replica that took over counted nothing.
	f.life("g2.1").Metrics = &Scrape{Present: true, HasTakeovers: true, Takeovers: 0}

	a := RunAudit(f.in)
	if got := checks(a); !slices.Equal(got, []string{CheckTakeovers}) {
		t.Fatalf("violated checks = %v, want [%s]", got, CheckTakeovers)
	}
	f.life("g2.1").Metrics.Takeovers = 1
	if a := RunAudit(f.in); len(a.Violations) != 0 {
		t.Fatalf("with the takeover counted: %v", a.Violations)
	}
}

func TestSumMetric(t *testing.T) {
	text := []byte(`# HELP hookstamp_takeovers_total Claims taken over.
# TYPE hookstamp_takeovers_total counter
hookstamp_takeovers_total{otel_scope_name="hookstamp",route="orders"} 2
hookstamp_takeovers_total{otel_scope_name="hookstamp",route="stripe"} 1
hookstamp_takeovers_totally_different 7
go_goroutines 42
`)
	tests := []struct {
		name  string
		want  float64
		found bool
	}{
		{"hookstamp_takeovers_total", 3, true},
		{"go_goroutines", 42, true},
		{"hookstamp_commit_failures_total", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found := sumMetric(text, tc.name)
			if got != tc.want || found != tc.found {
				t.Errorf("sumMetric = %v, %v; want %v, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

func TestScheduleIsReplayable(t *testing.T) {
	a := NewSchedule(42, 2*time.Minute, AllFaults, 0, 0)
	b := NewSchedule(42, 2*time.Minute, AllFaults, 0, 0)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed drew two different schedules")
	}
	if c := NewSchedule(43, 2*time.Minute, AllFaults, 0, 0); slices.Equal(a, c) {
		t.Fatal("two seeds drew the same schedule")
	}
	var end time.Duration
	for _, f := range a {
		if f.At < end {
			t.Errorf("%s starts at %v, before the previous fault ends (%v)", f.Kind, f.At, end)
		}
		end = f.At + f.estimate()
		if end > 2*time.Minute-12*time.Second {
			t.Errorf("%s ends at %v, in the quiet tail", f.Kind, end)
		}
	}
}

// TestScheduleHasEveryKind checks that the schedules make chaos, the
// tests and the soak draw hold one fault of each kind they ask for,
// whatever the seed.
func TestScheduleHasEveryKind(t *testing.T) {
	tests := []struct {
		name             string
		d                time.Duration
		kinds            []FaultKind
		spacing, maxHold time.Duration
	}{
		{"make chaos", 2 * time.Minute, AllFaults, 0, 0},
		{"TestChaosShort", 42 * time.Second, ShortFaults, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"TestChaosInbox", 30 * time.Second, []FaultKind{FaultKill, FaultUpLost}, 1500 * time.Millisecond, 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 500; seed++ {
				seen := map[FaultKind]bool{}
				for _, f := range NewSchedule(seed, tc.d, tc.kinds, tc.spacing, tc.maxHold) {
					seen[f.Kind] = true
				}
				for _, k := range tc.kinds {
					if !seen[k] {
						t.Errorf("the schedule of seed %d has no %s", seed, k)
					}
				}
			}
		})
	}
}

func TestFlatnessFlagsGrowth(t *testing.T) {
	series := func(rss func(i int) int64, goroutines func(i int) float64) [3][]Sample {
		var s [3][]Sample
		t0 := time.Now()
		for i := 0; i < 100; i++ {
			s[0] = append(s[0], Sample{Time: t0.Add(time.Duration(i) * time.Second), Life: "g1.1",
				RSS: rss(i), Goroutines: goroutines(i), HasGoroutines: true})
		}
		return s
	}
	const mib = 1 << 20
	tests := []struct {
		name    string
		samples [3][]Sample
		want    int
	}{
		{"flat", series(func(int) int64 { return 50 * mib }, func(int) float64 { return 80 }), 0},
		{"noisy but flat", series(func(i int) int64 { return int64(45+i%10) * mib }, func(i int) float64 { return float64(75 + i%10) }), 0},
		{"RSS leak", series(func(i int) int64 { return int64(40+i) * mib }, func(int) float64 { return 80 }), 1},
		{"goroutine leak", series(func(int) int64 { return 50 * mib }, func(i int) float64 { return float64(80 + 3*i) }), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := flatness(tc.samples); len(got) != tc.want {
				t.Errorf("flatness = %v, want %d problem(s)", got, tc.want)
			}
		})
	}
}
