package chaos

import (
	"fmt"
	"testing"
	"time"
)

// Histories that break a SPEC promise while looking like an allowed
// duplicate, or while doing nothing: the audit must fail each. Found by a
// review of the audit (every one passed it before).
func TestAuditBlindSpots(t *testing.T) {
	tests := []struct {
		name  string
		build func(f *fixture)
	}{
		{
			name: "double forward excused by an unrelated ambiguous release",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.seq++
				f.in.Upstream = append(f.in.Upstream, &UpRecord{Seq: f.seq, Time: f.at(0), Gateway: "g1.1",
					Route: ev.Route, Key: ev.Key, Body: ev.Body, Action: ActHang})
				f.in.Logs["g1.1"] = []LogLine{{Time: f.at(time.Second), Msg: "delivery", Route: ev.Route, Key: ev.Key,
					Outcome: "released", Err: "upstream timed out after sending"}}
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
					Start: f.at(0), End: f.at(time.Second), Answered: true, Status: 504, Outcome: "released"})
				first := f.apply(ev, "g1.1", 2*time.Second)
				f.answer(ev, KindGenuine, "g1.1", 2*time.Second, first, "forwarded")
				f.record(ev, first)
				f.apply(ev, "g2.1", 3500*time.Millisecond) // applied again
			},
		},
		{
			name: "concurrent double forward excused as a crash takeover",
			build: func(f *fixture) {
				ev := f.event("e1")
				f.apply(ev, "g1.1", 0)
				l := f.life("g1.1")
				l.How, l.Stopping = "killed", f.at(5*time.Millisecond)
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindDuplicate, Incarnation: "g1.1",
					Start: f.at(-5 * time.Millisecond), End: f.at(6 * time.Millisecond), Err: "connection reset"})
				second := f.apply(ev, "g2.1", 30*time.Millisecond) // the lease ignored
				f.answer(ev, KindGenuine, "g2.1", 0, second, "forwarded")
				f.record(ev, second)
			},
		},
		{
			name: "re-forward of a recorded event excused by scattered host stalls",
			build: func(f *fixture) {
				ev, _ := f.delivered("e1")
				f.in.Stalls = []Stall{
					{Start: f.at(3 * time.Second), End: f.at(3*time.Second + 500*time.Millisecond)},
					{Start: f.at(7 * time.Second), End: f.at(7*time.Second + 500*time.Millisecond)},
				}
				late := f.apply(ev, "g2.1", 10*time.Second)
				f.answer(ev, KindLate, "g2.1", 10*time.Second, late, "forwarded")
			},
		},
		{
			name: "a provider got 200 for an event the upstream never applied",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
					Start: f.at(0), End: f.at(10 * time.Millisecond), Answered: true, Status: 200,
					Outcome: "conflict", ContentType: "application/json", Body: []byte(`{"ok":true}`)})
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

// A run in which nothing was applied and nothing acknowledged does not
// pass (make chaos exits on Report.OK).
func TestReportFailsWhenNothingHappened(t *testing.T) {
	f := newFixture()
	for i := range 5 {
		ev := f.event(fmt.Sprintf("e%d", i))
		ev.Sends = append(ev.Sends, &Send{Event: ev, Kind: KindGenuine, Attempt: 1, Incarnation: "g1.1",
			Start: f.at(0), End: f.at(time.Millisecond), Answered: true, Status: 503, Outcome: "unavailable"})
		ev.GaveUp = "harness stopped"
	}
	rep := &Report{Audit: RunAudit(f.in)}
	if rep.OK() {
		t.Errorf("Report.OK() with %d events, %d acknowledged, %d applied", rep.Audit.Events, rep.Audit.Acked, rep.Audit.Applied)
	}
}
