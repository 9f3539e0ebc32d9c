package chaos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// asyncRoute is the store-and-forward route (Options.Async): its
// deliveries are acknowledged once stored and delivered by the gateways'
// queues, so the provider never reads the upstream's answer.
const asyncRoute = "relay"

// Checks of the async route.
const (
	CheckAsyncStored    = "async-stored"    // nothing acknowledged that is not in the ledger
	CheckAsyncDelivered = "async-delivered" // every acknowledged event reached the upstream with a final answer
	CheckAsyncOnce      = "async-once"      // none twice, except a rescue after a crash or a retried ambiguous attempt
)

// splitAsync takes the async route's events, upstream requests and ledger
// rows out of in (the synchronous checks do not apply to them) and
// returns them as an input of their own.
func splitAsync(in *AuditInput) (sync, async *AuditInput) {
	s, a := *in, *in
	a.Events, s.Events = partition(in.Events, func(ev *Event) bool { return ev.Route == asyncRoute })
	a.Upstream, s.Upstream = partition(in.Upstream, func(r *UpRecord) bool { return r.Route == asyncRoute })
	a.Effects, s.Effects = partition(in.Effects, func(e Effect) bool { return e.Route == asyncRoute })
	s.Ledger, a.Ledger = map[string]*LedgerRow{}, map[string]*LedgerRow{}
	for k, row := range in.Ledger {
		if row.Route == asyncRoute {
			a.Ledger[k] = row
		} else {
			s.Ledger[k] = row
		}
	}
	return &s, &a
}

// partition splits xs into those that match and the others.
func partition[T any](xs []T, match func(T) bool) (yes, no []T) {
	for _, x := range xs {
		if match(x) {
			yes = append(yes, x)
		} else {
			no = append(no, x)
		}
	}
	return yes, no
}

// checkAsync audits the async route: its events, sends, upstream
// requests and ledger rows are checked as the synchronous routes' are
// (checkEvent), its acknowledgements and its stored deliveries as SPEC
// §10 says, and no event applied twice but for the documented second
// copies, each with the same key.
func checkAsync(in *AuditInput, a *Audit) {
	au := newAuditor(in, a)
	au.readUpstream()
	for _, row := range in.Ledger {
		a.LedgerByState[row.State]++
	}
	for _, ev := range in.Events {
		au.checkEvent(ev)
		recs := au.applied[refKey(ev.Route, ev.Key)]
		sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
		for i := 1; i < len(recs); i++ {
			cause, evidence, ok := asyncSecondCopy(in, recs[i-1], recs[i])
			d := Duplicate{Event: ev.ID, Route: ev.Route, Key: ev.Key, Earlier: recs[i-1], Later: recs[i], Cause: cause, Evidence: evidence, Allowed: ok}
			a.Duplicates = append(a.Duplicates, d)
			a.DuplicatesByCause[cause]++
			if !ok {
				a.violate(CheckAsyncOnce, ev.ID, "applied twice under key %q: delivery %d via %s, then %d via %s %v later — %s",
					ev.Key, d.Earlier.Seq, d.Earlier.Gateway, d.Later.Seq, d.Later.Gateway, d.Later.Time.Sub(d.Earlier.Time).Round(time.Millisecond), evidence)
			}
		}
	}
	if in.Inbox {
		checkEffects(in, a, au.events, au.applied, func(_ *Event, earlier, later *UpRecord) DuplicateCause {
			cause, _, _ := asyncSecondCopy(in, earlier, later)
			return cause
		}, a.violate)
	}
}

// checkStored: an acknowledged async event was stored and reached the
// upstream, and a stored delivery is done once the harness drained the
// queue (the route's max_attempts and max_age cannot run out within a
// run). One that passed through (-store-pass) was not stored: its answer
// is the upstream's, checked as a synchronous route's is.
func (au *auditor) checkStored(ev *Event, row *LedgerRow) {
	acked := ev.Acked() && ev.Final.Outcome != "passthrough"
	switch {
	case acked && row == nil:
		au.a.violate(CheckAsyncStored, ev.ID, "acknowledged (%d) but no ledger row holds key %q", ev.Final.Status, ev.Key)
	case acked && len(au.applied[refKey(ev.Route, ev.Key)]) == 0:
		au.a.violate(CheckAsyncDelivered, ev.ID, "acknowledged but never applied by the upstream; the ledger row is %s", row.State)
	case row != nil && row.State != "done":
		au.a.violate(CheckAsyncDelivered, ev.ID, "stored, but its ledger row is %s after the queue was drained", row.State)
	}
}

// checkAck: every acknowledgement of an async event is its first one,
// byte for byte (SPEC §10: a repeat gets the same acknowledgement,
// replayed).
func (au *auditor) checkAck(ev *Event, s *Send) {
	first := s
	for _, o := range ev.Sends {
		if o.Answered && o.Outcome == "accepted" && o.Kind != KindTamper {
			first = o
			break
		}
	}
	if s.Status != first.Status || s.ContentType != first.ContentType || !bytes.Equal(s.Body, first.Body) {
		au.a.violate(CheckReplay, ev.ID, "a %s copy's acknowledgement %d %q %q (%s) differs from the first, %d %q %q",
			s.Kind, s.Status, s.ContentType, s.Body, s.Outcome, first.Status, first.ContentType, first.Body)
		return
	}
	if s.Replayed {
		au.a.ReplaysIdentical++
	}
}

