package chaos

import (
	"slices"
	"testing"
	"time"
)

// effect records the application's effect row of an applied delivery.
func (f *fixture) effect(up *UpRecord) {
	f.in.Effects = append(f.in.Effects, Effect{ID: int64(len(f.in.Effects) + 1), Route: up.Route, Key: up.Key,
		Seq: up.Seq, Gateway: up.Gateway, Kind: up.Action, At: up.Time})
}

// takeover builds ev's first copy applied through g1.1, which is then
// SIGKILLed, and its retry forwarded through g2.1 after the lease; second
// gives what the upstream did with the retry.
func (f *fixture) takeover(second func(ev *Event, first *UpRecord) *UpRecord) {
	ev := f.event("e1")
	first := f.apply(ev, "g1.1", 0)
	f.effect(first)
	l := f.life("g1.1")
	l.How, l.Stopping = "killed", f.at(5*time.Millisecond)
	f.cut(ev, "g1.1", -5*time.Millisecond, 6*time.Millisecond)
	up := second(ev, first)
	f.answer(ev, KindGenuine, "g2.1", 3*time.Second, up, "forwarded")
	f.record(ev, up)
}

// absorb records the inbox turning away ev's copy from gw at d with the
// first copy's recorded answer.
func (f *fixture) absorb(ev *Event, first *UpRecord, gw string, d time.Duration) *UpRecord {
	f.seq++
	r := &UpRecord{Seq: f.seq, Time: f.at(d), Gateway: gw, Route: ev.Route, Key: ev.Key, Body: ev.Body,
		Action: ActAbsorbed, Status: first.Status, ContentType: first.ContentType, Response: first.Response}
	f.in.Upstream = append(f.in.Upstream, r)
	return r
}

// absorbedBeforeItsRetry builds ev's first copy reaching the upstream
// through g1.1 and waiting there while g1.1 answered status with outcome;
// the provider's retry through g1.1 is applied and recorded, and the first
// copy then absorbed with the retry's answer.
func (f *fixture) absorbedBeforeItsRetry(ev *Event, status int, outcome string) {
	first := f.absorb(ev, &UpRecord{}, "g1.1", 0)
	ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
		Start: f.at(0), End: f.at(1360 * time.Millisecond), Answered: true, Status: status, Outcome: outcome})
	retry := f.apply(ev, "g1.1", 1400*time.Millisecond)
	first.Status, first.ContentType, first.Response = retry.Status, retry.ContentType, retry.Response
	f.effect(retry)
	f.answer(ev, KindGenuine, "g1.1", 1400*time.Millisecond, retry, "forwarded")
	f.record(ev, retry)
}

