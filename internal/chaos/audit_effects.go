package chaos

import "sort"

// causeConcurrent: an absorbed copy that reached the upstream before the
// applied one and waited on its lock in the inbox, when no applied copy
// follows it to judge.
const causeConcurrent DuplicateCause = "concurrent copy, waited on the applying one"

// checkEffects audits the -inbox mode by effects, not deliveries: the
// application's effects table must hold each event at most once, each row
// the effect of a delivery the upstream logged as applied, and each
// applied delivery its row. Every copy the inbox absorbed is counted by
// what sent it (classify: a takeover after a crash, an ambiguous release,
// …). It had no effect, but a copy the gateways were not allowed to send
// is still a violation of theirs (CheckDuplicate).
func checkEffects(in *AuditInput, a *Audit, events map[string]*Event, applied map[string][]*UpRecord,
	classify func(ev *Event, earlier, later *UpRecord) DuplicateCause,
	violate func(check, ev, format string, args ...any)) {
	if a.AbsorbedByCause == nil {
		a.AbsorbedByCause = map[DuplicateCause]int{}
	}
	a.Effects += len(in.Effects)
	evID := func(ref string) string {
		if ev := events[ref]; ev != nil {
			return ev.ID
		}
		return ""
	}
	bySeq := map[int64]*UpRecord{}
	for _, recs := range applied {
		for _, r := range recs {
			bySeq[r.Seq] = r
		}
	}
	perRef := map[string][]Effect{}
	effectOf := map[int64]bool{}
	for _, e := range in.Effects {
		ref := refKey(e.Route, e.Key)
		perRef[ref] = append(perRef[ref], e)
		effectOf[e.Seq] = true
		if up := bySeq[e.Seq]; up == nil || refKey(up.Route, up.Key) != ref {
			violate(CheckEffects, evID(ref), "effect row %d (delivery %d via %s) matches no delivery the upstream logged as applied", e.ID, e.Seq, e.Gateway)
		}
	}
	for ref, es := range perRef {
		if len(es) < 2 {
			continue
		}
		seqs := make([]int64, len(es))
		for i, e := range es {
			seqs[i] = e.Seq
		}
		violate(CheckEffects, evID(ref), "applied %d times in the application's database (deliveries %v)", len(es), seqs)
		a.EffectsTwice++
	}
	for seq, up := range bySeq {
		if !effectOf[seq] {
			violate(CheckEffects, evID(refKey(up.Route, up.Key)), "delivery %d via %s was logged applied but left no effect row", seq, up.Gateway)
		}
	}
	classifyAbsorbed(in, a, events, applied, classify, violate)
}

// classifyAbsorbed counts each copy the inbox absorbed by its cause,
// classified against the copy that reached the upstream before it (applied
// or absorbed), as a chain of duplicate deliveries would be.
func classifyAbsorbed(in *AuditInput, a *Audit, events map[string]*Event, applied map[string][]*UpRecord,
	classify func(ev *Event, earlier, later *UpRecord) DuplicateCause,
	violate func(check, ev, format string, args ...any)) {
	chains := map[string][]*UpRecord{}
	for ref, recs := range applied {
		chains[ref] = append(chains[ref], recs...)
	}
	for _, r := range in.Upstream {
		if r.Action == ActAbsorbed {
			ref := refKey(r.Route, r.Key)
			chains[ref] = append(chains[ref], r)
		}
	}
	for ref, chain := range chains {
		sort.Slice(chain, func(i, j int) bool { return chain[i].Seq < chain[j].Seq })
		ev := events[ref]
		for i, r := range chain {
			if r.Action != ActAbsorbed {
				continue
			}
			a.Absorbed++
			switch {
			case len(applied[ref]) == 0 || ev == nil:
				id := ""
				if ev != nil {
					id = ev.ID
				}
				violate(CheckEffects, id, "delivery %d via %s was absorbed by the inbox, but no copy of the event was applied", r.Seq, r.Gateway)
			default:
				cause := causeConcurrent
				if i > 0 {
					cause = classify(ev, chain[i-1], r)
				} else if next := nextApplied(chain[i+1:]); next != nil {
					// It reached the upstream first and waited on the lock of
					// a later copy, which applied: that later copy is the one
					// sent again, judged against this one.
					cause = classify(ev, r, next)
				}
				a.AbsorbedByCause[cause]++
				if !cause.Allowed(in.StorePass) {
					// No effect, but the gateways broke their own promise.
					violate(CheckDuplicate, ev.ID, "forwarded again under key %q: delivery %d via %s, absorbed by the inbox — %s",
						r.Key, r.Seq, r.Gateway, cause)
				}
			}
		}
	}
}

// nextApplied is the first record of chain the upstream applied, or nil.
func nextApplied(chain []*UpRecord) *UpRecord {
	for _, r := range chain {
		if r.Action != ActAbsorbed {
			return r
		}
	}
	return nil
}