// asyncSecondCopy explains a second application of an async delivery.
// Unless a copy passed through, the earlier one must have gone
// unanswered: an answer its gateway recorded ended the delivery's job.
// Then its gateway was killed, or the host stalled, while it was in
// flight (its job was rescued, or its attempt timed out), the gateway
// that sent the later copy logged delivering a lost attempt again, or the
// attempt got no answer in time and was retried (record.ambiguous
// release): its gateway logged it unanswered, was stopped while it
// waited, or the upstream never answered it.
func asyncSecondCopy(in *AuditInput, earlier, later *UpRecord) (cause DuplicateCause, evidence string, ok bool) {
	for _, c := range []*UpRecord{earlier, later} {
		if passedThrough(in, c) {
			// A copy that passed through was never stored: no queue knew it.
			return CausePassMode, fmt.Sprintf("%s logged delivery %d passed through", c.Gateway, c.Seq), true
		}
	}
	if answerRecorded(in, earlier) {
		return CauseUnexplained, fmt.Sprintf("the ledger holds delivery %d's own answer", earlier.Seq), false
	}
	for _, l := range in.Lives {
		if l.Name == earlier.Gateway && killedInFlight(l, earlier, later, in.Timeout) {
			return CauseCrashTakeover, fmt.Sprintf("%s was SIGKILLed %v after delivery %d arrived", l.Name,
				l.Stopping.Sub(earlier.Time).Round(time.Millisecond), earlier.Seq), true
		}
	}
	// The later copy's run said so: it found River's note of a lost run.
	if loggedAsync(in.Logs[later.Gateway], later.Key, redeliveryMsg, earlier.Time, later.Time) {
		return CauseRescued, later.Gateway + " logged delivering it again", true
	}
	if loggedUnanswered(in.Logs[earlier.Gateway], earlier, later, in.Timeout) {
		return CauseAmbiguous, earlier.Gateway + " logged the attempt unanswered", true
	}
	if earlier.Action == ActLost {
		return CauseAmbiguous, "the upstream never answered it", true
	}
	for _, l := range in.Lives {
		// Stopped mid-attempt, it timed the attempt out once continued.
		if l.Name == earlier.Gateway && stalledWithin(l.Frozen, earlier.Time, earlier.Time.Add(in.Timeout)) > 0 {
			return CauseAmbiguous, l.Name + " was stopped while it was in flight", true
		}
	}
	if stalled, first := stalledInFlight(in.Stalls, earlier, later, earlier.Time.Add(in.Timeout+500*time.Millisecond)); stalled > in.Timeout/2 {
		return CauseStallTakeover, fmt.Sprintf("the host stalled %v in all (from %s) while delivery %d was in flight",
			stalled.Round(time.Millisecond), first.Start.Format("15:04:05.000"), earlier.Seq), true
	}
	return CauseUnexplained, fmt.Sprintf("%v apart", later.Time.Sub(earlier.Time).Round(time.Millisecond)), false
}

// answerRecorded reports whether the ledger's row for r's key holds r's
// own answer. With the inbox, a copy it absorbed after r was answered
// with r's answer too, and may be the one recorded.
func answerRecorded(in *AuditInput, r *UpRecord) bool {
	row := in.Ledger[refKey(r.Route, r.Key)]
	if row == nil || row.State != "done" || deliveryOf(row.Body) != r.Seq {
		return false
	}
	return !slices.ContainsFunc(in.Upstream, func(o *UpRecord) bool {
		return o.Action == ActAbsorbed && o.Route == r.Route && o.Key == r.Key && o.Seq > r.Seq
	})
}

// What a gateway logs of the async route (internal/queue): redeliveryMsg
// before delivering again a delivery whose previous attempt went
// unrecorded, unansweredMsg when an attempt it sent got no answer and the
// next attempt sends it again.
const (
	redeliveryMsg = "delivering again a delivery whose previous attempt was not recorded"
	unansweredMsg = "async attempt sent without an answer"
)

// loggedAsync reports whether lines hold a line of the async route for key
// starting with msg, written in (from, to].
func loggedAsync(lines []LogLine, key, msg string, from, to time.Time) bool {
	for _, l := range lines {
		if l.Route == asyncRoute && l.Key == key && strings.HasPrefix(l.Msg, msg) && l.Time.After(from) && !l.Time.After(to) {
			return true
		}
	}
	return false
}

// loggedUnanswered reports whether the gateway that sent the earlier copy
// logged, while it was in flight and before the later copy, that the
// attempt got no answer: a copy the application was too slow to answer
// (with -inbox it writes to its own database first) is retried as a
// timed-out one is, whatever the faults. The upstream's AnswerAt cannot
// bound it: an attempt's clock starts before its request reaches the
// upstream, by as long as the gateway takes to connect and send.
func loggedUnanswered(lines []LogLine, earlier, later *UpRecord, timeout time.Duration) bool {
	until := earlier.Time.Add(timeout + 2*time.Second)
	if later.Time.Before(until) {
		until = later.Time
	}
	return loggedAsync(lines, earlier.Key, unansweredMsg, earlier.Time.Add(-100*time.Millisecond), until)
}

// asyncBody is an async event's body.
func asyncBody(key, id, effect string, amount int) []byte {
	return fmt.Appendf(nil, `{"relay_id":%q,"chaos_event":%q,"chaos_effect":%q,"amount":%d}`, key, id, effect, amount)
}

// drainQueue waits, after the load, until the async route has no queued
// deliveries left (or a minute passed): the audit then expects every
// acknowledged event at the upstream.
func (r *runner) drainQueue(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		rows, err := r.db.Ledger(ctx)
		queued := 0
		for _, row := range rows {
			if row.Route == asyncRoute && row.State == "queued" {
				queued++
			}
		}
		if err == nil && queued == 0 {
			return
		}
		r.logf("waiting for %d queued async deliveries", queued)
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	r.logf("async deliveries still queued after a minute")
}
