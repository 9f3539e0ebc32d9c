package chaos

import (
	"slices"
	"testing"
	"time"
)

// releasedUnder records ev's copy sent to gw at -10 ms, applied by the
// upstream at 0 and answered 504 released at end.
func (f *fixture) releasedUnder(ev *Event, gw string, end time.Duration) {
	f.apply(ev, gw, 0)
	ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: gw,
		Start: f.at(-10 * time.Millisecond), End: f.at(end), Answered: true, Status: 504, Outcome: "released"})
}

// forwardedAgain records a duplicate copy of ev forwarded by gw at d,
// its answer the ledger's.
func (f *fixture) forwardedAgain(ev *Event, gw string, d time.Duration) {
	second := f.apply(ev, gw, d)
	f.answer(ev, KindDuplicate, gw, d, second, "forwarded")
	f.record(ev, second)
}

// readTimedOut records a late copy of ev sent to gw at 1 s and answered
// 408 by the server at 4.01 s, with no outcome.
func (f *fixture) readTimedOut(ev *Event, gw string) {
	ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindLate, Incarnation: gw, Start: f.at(time.Second),
		End: f.at(4010 * time.Millisecond), Answered: true, Status: 408, ContentType: "application/problem+json"})
}

// Histories that break a promise of docs/exactly-once.md and that the audit
// passed: an exemption wider than the document allows, or evidence it did
// not read. Found by a second review of the audit; each must now fail.
func TestAuditSoundness(t *testing.T) {
	tests := []struct {
		name  string
		build func(f *fixture)
	}{
		{
			// The release frees the key: a copy forwarded before it was
			// forwarded while the earlier copy still held its claim.
			name: "a concurrent double forward excused by a release logged after it",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.seq++
				f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: f.seq, Time: f.at(0), Gateway: "g1.1",
					Route: ev.Route, Key: ev.Key, Body: ev.Body, Action: ActLost, Applied: true, Status: 200})
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
					Start: f.at(-10 * time.Millisecond), End: f.at(time.Second), Answered: true, Status: 504, Outcome: "released"})
				f.in.Logs["g1.1"] = []LogLine{{Time: f.at(time.Second), Msg: "delivery", Route: ev.Route, Key: ev.Key,
					Outcome: "released", Err: "upstream timed out after sending"}}
				second := f.apply(ev, "g2.1", 100*time.Millisecond) // A's claim was still held
				f.answer(ev, KindDuplicate, "g2.1", 50*time.Millisecond, second, "forwarded")
				f.record(ev, second)
			},
		},
		{
			// The ledger part of a release comes first, but a forward
			// that timed out releases nothing before its timeout.
			name: "a copy forwarded within the earlier copy's timeout, excused by a release whose screen part failed",
			build: func(f *fixture) {
				f.releasedLate(1800*time.Millisecond, 600*time.Millisecond, true)
			},
		},
		{
			// Only a failed screen release makes the line that late.
			name: "a copy forwarded a second before a release logged with nothing slow in it",
			build: func(f *fixture) {
				f.releasedLate(2200*time.Millisecond, 1300*time.Millisecond, false)
			},
		},
		{
			// Only a failed release waited out a hung ledger.
			name: "a retry after a release logged past the forward's reach with nothing slow in it",
			build: func(f *fixture) {
				f.releasedLate(6200*time.Millisecond, 6500*time.Millisecond, false)
			},
		},
		{
			// A frozen owner looks dead only once its lease has run out:
			// a copy forwarded within the lease of the earlier claim took
			// nothing over.
			name: "a forward within the earlier claim's lease excused by a host stall",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.releasedUnder(ev, "g1.1", 1250*time.Millisecond)
				f.in.Stalls = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(1200 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 1300*time.Millisecond) // 1.3 s after the claim, lease 3 s
			},
		},
		{
			// Continued before its lease ran out, the owner answers and
			// records: a copy forwarded meanwhile took nothing over.
			name: "a forward within the earlier claim's lease excused by a gateway freeze",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.releasedUnder(ev, "g1.1", 1250*time.Millisecond)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(1200 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 1300*time.Millisecond)
			},
		},
		{
			// Continued well within its lease, the owner recorded the
			// answer: a copy claimed after the lease found it done.
			name: "a forward after the lease excused by a freeze that ended within it",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.releasedUnder(ev, "g1.1", 1250*time.Millisecond)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(1200 * time.Millisecond)}}
				second := f.apply(ev, "g2.1", 3200*time.Millisecond)
				s := f.answer(ev, KindDuplicate, "g2.1", time.Second, second, "forwarded")
				s.End = f.at(3210 * time.Millisecond)
				f.record(ev, second)
			},
		},
		{
			// Continued after its lease, nobody having claimed meanwhile,
			// the owner recorded the answer: a later claim found it done.
			name: "a forward claimed well after the thaw excused by the freeze",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 0)
				s := f.answer(ev, KindGenuine, "g1.1", -10*time.Millisecond, first, "forwarded")
				s.End = f.at(3550 * time.Millisecond)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(3500 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 5*time.Second)
			},
		},
		{
			name: "a double forward excused by the freeze of the gateway that did not hold the earlier copy",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.releasedUnder(ev, "g1.1", 100*time.Millisecond)
				f.life("g2.1").Frozen = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(3500 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 3600*time.Millisecond)
			},
		},
		{
			name: "a late copy answered 408 with no freeze or stall to explain it",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				f.life("g1.1").Frozen = []Stall{{Start: f.at(900 * time.Millisecond), End: f.at(4 * time.Second)}}
				f.readTimedOut(ev, "g2.1")
			},
		},
		{
			name: "a gateway process that died on its own in the middle of the run",
			build: func(f *fixture) {
				f.delivered("e1")
				l := f.life("g2.1")
				l.How, l.End, l.ExitCode = "exited", f.at(time.Second), 1
			},
		},
		{
			name: "a reused key answered 200 with outcome mismatch",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindTamper, Incarnation: "g2.1", Start: f.at(time.Second),
					End: f.at(time.Second), Answered: true, Status: 200, Outcome: "mismatch"})
			},
		},
		{
			name: "a forged copy answered 200 with outcome unverified",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindForged, Incarnation: "g2.1", Start: f.at(-time.Second),
					End: f.at(-time.Second), Answered: true, Status: 200, Outcome: "unverified"})
			},
		},
		{
			name: "a replay without Idempotent-Replayed: true",
			build: func(f *fixture) {
				ev, up := f.delivered("e1")
				s := f.answer(ev, KindLate, "g2.1", time.Second, up, "replayed")
				s.Replayed = false
			},
		},
		{
			// No pass of the operator ever completed: every held key
			// went unseen, and the check had no cutoff to judge by.
			name: "a key held for good while no operator pass ever completed",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.in.Ledger[refKey(ev.Route, ev.Key)] = &LedgerRow{Route: ev.Route, Key: ev.Key, State: "held", CreatedAt: f.at(0)}
				ev.GaveUp = "harness stopped"
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.build(f)
			a := RunAudit(f.in)
			if len(a.Violations) == 0 {
				t.Errorf("the audit passed a broken history (duplicates: %v)", causes(a))
			}
		})
	}
}

