package chaos

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// passLine is the delivery line gw logs at d for a copy of ev it
// forwarded without deduplication.
func (f *fixture) passLine(ev *Event, gw string, d time.Duration) {
	f.in.Logs[gw] = append(f.in.Logs[gw], LogLine{Time: f.at(d), Msg: "delivery", Route: ev.Route, Key: ev.Key, Outcome: "passthrough"})
}

// With -store-pass a copy that passed through knew nothing of its key:
// another body under it, a hold, an async route's store. The audit lets
// such a copy be, when its gateway logged it passed, and only then.
func TestStorePassCopiesThatKnewNothingOfTheirKey(t *testing.T) {
	tests := []struct {
		name  string
		build func(f *fixture) // one copy that passed through, logged at 20 ms
		check string           // violated when the line is missing
	}{
		{
			name: "another body under the key, then its replay and 422 for the event's own",
			build: func(f *fixture) {
				ev := f.event("e1")
				up := f.apply(ev, "g1.1", 0)
				up.Body = tamperedBody(ev)
				f.answer(ev, KindTamper, "g1.1", 0, up, "passthrough")
				f.answer(ev, KindTamper, "g2.1", time.Second, up, "replayed")
				s := f.conflict(ev, KindGenuine, "g2.1", 2*time.Second)
				s.Status, s.Outcome = 422, "mismatch"
				f.passLine(ev, "g1.1", 20*time.Millisecond)
			},
			check: CheckKeyReuse,
		},
		{
			name: "a replay of the answer a passthrough got from the application for another copy",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g2.1", 0) // its own send timed out
				f.answer(ev, KindDuplicate, "g1.1", time.Second, first, "passthrough")
				f.in.Logs["g1.1"] = []LogLine{{Time: f.at(time.Second + 20*time.Millisecond), Route: ev.Route, Key: ev.Key,
					Msg: "passthrough delivery not recorded: the ledger is unavailable"}}
				f.answer(ev, KindGenuine, "g1.1", 2*time.Second, first, "replayed")
			},
			check: CheckAcked,
		},
		{
			name: "two copies passed through, the second answered with the first's answer",
			build: func(f *fixture) {
				ev := f.event("e1")
				first := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, first, "passthrough")
				f.apply(ev, "g1.1", time.Second) // the application replayed the first's answer
				f.answer(ev, KindDuplicate, "g1.1", time.Second, first, "passthrough")
				f.passLine(ev, "g1.1", 20*time.Millisecond)
				f.passLine(ev, "g1.1", time.Second+20*time.Millisecond)
			},
			check: CheckDuplicate,
		},
		{
			name: "a held key",
			build: func(f *fixture) {
				ev := f.event("e1")
				ev.Route = holdRoute
				f.in.Logs["g2.1"] = []LogLine{{Time: f.at(-time.Second), Msg: msgHeld, Route: ev.Route, Key: ev.Key}}
				up := f.apply(ev, "g1.1", 0)
				f.answer(ev, KindGenuine, "g1.1", 0, up, "passthrough")
				f.passLine(ev, "g1.1", 20*time.Millisecond)
			},
			check: CheckHold,
		},
		{
			name: "an async delivery forwarded at once, then stored by another copy",
			build: func(f *fixture) {
				ev := f.asyncEvent("e1")
				up := f.apply(ev, "g1.1", 0)
				*ev.Final = Send{Event: ev, EventID: ev.ID, Kind: KindGenuine, Incarnation: "g1.1", Answered: true, Status: 200, Outcome: "passthrough",
					Start: f.at(0), End: f.at(30 * time.Millisecond), ContentType: "application/json", Body: up.Response}
				f.passLine(ev, "g1.1", 20*time.Millisecond)
				f.apply(ev, "g2.1", 5*time.Second) // the queue's delivery of a copy stored later
			},
			check: CheckAsyncOnce,
		},
	}
	for _, tc := range tests {
		for _, logged := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/logged=%v", tc.name, logged), func(t *testing.T) {
				f := newFixture()
				f.in.StorePass = true
				tc.build(f)
				if !logged {
					f.in.Logs["g1.1"] = nil
				}
				got := checks(RunAudit(f.in))
				if logged && len(got) > 0 || !logged && (len(got) == 0 || !slices.Contains(got, tc.check)) {
					t.Errorf("violated checks %v; want none when logged, %s when not", got, tc.check)
				}
			})
		}
	}
}

// With -store-pass, the passthrough line that excuses a copy is the one
// logged while the send that carried it was open, and a copy whose send
// was answered forwarded was deduplicated: another copy's passthrough
// through the same gateway a moment later excuses neither.
func TestStorePassExcusesOnlyTheCopyThatPassedThrough(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			f := newFixture()
			f.in.StorePass = true
			ev, _ := f.delivered("e1")
			second := f.apply(ev, "g2.1", 5*time.Second)
			if cut {
				ev.Sends = append(ev.Sends, &Send{Event: ev, EventID: ev.ID, Kind: KindLate, Incarnation: "g2.1",
					Start: f.at(4990 * time.Millisecond), End: f.at(5500 * time.Millisecond), Err: "context canceled", Aborted: true})
			} else {
				f.answer(ev, KindLate, "g2.1", 5*time.Second, second, "forwarded")
			}
			third := f.apply(ev, "g2.1", 6*time.Second)
			f.answer(ev, KindDuplicate, "g2.1", 6*time.Second, third, "passthrough")
			f.passLine(ev, "g2.1", 6*time.Second+5*time.Millisecond)
			a := RunAudit(f.in)
			if len(a.Duplicates) != 2 || a.Duplicates[0].Allowed || !a.Duplicates[1].Allowed || a.Duplicates[1].Cause != CausePassMode {
				t.Errorf("duplicates %+v: want the second copy not allowed, the third passed through", a.Duplicates)
			}
			if !slices.Contains(checks(a), CheckDuplicate) {
				t.Errorf("violated checks %v, want %s", checks(a), CheckDuplicate)
			}
		})
	}
}