// With the inbox (-inbox), the audit counts effects: a takeover's second
// copy is fine once absorbed, and a violation once applied, whatever sent it.
func TestAuditInboxCountsEffects(t *testing.T) {
	tests := []struct {
		name         string
		build        func(f *fixture)
		wantChecks   []string
		wantAbsorbed map[DuplicateCause]int
	}{
		{
			name: "a takeover's second copy absorbed by the inbox",
			build: func(f *fixture) {
				f.takeover(func(ev *Event, first *UpRecord) *UpRecord { return f.absorb(ev, first, "g2.1", 3*time.Second) })
			},
			wantAbsorbed: map[DuplicateCause]int{CauseCrashTakeover: 1},
		},
		{
			// A duplicate waited on the claim at g1.1 while the first copy
			// timed out there; its retry, through the same gateway, was
			// absorbed, and the duplicate got the replayed answer.
			name: "an ambiguous release's retry absorbed, answered to a copy that waited on the claim",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 300*time.Millisecond)
				f.effect(first)
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
					Start: f.at(0), End: f.at(1360 * time.Millisecond), Answered: true, Status: 504, Outcome: "released"})
				f.in.Logs["g1.1"] = []LogLine{{Time: f.at(1360 * time.Millisecond), Msg: "delivery", Route: ev.Route, Key: ev.Key,
					Outcome: "released", Err: "upstream timed out after sending"}}
				f.absorb(ev, first, "g1.1", 1400*time.Millisecond)
				s := f.answer(ev, KindDuplicate, "g1.1", 100*time.Millisecond, first, "forwarded")
				s.End = f.at(1600 * time.Millisecond)
				f.record(ev, first)
			},
			wantAbsorbed: map[DuplicateCause]int{CauseAmbiguous: 1},
		},
		{
			// The first copy reached the upstream late and waited in the
			// inbox while its gateway timed out and released the key; the
			// provider's retry was applied first, then the first absorbed.
			name: "a released first copy absorbed after its retry applied",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.in.Logs["g1.1"] = []LogLine{{Time: f.at(1360 * time.Millisecond), Msg: "delivery", Route: ev.Route, Key: ev.Key,
					Outcome: "released", Err: "upstream timed out after sending"}}
				f.absorbedBeforeItsRetry(ev, 504, "released")
			},
			wantAbsorbed: map[DuplicateCause]int{CauseAmbiguous: 1},
		},
		{
			// On the hold route the operator released the key while the
			// first copy waited in the inbox.
			name: "a held first copy absorbed after the operator released the key",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.in.Resolutions = append(f.in.Resolutions, Resolution{Route: ev.Route, Key: ev.Key, Action: "release",
					Start: f.at(1370 * time.Millisecond), End: f.at(1380 * time.Millisecond), Life: "g2.1"})
				f.absorbedBeforeItsRetry(ev, 504, "held")
			},
			wantAbsorbed: map[DuplicateCause]int{CauseOperatorRelease: 1},
		},
		{
			name: "a second copy no crash explains, absorbed",
			build: func(f *fixture) {
				ev, first := f.delivered("e1")
				f.effect(first)
				f.absorb(ev, first, "g2.1", 10*time.Millisecond)
			},
			wantChecks:   []string{CheckDuplicate},
			wantAbsorbed: map[DuplicateCause]int{CauseUnexplained: 1},
		},
		{
			name: "a takeover's second copy applied again",
			build: func(f *fixture) {
				f.takeover(func(ev *Event, _ *UpRecord) *UpRecord {
					up := f.apply(ev, "g2.1", 3*time.Second)
					f.effect(up)
					return up
				})
			},
			wantChecks:   []string{CheckEffects, CheckDuplicate},
			wantAbsorbed: map[DuplicateCause]int{},
		},
		{
			name: "an effect row no applied delivery explains",
			build: func(f *fixture) {
				ev, up := f.delivered("e1")
				f.effect(up)
				f.in.Effects = append(f.in.Effects, Effect{ID: 9, Route: ev.Route, Key: ev.Key, Seq: 77, Gateway: "g2.1"})
			},
			wantChecks:   []string{CheckEffects},
			wantAbsorbed: map[DuplicateCause]int{},
		},
		{
			name: "an applied delivery without its effect row",
			build: func(f *fixture) {
				f.delivered("e1")
			},
			wantChecks:   []string{CheckEffects},
			wantAbsorbed: map[DuplicateCause]int{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.in.Inbox = true
			tc.build(f)
			a := RunAudit(f.in)
			got := checks(a)
			slices.Sort(got)
			want := slices.Clone(tc.wantChecks)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("violated checks = %v, want %v; violations:\n%v", got, want, a.Violations)
			}
			if a.EffectsTwice != 0 && !slices.Contains(tc.wantChecks, CheckEffects) {
				t.Errorf("%d events applied twice, want none", a.EffectsTwice)
			}
			if len(a.AbsorbedByCause) != len(tc.wantAbsorbed) {
				t.Errorf("absorbed by cause = %v, want %v", a.AbsorbedByCause, tc.wantAbsorbed)
			}
			for c, n := range tc.wantAbsorbed {
				if a.AbsorbedByCause[c] != n {
					t.Errorf("absorbed by cause = %v, want %v", a.AbsorbedByCause, tc.wantAbsorbed)
				}
			}
		})
	}
}

// An absorbed takeover is still a takeover: hookstamp_takeovers_total
// must count it.
func TestAuditInboxComparesTakeoversWithTheMetric(t *testing.T) {
	f := newFixture()
	f.in.Inbox = true
	f.takeover(func(ev *Event, first *UpRecord) *UpRecord { return f.absorb(ev, first, "g2.1", 3*time.Second) })
	f.life("g2.1").Metrics = &Scrape{Present: true, HasTakeovers: true, Takeovers: 0}
	if got := checks(RunAudit(f.in)); !slices.Equal(got, []string{CheckTakeovers}) {
		t.Fatalf("violated checks = %v, want [%s]", got, CheckTakeovers)
	}
	f.life("g2.1").Metrics.Takeovers = 1
	if a := RunAudit(f.in); len(a.Violations) != 0 {
		t.Fatalf("with the takeover counted: %v", a.Violations)
	}
}