// The same histories kept within the contract: the audit still passes them.
func TestAuditSoundnessKeepsTheExceptions(t *testing.T) {
	tests := []struct {
		name       string
		build      func(f *fixture)
		wantCauses []DuplicateCause
	}{
		{
			name: "a retry forwarded once the ambiguous release was logged",
			build: func(f *fixture) {
				f.lostThenReleased("generic")
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
		{
			// Redis hung: the release freed the ledger's claim, then
			// waited out its call to the screen before logging.
			name: "a retry claimed while the release's screen part hung",
			build: func(f *fixture) {
				f.releasedLate(2200*time.Millisecond, 1300*time.Millisecond, true)
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
		{
			// PostgreSQL hung: the release waited out a statement and
			// failed; the claim expired with its lease meanwhile.
			name: "a retry after a release that waited out a hung ledger",
			build: func(f *fixture) {
				f.releasedLate(6200*time.Millisecond, 6500*time.Millisecond, true)
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
		{
			// The same without the failure: the release waited for
			// PostgreSQL to answer again.
			name: "a retry after a release logged once a hung ledger answered",
			build: func(f *fixture) {
				f.releasedLate(6200*time.Millisecond, 6500*time.Millisecond, false)
				f.in.Faults = append(f.in.Faults, FaultRecord{Fault: Fault{Kind: FaultPGBlackhole},
					Start: f.at(1500 * time.Millisecond), End: f.at(5 * time.Second)})
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
		{
			name: "a takeover a lease after the claim, its owner frozen by a host stall",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.releasedUnder(ev, "g1.1", 4500*time.Millisecond)
				f.in.Stalls = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(3500 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 3600*time.Millisecond)
			},
			wantCauses: []DuplicateCause{CauseStallTakeover},
		},
		{
			// Continued, the owner answers its own copy: it forwarded it,
			// and its commit finds the key taken over.
			name: "a takeover a lease after the claim, its owner's gateway stopped",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 0)
				s := f.answer(ev, KindGenuine, "g1.1", -10*time.Millisecond, first, "forwarded")
				s.End = f.at(3550 * time.Millisecond)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(100 * time.Millisecond), End: f.at(3500 * time.Millisecond)}}
				f.forwardedAgain(ev, "g2.1", 3200*time.Millisecond)
			},
			wantCauses: []DuplicateCause{CauseFreezeTakeover},
		},
		{
			name: "an async attempt timed out by its gateway's freeze, delivered again",
			build: func(f *fixture) {
				ev := f.asyncEvent("e1")
				f.apply(ev, "g1.1", time.Second)
				f.life("g1.1").Frozen = []Stall{{Start: f.at(1100 * time.Millisecond), End: f.at(4 * time.Second)}}
				f.apply(ev, "g2.1", 9*time.Second)
			},
			wantCauses: []DuplicateCause{CauseAmbiguous},
		},
		{
			// The request sat in the socket past read_timeout while its
			// gateway was stopped; the provider sends it again.
			name: "a late copy answered 408 by a gateway continued after a freeze",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				f.life("g2.1").Frozen = []Stall{{Start: f.at(900 * time.Millisecond), End: f.at(4 * time.Second)}}
				f.readTimedOut(ev, "g2.1")
			},
		},
		{
			name: "a forged copy refused 401, a reused key answered 409 while in flight",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				ev.Sends = append(ev.Sends,
					&Send{Event: ev, Kind: KindForged, Incarnation: "g2.1", Start: f.at(-time.Second),
						End: f.at(-time.Second), Answered: true, Status: 401, Outcome: "unverified"},
					&Send{Event: ev, Kind: KindTamper, Incarnation: "g2.1", Start: f.at(time.Second),
						End: f.at(time.Second), Answered: true, Status: 409, Outcome: "conflict"})
			},
		},
		{
			name: "a key held after the operator's last complete pass",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.heldAt(ev, "g1.1", ActHang, time.Second)
				f.in.Ledger[refKey(ev.Route, ev.Key)] = &LedgerRow{Route: ev.Route, Key: ev.Key, State: "held", CreatedAt: f.at(time.Second)}
				f.in.HoldCutoff = f.at(500 * time.Millisecond)
				ev.GaveUp = "harness stopped"
			},
		},
		{
			name: "gateways killed and terminated by the harness",
			build: func(f *fixture) {
				f.delivered("e1")
				l := f.life("g2.1")
				l.How, l.Stopping, l.End = "killed", f.at(time.Second), f.at(time.Second)
				l = f.life("g1.1")
				l.How, l.Stopping, l.End = "terminated", f.at(2*time.Second), f.at(2*time.Second)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.build(f)
			a := RunAudit(f.in)
			if len(a.Violations) != 0 {
				t.Errorf("violations in a history within the contract:\n%v", a.Violations)
			}
			if got := causes(a); !slices.Equal(got, tc.wantCauses) {
				t.Errorf("duplicate causes = %v, want %v", got, tc.wantCauses)
			}
		})
	}
}
