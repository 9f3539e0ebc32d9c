package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DuplicateCause says why the upstream applied an event more than once.
type DuplicateCause string

// Duplicate causes; Allowed says which the contract permits.
const (
	// CauseCrashTakeover: the gateway forwarding the earlier copy was
	// SIGKILLed before it could record the answer; its claim expired with
	// the lease and a retry took it over (SPEC §6: the one documented
	// exception, same Idempotency-Key).
	CauseCrashTakeover DuplicateCause = "takeover after a crash"
	// CauseStallTakeover: the same lease takeover, but the owner was frozen
	// rather than dead: the whole host stalled (the harness saw its own
	// clock jump) for longer than the lease allows while the earlier copy
	// was in flight. To the other replicas a frozen owner is a dead one.
	CauseStallTakeover DuplicateCause = "takeover after a host stall"
	// CauseFreezeTakeover: the same again, the earlier copy's gateway alone
	// stopped (gateway_frozen) past its claim's lease. Continued, it may
	// still answer its own copy: it sent it before the freeze.
	CauseFreezeTakeover DuplicateCause = "takeover after its gateway was frozen"
	// CauseAmbiguous: the earlier copy got no answer in time and was
	// released (record.ambiguous: release is at-least-once by definition).
	CauseAmbiguous DuplicateCause = "ambiguous result released"
	// CauseOperatorRelease: the operator released a held key while its
	// first copy was still at the upstream, unapplied.
	CauseOperatorRelease DuplicateCause = "held key released by the operator"
	// CauseRescued: an async delivery's run ended without recording its
	// attempt (its replica was killed or lost the ledger) and the gateway
	// that sent the later copy logged delivering it again (SPEC §10: the
	// one documented second copy, same Idempotency-Key).
	CauseRescued DuplicateCause = "async attempt lost, delivered again"
	// CausePassMode: the later copy was forwarded without deduplication
	// because a dependency was down and the policy says pass.
	CausePassMode DuplicateCause = "dependency outage, pass mode"

	// CauseCommitFailure: the ledger commit of the earlier copy failed
	// (its answer was given but never recorded), the screen, then its only
	// record (SPEC §1: "while it lives"), could not keep it, and a later
	// copy took the expired claim over.
	CauseCommitFailure DuplicateCause = "commit failure, then screen lost the entry"
	// CauseScreenLoss: Redis was flushed or restarted while the earlier copy
	// was in flight: its claim vanished and a repeat claimed afresh.
	CauseScreenLoss DuplicateCause = "screen lost an in-flight claim"
	// CauseScreenOutage: Redis became unreachable while the earlier copy was
	// in flight and the repeat was claimed in the ledger instead
	// (screen.on_unavailable: store), which did not know the screen claim.
	CauseScreenOutage DuplicateCause = "in-flight screen claim unknown to the ledger claim"
	// CauseLiveLease: the earlier copy's gateway was alive but its lease
	// expired before it recorded the answer (a slow ledger or screen).
	CauseLiveLease DuplicateCause = "lease expired on a live claim"
	// CauseUnexplained: no evidence explains it.
	CauseUnexplained DuplicateCause = "unexplained"
)

// Allowed reports whether the cause is permitted by the contract for the
// given configuration.
func (c DuplicateCause) Allowed(storePass bool) bool {
	switch c {
	case CauseCrashTakeover, CauseStallTakeover, CauseFreezeTakeover, CauseAmbiguous, CauseOperatorRelease, CauseRescued,
		CauseCommitFailure:
		return true
	case CausePassMode:
		return storePass
	}
	return false
}

// Duplicate is one extra application of an event by the upstream.
type Duplicate struct {
	Event     string
	Route     string
	Key       string // the Idempotency-Key both copies carried
	Earlier   *UpRecord
	Later     *UpRecord
	Cause     DuplicateCause
	Allowed   bool
	Evidence  string
	Violation bool
}

// Violation is one broken guarantee.
type Violation struct {
	Check  string
	Event  string
	Detail string
}

func (v Violation) String() string {
	if v.Event == "" {
		return fmt.Sprintf("[%s] %s", v.Check, v.Detail)
	}
	return fmt.Sprintf("[%s] event %s: %s", v.Check, v.Event, v.Detail)
}

// Checks, as named in the report.
const (
	CheckAcked      = "acked-recorded"   // acknowledged → reached the upstream, done row = answer
	CheckDuplicate  = "once"             // no event applied twice outside the exception
	CheckReplay     = "replay-identical" // every replay is the original, byte for byte
	CheckKeyReuse   = "key-reuse"        // a key reused with a different body never forwarded
	CheckLost       = "no-lost-request"  // every send to a live gateway got an answer
	CheckOutcome    = "outcome"          // each copy got an outcome it may get
	CheckTakeovers  = "takeover-metric"  // crash duplicates ≤ hookstamp_takeovers_total
	CheckShutdown   = "graceful-stop"    // SIGTERM exits 0
	CheckDrain      = "drain"            // SIGTERM answers what it had accepted
	CheckExpires    = "claim-expires"    // a 409 has a claim younger than the lease behind it
	CheckUpstreamID = "upstream-key"     // every forward carries the event's Idempotency-Key
	CheckHold       = "hold"             // a held key reaches the upstream only once resolved
	CheckHealth     = "gateway-health"   // no data race, panic or fatal error
	CheckEffects    = "effect-once"      // -inbox: no event's effect in the application's database twice
)

// LogLine is one gateway log line, the fields the auditor reads.
type LogLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Msg     string    `json:"msg"`
	Route   string    `json:"route"`
	Key     string    `json:"key"`
	Outcome string    `json:"outcome"`
	Err     string    `json:"err"`
}

// ReadGatewayLog parses the JSON lines of one incarnation's log. Lines that
// are not JSON are the runtime's: a data race report, a panic or a fatal
// error, returned as problems.
func ReadGatewayLog(path string) (lines []LogLine, problems []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var l LogLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			lines = append(lines, l)
			continue
		}
		text := sc.Text()
		for _, marker := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			if strings.HasPrefix(text, marker) {
				problems = append(problems, text)
			}
		}
	}
	return lines, problems, sc.Err()
}

// FaultRecord is a fault as it was injected.
type FaultRecord struct {
	Fault
	Start, End time.Time
	Note       string
}

// AuditInput is everything the auditor reads.
type AuditInput struct {
	Events   []*Event
	Upstream []*UpRecord
	Ledger   map[string]*LedgerRow
	Lives    []*Life
	Faults   []FaultRecord
	// Logs are the gateway logs by incarnation name.
	Logs map[string][]LogLine
	// LogProblems are races, panics and fatal errors the gateways printed.
	LogProblems []string
	// Stalls are the moments the harness's own clock jumped: the host froze.
	Stalls []Stall
	// Lease and Timeout are screen.lease and upstream.timeout;
	// ShutdownTimeout is server.shutdown_timeout.
	Lease, Timeout, ShutdownTimeout time.Duration
	StorePass                       bool
	// Inbox: the upstream applied effects through the inbox library;
	// Effects are the rows of its effects table.
	Inbox   bool
	Effects []Effect
	// Resolutions are the operator's resolutions of keys held on
	// holdRoute; HoldCutoff is the cutoff of its last complete pass: every
	// key held before it had been listed and resolved.
	Resolutions []Resolution
	HoldCutoff  time.Time
}

// Audit is the auditor's findings.
type Audit struct {
	Violations []Violation
	Duplicates []Duplicate

	Events, Acked, Declined, GaveUp int
	GaveUpReasons                   map[string]int
	Sends                           int
	SendsByKind                     map[SendKind]int
	Outcomes                        map[string]int
	Unanswered, UnansweredExpected  int
	Replays, ReplaysIdentical       int
	UpstreamReceived, Applied       int
	UpstreamByAction                map[string]int
	DuplicatesByCause               map[DuplicateCause]int
	LedgerByState                   map[string]int
	// Holds are the keys gateways logged held (holdRoute); Resolved the
	// operator's resolutions by action.
	Holds    int
	Resolved map[string]int
	// Unrecorded are acknowledged events whose commit failed after the
	// upstream answered (SPEC §1), one line each.
	Unrecorded []string
	// UnrecordedPassthroughs are replays of an answer a delivery got
	// while passing through with the ledger down (-store-pass): the
	// screen kept it, the ledger never had it.
	UnrecordedPassthroughs int
	// PassedReuse are copies with another body under an event's key
	// that passed through (-store-pass): nothing checked the key.
	PassedReuse                     int
	Takeovers, CommitFailures       float64
	HasTakeovers, HasCommitFailures bool
	MetricsScraped                  bool
	// -inbox: Effects are the rows of the application's effects table;
	// Absorbed the second copies its inbox turned away, by what caused
	// them (as a duplicate delivery would have been classified).
	Effects         int
	EffectsTwice    int // events with more than one effect row
	Absorbed        int
	AbsorbedByCause map[DuplicateCause]int
}

var deliveryRe = regexp.MustCompile(`"delivery":(\d+)`)

// deliveryOf is the upstream delivery an answer body names (0: none).
func deliveryOf(body []byte) int64 {
	m := deliveryRe.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// landed are the resolutions that took effect, each with the time it did
// (Took): each one a gateway answered, and one whose answer was lost
// (Unsure) when its gateway logged resolving the key after the call
// began; it then dates from that line.
func landed(rs []Resolution, logs map[string][]LogLine) []Resolution {
	out := make([]Resolution, 0, len(rs))
	for _, r := range rs {
		i := slices.IndexFunc(logs[r.Life], func(l LogLine) bool {
			return l.Msg == "admin: held record resolved" && l.Route == r.Route && l.Key == r.Key && !l.Time.Before(r.Start)
		})
		switch {
		case i >= 0:
			r.Took = logs[r.Life][i].Time
		case r.Unsure:
			continue
		default:
			r.Took = r.End
		}
		if r.Unsure {
			r.Start = r.Took
		}
		out = append(out, r)
	}
	return out
}

// RunAudit checks every guarantee against the evidence.
func RunAudit(in *AuditInput) *Audit {
	a := newAudit()
	in, async := splitAsync(in)
	in.Resolutions = landed(in.Resolutions, in.Logs)
	checkAsync(async, a)
	au := newAuditor(in, a)
	au.readUpstream()
	for _, row := range in.Ledger {
		a.LedgerByState[row.State]++
	}
	for _, p := range in.LogProblems {
		a.violate(CheckHealth, "", "%s", p)
	}
	for _, ev := range in.Events {
		au.checkEvent(ev)
	}
	au.checkDuplicates()
	if in.Inbox {
		checkEffects(in, a, au.events, au.applied, func(ev *Event, earlier, later *UpRecord) DuplicateCause {
			return au.classify(ev, earlier, later, au.answeredDirect).Cause
		}, a.violate)
	}
	for _, vs := range au.unrecorded {
		a.Violations = append(a.Violations, vs...)
	}
	au.checkLives()
	au.checkCounters()
	checkLiveness(in, au.lives, a.violate)
	a.Holds = checkHolds(in, au.events, a.violate)
	for _, r := range in.Resolutions {
		a.Resolved[r.Action]++
	}
	sort.SliceStable(a.Violations, func(i, j int) bool { return a.Violations[i].Check < a.Violations[j].Check })
	return a
}

// newAudit is an Audit with its counters ready.
func newAudit() *Audit {
	return &Audit{GaveUpReasons: map[string]int{}, SendsByKind: map[SendKind]int{}, Outcomes: map[string]int{},
		UpstreamByAction: map[string]int{}, DuplicatesByCause: map[DuplicateCause]int{}, LedgerByState: map[string]int{},
		Resolved: map[string]int{}}
}

// violate records a broken guarantee.
func (a *Audit) violate(check, ev, format string, args ...any) {
	a.Violations = append(a.Violations, Violation{Check: check, Event: ev, Detail: fmt.Sprintf(format, args...)})
}

// logKey names what one incarnation logged about one key.
type logKey struct{ life, ref string }

// auditor holds the synchronous routes' evidence, indexed, while RunAudit
// goes through it.
type auditor struct {
	in     *AuditInput
	a      *Audit
	events map[string]*Event // by route and key
	lives  map[string]*Life  // by incarnation
	bySeq  map[int64]*UpRecord
	// applied are each event's upstream deliveries that acted on it.
	applied map[string][]*UpRecord
	logged  map[logKey][]LogLine
	// answeredSeq are the upstream deliveries whose answer reached a
	// provider; answeredDirect the same, by the send that the delivery
	// itself answered (-inbox: not the answer an inbox replayed to a
	// later copy).
	answeredSeq, answeredDirect map[int64]*Send
	absorbedOf                  map[string][]*UpRecord
	// unrecorded are first-hand answers that differ from the ledger's,
	// by upstream delivery: legitimate only for a copy of an allowed
	// duplicate (both copies answered, one recorded).
	unrecorded     map[int64][]Violation
	unrecordedSeen map[string]bool
	// sendStart is the earliest start of a send answered by each delivery.
	sendStart map[int64]time.Time
	// passTouched are the events of which a copy passed through
	// (-store-pass): their key's state is what the outage left.
	passTouched map[string]bool
}

func newAuditor(in *AuditInput, a *Audit) *auditor {
	au := &auditor{in: in, a: a, events: map[string]*Event{}, lives: map[string]*Life{}, bySeq: map[int64]*UpRecord{},
		applied: map[string][]*UpRecord{}, logged: map[logKey][]LogLine{}, answeredSeq: map[int64]*Send{},
		answeredDirect: map[int64]*Send{}, absorbedOf: map[string][]*UpRecord{}, unrecorded: map[int64][]Violation{},
		unrecordedSeen: map[string]bool{}, sendStart: map[int64]time.Time{}, passTouched: map[string]bool{}}
	for _, ev := range in.Events {
		au.events[refKey(ev.Route, ev.Key)] = ev
	}
	for _, l := range in.Lives {
		au.lives[l.Name] = l
	}
	for life, lines := range in.Logs {
		for _, l := range lines {
			if l.Key != "" {
				k := logKey{life, refKey(l.Route, l.Key)}
				au.logged[k] = append(au.logged[k], l)
				if in.StorePass && l.Outcome == "passthrough" {
					au.passTouched[k.ref] = true
				}
			}
		}
	}
	for _, r := range in.Upstream {
		if r.Action == ActAbsorbed {
			au.absorbedOf[refKey(r.Route, r.Key)] = append(au.absorbedOf[refKey(r.Route, r.Key)], r)
		}
	}
	return au
}

// loggedAny finds a line life logged about ref that matches.
func (au *auditor) loggedAny(life, ref string, match func(LogLine) bool) (LogLine, bool) {
	for _, l := range au.logged[logKey{life, ref}] {
		if match(l) {
			return l, true
		}
	}
	return LogLine{}, false
}

// readUpstream counts what the upstream received and indexes what it
// applied; a delivery must carry an event's key and body.
func (au *auditor) readUpstream() {
	a := au.a
	for _, r := range au.in.Upstream {
		au.bySeq[r.Seq] = r
		a.UpstreamReceived++
		a.UpstreamByAction[r.Action]++
		ref := refKey(r.Route, r.Key)
		ev := au.events[ref]
		switch {
		case r.Key == "":
			a.violate(CheckUpstreamID, "", "upstream request %d from %s on route %s carried no Idempotency-Key", r.Seq, r.Gateway, r.Route)
			continue
		case ev == nil:
			a.violate(CheckUpstreamID, "", "upstream request %d carried key %q that no event has", r.Seq, r.Key)
			continue
		case !bytes.Equal(r.Body, ev.Body):
			if au.passTouched[ref] {
				a.PassedReuse++
			} else {
				a.violate(CheckKeyReuse, ev.ID, "the upstream received a different body under the event's key (request %d from %s, action %s)", r.Seq, r.Gateway, r.Action)
			}
			continue // not a copy of the event
		}
		if r.Applied {
			a.Applied++
			au.applied[ref] = append(au.applied[ref], r)
		}
	}
}

// checkEvent counts ev, checks each of its sends, and its record.
func (au *auditor) checkEvent(ev *Event) {
	a := au.a
	a.Events++
	ref := refKey(ev.Route, ev.Key)
	row := au.in.Ledger[ref]
	switch {
	case ev.Acked():
		a.Acked++
	case ev.Final != nil:
		a.Declined++
	}
	if ev.GaveUp != "" {
		a.GaveUp++
		a.GaveUpReasons[ev.GaveUp]++
	}
	for _, s := range ev.Sends {
		au.checkSend(ev, ref, row, s)
	}
	switch {
	case ev.Route == asyncRoute:
		au.checkStored(ev, row)
	case ev.Final != nil && len(au.applied[ref]) == 0:
		a.violate(CheckAcked, ev.ID, "settled with %d but the upstream never applied it", ev.Final.Status)
	}
	if row != nil && row.State == "done" {
		n := deliveryOf(row.Body)
		if up := au.bySeq[n]; up == nil || !up.Applied || refKey(up.Route, up.Key) != ref || !bytes.Equal(up.Response, row.Body) {
			a.violate(CheckAcked, ev.ID, "the ledger records %d %q, which is no answer the upstream gave to this event", row.Status, row.Body)
		}
	}
}

// checkSend checks one send of ev: an answer when its gateway was
// serving, an outcome that fits, and a settling answer that is the
// upstream's and the record's.
func (au *auditor) checkSend(ev *Event, ref string, row *LedgerRow, s *Send) {
	a := au.a
	a.Sends++
	a.SendsByKind[s.Kind]++
	if !s.Answered {
		a.Unanswered++
		if s.Aborted || expectedSilence(s, au.lives) {
			a.UnansweredExpected++
		} else {
			a.violate(CheckLost, ev.ID, "%s send (attempt %d) to %s got no answer while it was serving: %s", s.Kind, s.Attempt, s.Incarnation, s.Err)
		}
		return
	}
	a.Outcomes[s.Outcome]++
	au.noteAnswered(ref, s)
	if au.readTimedOut(s) {
		return
	}
	if au.answeredAsReused(s) {
		return
	}
	checkOutcome(s, au.in.StorePass, a.violate)
	if !s.Settled() {
		return
	}
	if s.Replayed {
		a.Replays++
	} else if s.Outcome == "replayed" {
		a.violate(CheckReplay, ev.ID, "a %s copy got a %d replay without Idempotent-Replayed: true", s.Kind, s.Status)
	}
	if s.Outcome == "accepted" || ev.Route == asyncRoute && s.Outcome == "replayed" {
		au.checkAck(ev, s)
		return
	}
	au.checkSettledAnswer(ev, ref, row, s)
}

// noteAnswered notes which upstream delivery answered s, if it was
// forwarded.
func (au *auditor) noteAnswered(ref string, s *Send) {
	n := deliveryOf(s.Body)
	if n <= 0 || (s.Outcome != "forwarded" && s.Outcome != "passthrough") {
		return
	}
	au.answeredSeq[n] = s
	if up := au.bySeq[n]; up != nil && answeredBy(s, up, au.absorbedOf[ref]) {
		au.answeredDirect[n] = s
	}
	if t := au.sendStart[n]; t.IsZero() || s.Start.Before(t) {
		au.sendStart[n] = s.Start
	}
}

// checkSettledAnswer checks that a settling answer is the upstream's, and
// the record's.
func (au *auditor) checkSettledAnswer(ev *Event, ref string, row *LedgerRow, s *Send) {
	a := au.a
	n := deliveryOf(s.Body)
	up := au.bySeq[n]
	switch {
	case up == nil || !up.Applied || refKey(up.Route, up.Key) != ref:
		a.violate(CheckAcked, ev.ID, "answer %d (%s) names no delivery of this event the upstream applied: %q", s.Status, s.Outcome, s.Body)
		return
	case up.Status != s.Status || !bytes.Equal(up.Response, s.Body) || up.ContentType != s.ContentType:
		a.violate(CheckReplay, ev.ID, "answer %d (%s, replayed=%v) differs from what the upstream answered to delivery %d: got %q %q, upstream %d %q %q",
			s.Status, s.Outcome, s.Replayed, n, s.ContentType, s.Body, up.Status, up.ContentType, up.Response)
		return
	}
	if s.Replayed {
		a.ReplaysIdentical++ // the upstream's original answer, byte for byte
	}
	if s.Outcome == "passthrough" {
		return // not recorded, by definition
	}
	au.checkRecorded(ev, ref, row, s, up)
}

// checkRecorded checks that the ledger recorded the answer s got from
// delivery up.
func (au *auditor) checkRecorded(ev *Event, ref string, row *LedgerRow, s *Send, up *UpRecord) {
	a := au.a
	recorded := row != nil && row.State == "done" && row.Status == s.Status && bytes.Equal(row.Body, s.Body) &&
		row.Headers["Content-Type"] == s.ContentType
	if !recorded && au.unrecordedPassSince(ref, up.Time.Add(-100*time.Millisecond)) {
		// -store-pass: a copy passed through while the ledger was down,
		// with up's answer (its own, or the application's replay of it);
		// that answer lives in the screen alone, which replays it,
		// whatever a later copy recorded.
		a.UnrecordedPassthroughs++
		return
	}
	switch {
	case row == nil || row.State != "done":
		state := "no record"
		if row != nil {
			state = "a " + row.State + " row"
		}
		if _, ok := au.loggedAny(up.Gateway, ref, isCommitFailure); ok {
			// SPEC §1: the upstream answered, the commit failed; the
			// provider gets the answer, the failure is counted and
			// logged with the key. Allowed, and listed.
			if !au.unrecordedSeen[ev.ID] {
				au.unrecordedSeen[ev.ID] = true
				a.Unrecorded = append(a.Unrecorded, fmt.Sprintf("%s key %q: answered %d by delivery %d via %s, ledger has %s",
					ev.ID, ev.Key, s.Status, up.Seq, up.Gateway, state))
			}
			return
		}
		a.violate(CheckAcked, ev.ID, "provider got %d (%s) but the ledger has %s", s.Status, s.Outcome, state)
	case row.Status != s.Status || !bytes.Equal(row.Body, s.Body) || row.Headers["Content-Type"] != s.ContentType:
		v := Violation{Check: CheckAcked, Event: ev.ID, Detail: fmt.Sprintf("provider got %d %q (%s, replayed=%v), the ledger recorded %d %q",
			s.Status, s.Body, s.Outcome, s.Replayed, row.Status, row.Body)}
		if s.Replayed {
			v.Check = CheckReplay
			a.Violations = append(a.Violations, v)
		} else {
			// A second copy's own answer: judged with its duplicate.
			au.unrecorded[up.Seq] = append(au.unrecorded[up.Seq], v)
		}
	}
}

// claimStart is when copy r was claimed at the latest: when the send that
// got its answer started; a copy whose answer nobody got, within a lease
// of arriving.
func (au *auditor) claimStart(r *UpRecord) time.Time {
	t := r.Time.Add(-au.in.Lease)
	if s := au.sendStart[r.Seq]; !s.IsZero() && s.After(t) {
		t = s
	}
	return t
}

// checkDuplicates classifies every second application of an event, in
// arrival order per event; one no cause allows is a violation.
func (au *auditor) checkDuplicates() {
	a := au.a
	for ref, recs := range au.applied {
		if len(recs) < 2 {
			continue
		}
		sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
		ev := au.events[ref]
		for i := 1; i < len(recs); i++ {
			d := au.classify(ev, recs[i-1], recs[i], au.answeredSeq)
			// With the inbox, a second application is the inbox failing,
			// whatever caused the second copy.
			d.Allowed = d.Cause.Allowed(au.in.StorePass) && !au.in.Inbox
			if d.Allowed {
				au.excuseUnrecorded(&d)
			}
			a.Duplicates = append(a.Duplicates, d)
			a.DuplicatesByCause[d.Cause]++
			if !d.Allowed {
				a.violate(CheckDuplicate, ev.ID, "applied twice under key %q: delivery %d via %s, then %d via %s %v later — %s (%s)",
					d.Key, d.Earlier.Seq, d.Earlier.Gateway, d.Later.Seq, d.Later.Gateway,
					d.Later.Time.Sub(d.Earlier.Time).Round(time.Millisecond), d.Cause, d.Evidence)
			}
		}
	}
	sort.Slice(a.Duplicates, func(i, j int) bool { return a.Duplicates[i].Later.Seq < a.Duplicates[j].Later.Seq })
}

// excuseUnrecorded forgives the copies of an allowed duplicate their
// answers that the ledger did not keep: it kept the other copy's.
func (au *auditor) excuseUnrecorded(d *Duplicate) {
	for _, seq := range []int64{d.Earlier.Seq, d.Later.Seq} {
		if len(au.unrecorded[seq]) > 0 {
			d.Evidence += fmt.Sprintf("; a provider got delivery %d's own answer, the ledger kept the other copy's", seq)
			delete(au.unrecorded, seq)
		}
	}
}

// checkLives sums the counters of every incarnation's last scrape and
// checks how each ended.
func (au *auditor) checkLives() {
	a := au.a
	for _, l := range au.in.Lives {
		if m := l.Metrics; m != nil && m.Present {
			a.MetricsScraped = true
			if m.HasTakeovers {
				a.HasTakeovers = true
				a.Takeovers += m.Takeovers
			}
			if m.HasCommitFailures {
				a.HasCommitFailures = true
				a.CommitFailures += m.CommitFailures
			}
		}
		if l.How == "terminated" && l.ExitCode != 0 {
			a.violate(CheckShutdown, "", "%s exited with %d after SIGTERM (want a drained, clean exit)", l.Name, l.ExitCode)
		}
		if l.How == "exited" {
			// Nobody stopped it: the gateway died by itself (its sends
			// then look like those to a replica that is down).
			a.violate(CheckHealth, "", "%s exited on its own with %d at %s, unsignalled", l.Name, l.ExitCode, l.End.Format("15:04:05.000"))
		}
	}
}

// checkCounters holds hookstamp_commit_failures_total and
// hookstamp_takeovers_total to what the audit saw.
func (au *auditor) checkCounters() {
	a := au.a
	if a.HasCommitFailures && float64(len(a.Unrecorded)) > a.CommitFailures {
		a.violate(CheckAcked, "", "%d acknowledged events are unrecorded after a commit failure but hookstamp_commit_failures_total counted %.0f",
			len(a.Unrecorded), a.CommitFailures)
	}
	if a.HasTakeovers {
		// -inbox: a takeover's copy is absorbed rather than duplicated, and
		// still counted.
		var n int
		for _, c := range []DuplicateCause{CauseCrashTakeover, CauseStallTakeover, CauseFreezeTakeover} {
			n += a.DuplicatesByCause[c] + a.AbsorbedByCause[c]
		}
		if float64(n) > a.Takeovers {
			a.violate(CheckTakeovers, "", "%d second copies came from takeovers but hookstamp_takeovers_total counted %.0f", n, a.Takeovers)
		}
	}
}

// checkLiveness holds the gateways to the two promises that keep a key
// from being stuck (SPEC §6): a claim dies with its lease, and SIGTERM
// finishes the deliveries it had accepted.
func checkLiveness(in *AuditInput, lives map[string]*Life, violate func(check, ev, format string, args ...any)) {
	checkClaimsExpire(in, lives, violate)
	checkDrain(in, lives, violate)
}

const livenessSlack = time.Second

// checkClaimsExpire: a 409 (outcome conflict) says another copy of the
// event holds the key. Some other send of the event must then have been
// able to claim it no more than a lease before the 409 was decided — a
// claim is made between its send's start and its answer (or, unanswered,
// until its gateway process exited), and a Redis or PostgreSQL command
// stuck in a hung or slowed network can land until that fault ends. A 409
// later than that, plus a second and the host's stalls, is a key wedged
// beyond its lease: the provider's retries are refused for nothing.
func checkClaimsExpire(in *AuditInput, lives map[string]*Life, violate func(check, ev, format string, args ...any)) {
	for _, ev := range in.Events {
		for _, s := range ev.Sends {
			if !s.Answered || s.Outcome != "conflict" {
				continue
			}
			latest, holder, bounded := lastClaim(ev, s, in.Faults, lives)
			if !bounded {
				continue
			}
			deadline := latest.Add(in.Lease + livenessSlack)
			if holder == nil || s.Start.After(deadline.Add(stalledWithin(in.Stalls, latest, s.Start))) {
				what := "no other copy of the event was in flight"
				if holder != nil {
					what = fmt.Sprintf("the last claim could have been made by %s's %s send (attempt %d) by %s, lease %v",
						holder.Incarnation, holder.Kind, holder.Attempt, latest.Format("15:04:05.000"), in.Lease)
				}
				violate(CheckExpires, ev.ID, "%s send (attempt %d) to %s got 409 conflict at %s, but %s",
					s.Kind, s.Attempt, s.Incarnation, s.Start.Format("15:04:05.000"), what)
			}
		}
	}
}

// lastClaim is the latest a claim made by another send of ev than the
// conflict s can have landed, and that send (nil: no other send can have
// claimed the key). bounded is false when such a claim can have landed at
// any time.
func lastClaim(ev *Event, s *Send, faults []FaultRecord, lives map[string]*Life) (latest time.Time, holder *Send, bounded bool) {
	for _, o := range ev.Sends {
		if o == s || o.Kind == KindForged || o.Start.After(s.End) || o.Answered && heldNothing(o, faults) {
			continue
		}
		by, ok := claimBy(o, faults, lives)
		if !ok {
			return time.Time{}, nil, false
		}
		if by.After(latest) {
			latest, holder = by, o
		}
	}
	return latest, holder, true
}

// heldNothing: an answer that says its delivery took no claim of its
// own (it found the key held or done, or was refused) leaves none
// behind, unless a Redis or PostgreSQL fault around it could have
// failed the release of a screen claim it made before the ledger
// answered. Without this a provider's own chain of 409s would vouch
// for itself, and a wedged key would never be caught.
func heldNothing(o *Send, faults []FaultRecord) bool {
	switch o.Outcome {
	case "conflict", "replayed", "mismatch", "unverified":
	default:
		return false
	}
	for _, f := range faults {
		if isDependencyFault(f.Kind) && f.Start.Before(o.End.Add(livenessSlack)) && f.End.Add(livenessSlack).After(o.Start) {
			return false
		}
	}
	return true
}

// isDependencyFault reports whether k is a fault of Redis or PostgreSQL.
func isDependencyFault(k FaultKind) bool {
	switch k {
	case FaultRedisCut, FaultRedisBlackhole, FaultRedisSlow, FaultRedisPartition, FaultRedisFlush, FaultRedisRestart, FaultRedisHostLost,
		FaultPGCut, FaultPGBlackhole, FaultPGSlow, FaultPGLostReplies, FaultPGHostLost:
		return true
	}
	return false
}

// claimBy is the latest a claim made for o can have landed.
func claimBy(o *Send, faults []FaultRecord, lives map[string]*Life) (time.Time, bool) {
	by := o.End
	if !o.Answered {
		switch l := lives[o.Incarnation]; {
		case l == nil:
			return by, true // nothing was listening
		case l.End.IsZero():
			return time.Time{}, false // still running at the end: any time
		case l.End.After(by):
			by = l.End
		}
	}
	for _, f := range faults {
		switch f.Kind {
		case FaultRedisBlackhole, FaultRedisSlow, FaultRedisPartition, FaultRedisHostLost, FaultPGBlackhole, FaultPGSlow, FaultPGLostReplies, FaultPGHostLost:
		default:
			continue
		}
		if f.Start.Before(by) && f.End.After(o.Start) && f.End.Add(f.Latency).After(by) {
			by = f.End.Add(f.Latency)
		}
	}
	return by, true
}

// stalledWithin is how long the host stalled between from and to.
func stalledWithin(stalls []Stall, from, to time.Time) time.Duration {
	var d time.Duration
	for _, st := range stalls {
		if st.Start.Before(to) && st.End.After(from) {
			d += st.End.Sub(st.Start)
		}
	}
	return d
}

// checkDrain: a send that reached a gateway well before its SIGTERM must
// be answered, unless the drain ran out of server.shutdown_timeout (the
// abandoned deliveries' claims are released, and their connections cut).
func checkDrain(in *AuditInput, lives map[string]*Life, violate func(check, ev, format string, args ...any)) {
	// drainMargin: how long before SIGTERM a request must have been sent to
	// count as accepted (the gateway has read it off the connection).
	const drainMargin = 250 * time.Millisecond
	for _, ev := range in.Events {
		for _, s := range ev.Sends {
			l := lives[s.Incarnation]
			if s.Answered || s.Aborted || l == nil || l.How != "terminated" || l.Ready.IsZero() || s.Start.Before(l.Ready) ||
				s.End.Before(l.Stopping.Add(-50*time.Millisecond)) { // failed while serving: CheckLost's
				continue
			}
			if !s.Start.Before(l.Stopping.Add(-drainMargin - stalledWithin(in.Stalls, s.Start, l.Stopping))) {
				continue // may have reached the gateway after it stopped listening
			}
			if !l.End.IsZero() && l.End.Sub(l.Stopping) >= in.ShutdownTimeout {
				continue // the drain ran out of time: abandoning is allowed
			}
			violate(CheckDrain, ev.ID, "%s send (attempt %d) to %s, sent %v before its SIGTERM, got no answer: %s",
				s.Kind, s.Attempt, s.Incarnation, l.Stopping.Sub(s.Start).Round(time.Millisecond), s.Err)
		}
	}
}

// answeredBy reports whether send s got its answer from delivery up
// itself: s went through up's gateway and was under way when up reached
// the upstream, and no copy the inbox absorbed (whose replayed answer
// names up too) reached the upstream through that gateway meanwhile.
func answeredBy(s *Send, up *UpRecord, absorbed []*UpRecord) bool {
	if up.Gateway != s.Incarnation || up.Time.Before(s.Start) || up.Time.After(s.End) {
		return false
	}
	for _, r := range absorbed {
		if r.Gateway == s.Incarnation && !r.Time.Before(s.Start) && !r.Time.After(s.End) {
			return false
		}
	}
	return true
}

// isCommitFailure matches the error a gateway logs when the ledger commit
// fails after a successful forward (SPEC §1).
func isCommitFailure(l LogLine) bool { return strings.Contains(l.Msg, "commit failed") }

// isUnrecordedPassthrough matches what a gateway logs when a delivery it
// forwarded without a ledger (store.on_unavailable: pass) could not be
// recorded afterwards either: no commit failure, by design.
func isUnrecordedPassthrough(l LogLine) bool {
	return strings.HasPrefix(l.Msg, "passthrough delivery not recorded")
}

// unrecordedPassSince: a gateway logged a passthrough of ref unrecorded
// at from or later.
func (au *auditor) unrecordedPassSince(ref string, from time.Time) bool {
	for _, l := range au.in.Lives {
		if _, ok := au.loggedAny(l.Name, ref, func(l LogLine) bool {
			return isUnrecordedPassthrough(l) && !l.Time.Before(from)
		}); ok {
			return true
		}
	}
	return false
}

// passedThrough: with -store-pass, copy r was forwarded without
// deduplication, as its gateway's delivery line for the key says, logged
// while the send that carried r was open: one to r's gateway, under way
// when r reached the upstream, answered passthrough or not at all (a send
// answered forwarded was deduplicated). Such a copy knew nothing of the
// key's state: a body the key was first used with, a hold, a record.
func passedThrough(in *AuditInput, r *UpRecord) bool {
	if !in.StorePass {
		return false
	}
	for _, ev := range in.Events {
		if ev.Route != r.Route || ev.Key != r.Key {
			continue
		}
		for _, s := range ev.Sends {
			if s.Incarnation != r.Gateway || s.Start.After(r.Time) || s.End.Before(r.Time) ||
				s.Answered && s.Outcome != "passthrough" {
				continue
			}
			for _, l := range in.Logs[r.Gateway] {
				if l.Outcome == "passthrough" && l.Route == r.Route && l.Key == r.Key &&
					!l.Time.Before(s.Start) && !l.Time.After(s.End.Add(passLineLag)) {
					return true
				}
			}
		}
	}
	return false
}

// passLineLag is how long after its answer reached the provider a
// delivery's line can be logged.
const passLineLag = 100 * time.Millisecond

// expectedSilence: a send may go unanswered when its gateway was down,
// still starting, or being stopped while it ran.
func expectedSilence(s *Send, lives map[string]*Life) bool {
	l := lives[s.Incarnation]
	if l == nil {
		return true // nothing was running there
	}
	if l.Ready.IsZero() || s.Start.Before(l.Ready) {
		return true
	}
	return !l.Stopping.IsZero() && l.Stopping.Before(s.End.Add(50*time.Millisecond))
}

// readTimedOut: s got the server's 408, no delivery's answer (nothing
// was decided; the provider retries it), while its gateway was stopped
// or the host stalled: the request waited in the socket past
// read_timeout's deadline, which fasthttp finds passed when it runs again.
func (au *auditor) readTimedOut(s *Send) bool {
	if s.Status != http.StatusRequestTimeout || s.Outcome != "" {
		return false
	}
	stalled := stalledWithin(au.in.Stalls, s.Start, s.End)
	if l := au.lives[s.Incarnation]; l != nil {
		stalled += stalledWithin(l.Frozen, s.Start, s.End)
	}
	return stalled > 0
}

// answeredAsReused: with -store-pass, s's key met the ledger's outage (a
// copy passed through, its body never recorded), so whichever body was
// recorded first defines it: a copy with another body may be forwarded
// and replayed, and the event's own body refused with 422.
func (au *auditor) answeredAsReused(s *Send) bool {
	if !au.passTouched[refKey(s.Event.Route, s.Event.Key)] {
		return false
	}
	if s.Kind == KindTamper {
		return s.Outcome == "forwarded" || s.Outcome == "passthrough" || s.Outcome == "replayed" || s.Outcome == "accepted"
	}
	return s.Outcome == "mismatch"
}

// checkOutcome flags answers a copy of this kind must never get.
func checkOutcome(s *Send, storePass bool, violate func(check, ev, format string, args ...any)) {
	ev := s.Event
	switch s.Kind {
	case KindForged:
		if s.Outcome != "unverified" || s.Status != http.StatusUnauthorized {
			violate(CheckOutcome, ev.ID, "a forged copy got %d %s, want 401 unverified", s.Status, s.Outcome)
		}
		return
	case KindTamper:
		switch s.Outcome {
		case "mismatch":
			if s.Status != http.StatusUnprocessableEntity {
				violate(CheckKeyReuse, ev.ID, "the key reused with a different body got %d mismatch, want 422", s.Status)
			}
		case "conflict", "unavailable":
			if s.Status >= 200 && s.Status < 300 {
				violate(CheckKeyReuse, ev.ID, "the key reused with a different body got %d %s: a provider takes a 2xx as delivered", s.Status, s.Outcome)
			}
		case "held":
			checkHeldAnswer(s, violate)
		default:
			violate(CheckKeyReuse, ev.ID, "the key reused with a different body got %d %s, want 422 mismatch", s.Status, s.Outcome)
		}
		return
	}
	switch s.Outcome {
	case "released", "conflict", "unavailable":
		if s.Status >= 200 && s.Status < 300 {
			// A provider stops on any 2xx: the event would be lost.
			violate(CheckOutcome, ev.ID, "a %s copy got %d with outcome %q: a provider takes a 2xx as delivered", s.Kind, s.Status, s.Outcome)
		}
	case "replayed":
	case "forwarded":
		if ev.Route == asyncRoute {
			violate(CheckOutcome, ev.ID, "a %s copy got %d forwarded on the async route, which forwards nothing on intake", s.Kind, s.Status)
		}
	case "accepted":
		if ev.Route != asyncRoute {
			violate(CheckOutcome, ev.ID, "a %s copy got %d accepted on route %s, which is not async", s.Kind, s.Status, ev.Route)
		}
	case "held":
		checkHeldAnswer(s, violate)
	case "passthrough":
		if !storePass {
			violate(CheckOutcome, ev.ID, "a %s copy was passed through without deduplication (%d)", s.Kind, s.Status)
		}
	case "mismatch":
		violate(CheckOutcome, ev.ID, "a %s copy with the event's own body was rejected as key reuse (422)", s.Kind)
	default:
		violate(CheckOutcome, ev.ID, "a %s copy got %d with outcome %q", s.Kind, s.Status, s.Outcome)
	}
}

// checkHeldAnswer: only holdRoute holds keys; the delivery whose forward
// got no answer is told so (502 or 504), its repeats get 409.
func checkHeldAnswer(s *Send, violate func(check, ev, format string, args ...any)) {
	switch {
	case s.Event.Route != holdRoute:
		violate(CheckHold, s.Event.ID, "a %s copy got %d held on route %s, which releases ambiguous results", s.Kind, s.Status, s.Event.Route)
	case s.Status != http.StatusConflict && s.Status != http.StatusBadGateway && s.Status != http.StatusGatewayTimeout:
		violate(CheckHold, s.Event.ID, "a %s copy got %d held, want 409 (a repeat), 502 or 504", s.Kind, s.Status)
	}
}

// Log messages of the engine that the hold audit reads.
const (
	msgHeld       = "key held after an ambiguous upstream result"
	msgHoldFailed = "could not hold an ambiguous delivery"
)

// checkHolds holds holdRoute to record.ambiguous: hold (SPEC §1): once a
// gateway logged a key held, no copy of it reaches the upstream until the
// operator resolves it, and no key stays held unseen: the ledger keeps no
// held row from before the operator's last complete pass over the held
// list (GET /admin/routes/{route}/held), which resolved every key it
// listed that was old enough.
// It returns the number of holds logged.
func checkHolds(in *AuditInput, events map[string]*Event, violate func(check, ev, format string, args ...any)) int {
	holds, n := map[string][]time.Time{}, 0
	for _, lines := range in.Logs {
		for _, l := range lines {
			if strings.HasPrefix(l.Msg, msgHeld) {
				ref := refKey(l.Route, l.Key)
				holds[ref] = append(holds[ref], l.Time)
				n++
			}
		}
	}
	resolved := map[string][]Resolution{}
	for _, r := range in.Resolutions {
		ref := refKey(r.Route, r.Key)
		resolved[ref] = append(resolved[ref], r)
	}
	evID := func(ref string) string {
		if ev := events[ref]; ev != nil {
			return ev.ID
		}
		return ""
	}
	for _, up := range in.Upstream {
		ref := refKey(up.Route, up.Key)
		for _, h := range holds[ref] {
			if !up.Time.After(h) {
				continue
			}
			// The first resolution to take effect after the hold; zero: none.
			// Its call may have begun before h: the operator can list the
			// held row between its commit and the line that logs it. A copy
			// after the call began may follow its effect.
			var end time.Time
			for _, r := range resolved[ref] {
				if r.Took.After(h) && (end.IsZero() || r.Start.Before(end)) {
					end = r.Start
				}
			}
			// A copy that passed through found the ledger holding the key down.
			if (end.IsZero() || up.Time.Before(end)) && !passedThrough(in, up) {
				what := "never resolved"
				if !end.IsZero() {
					what = fmt.Sprintf("resolved %v later", end.Sub(up.Time).Round(time.Millisecond))
				}
				violate(CheckHold, evID(ref), "delivery %d via %s reached the upstream %v after the key was held (%s)",
					up.Seq, up.Gateway, up.Time.Sub(h).Round(time.Millisecond), what)
			}
		}
	}
	for ref, row := range in.Ledger {
		if row.Route == holdRoute && row.State == "held" && in.HoldCutoff.IsZero() {
			// No pass over the held list ever completed: nobody saw it.
			violate(CheckHold, evID(ref), "key %q is still held, from %s, and no pass of the operator over the held list ever completed",
				row.Key, row.CreatedAt.Format("15:04:05.000"))
			continue
		}
		if row.Route == holdRoute && row.State == "held" && row.CreatedAt.Before(in.HoldCutoff) {
			violate(CheckHold, evID(ref), "key %q is still held, from %s, but the operator's last complete pass over the held list (everything before %s) did not resolve it",
				row.Key, row.CreatedAt.Format("15:04:05.000"), in.HoldCutoff.Format("15:04:05.000"))
		}
	}
	return n
}

// holdFailed: life logged, within when, that it could not hold ref.
func holdFailed(life, ref string, when func(LogLine) bool, loggedAny func(life, ref string, match func(LogLine) bool) (LogLine, bool)) bool {
	_, ok := loggedAny(life, ref, func(l LogLine) bool { return strings.HasPrefix(l.Msg, msgHoldFailed) && when(l) })
	return ok
}

// releaseLogLag is how much earlier than its "released" log line a
// release can have freed a key (the line is written once the answer is
// out).
const releaseLogLag = 250 * time.Millisecond

// classify finds why the upstream applied later after earlier; answered
// are the deliveries whose answer a provider got.
func (au *auditor) classify(ev *Event, earlier, later *UpRecord, answered map[int64]*Send) Duplicate {
	p := &copyPair{au: au, ev: ev, earlier: earlier, later: later, ref: refKey(earlier.Route, earlier.Key), answered: answered}
	_, p.earlierAnswered = answered[earlier.Seq]
	d := Duplicate{Event: ev.ID, Route: ev.Route, Key: later.Key, Earlier: earlier, Later: later}
	for _, explain := range explanations {
		if cause, evidence, ok := explain(p); ok {
			d.Cause, d.Evidence = cause, evidence
			return d
		}
	}
	d.Cause = CauseUnexplained
	d.Evidence = fmt.Sprintf("%v apart", later.Time.Sub(earlier.Time).Round(time.Millisecond))
	return d
}

// copyPair is two applications of one event, being explained.
type copyPair struct {
	au             *auditor
	ev             *Event
	earlier, later *UpRecord
	ref            string
	answered       map[int64]*Send
	// earlierAnswered: a provider got the earlier copy's answer.
	earlierAnswered bool
}

// explanations are tried in order; the first that fits is the cause.
var explanations = []func(p *copyPair) (DuplicateCause, string, bool){
	(*copyPair).crashTakeover,
	(*copyPair).ambiguousRelease,
	(*copyPair).freezeTakeover,
	(*copyPair).operatorRelease,
	(*copyPair).passMode,
	(*copyPair).commitFailure,
	(*copyPair).screenLoss,
	(*copyPair).screenOutage,
	(*copyPair).stallTakeover,
	(*copyPair).liveLease,
}

// firstSendTo is the start of the earliest send of the event to gw that
// began by at and matches.
func (p *copyPair) firstSendTo(gw string, at time.Time, match func(*Send) bool) (time.Time, bool) {
	first, found := time.Time{}, false
	for _, s := range p.ev.Sends {
		if s.Incarnation == gw && !s.Start.After(at) && match(s) && (!found || s.Start.Before(first)) {
			first, found = s.Start, true
		}
	}
	return first, found
}

// leaseOverSince reports whether the later copy came a lease after the
// earliest send to the earlier copy's gateway that match accepts: the
// earlier claim cannot be older, so its lease had run out.
func (p *copyPair) leaseOverSince(match func(*Send) bool) bool {
	sentAt, sent := p.firstSendTo(p.earlier.Gateway, p.earlier.Time, match)
	return sent && !p.later.Time.Before(sentAt.Add(p.au.in.Lease-200*time.Millisecond))
}

// anySend matches every send.
func anySend(*Send) bool { return true }

// crashTakeover: the earlier copy's gateway was SIGKILLed while that copy
// was in flight (within the upstream timeout of its arrival), and the
// later copy came no sooner than a lease after the earliest unanswered
// send to that gateway (its claim cannot be older).
func (p *copyPair) crashTakeover() (DuplicateCause, string, bool) {
	in, earlier, later := p.au.in, p.earlier, p.later
	life := p.au.lives[earlier.Gateway]
	if p.earlierAnswered || !killedInFlight(life, earlier, later, in.Timeout) ||
		!p.leaseOverSince(func(s *Send) bool { return !s.Answered }) {
		return "", "", false
	}
	return CauseCrashTakeover, fmt.Sprintf("%s was SIGKILLed %v after delivery %d arrived", life.Name,
		life.Stopping.Sub(earlier.Time).Round(time.Millisecond), earlier.Seq), true
}

// killedInFlight: life, the gateway that forwarded earlier, was SIGKILLed
// while that copy was in flight (by the upstream timeout after its
// arrival, and half a second for the forward begun before it) and before
// later arrived.
func killedInFlight(life *Life, earlier, later *UpRecord, timeout time.Duration) bool {
	return life != nil && life.Crashed() && !life.Stopping.Before(earlier.Time.Add(-10*time.Millisecond)) &&
		life.Stopping.Before(later.Time) && life.Stopping.Before(earlier.Time.Add(timeout+500*time.Millisecond))
}

// freezeTakeover: the earlier copy's gateway was stopped while that copy
// was in flight (within the upstream timeout of its arrival) and stayed
// stopped until about a lease after the earliest send to it (its claim
// cannot be older), and the later copy came after that lease and before
// the gateway, continued, could have recorded the earlier answer.
func (p *copyPair) freezeTakeover() (DuplicateCause, string, bool) {
	in, earlier, later := p.au.in, p.earlier, p.later
	life := p.au.lives[earlier.Gateway]
	sentAt, sent := p.firstSendTo(earlier.Gateway, earlier.Time, anySend)
	if life == nil || !sent {
		return "", "", false
	}
	leaseEnd := sentAt.Add(in.Lease)
	for _, fr := range life.Frozen {
		if fr.Start.Before(earlier.Time.Add(-10*time.Millisecond)) || !fr.Start.Before(earlier.Time.Add(in.Timeout)) ||
			fr.End.Before(leaseEnd.Add(-thawSlack)) || later.Time.Before(leaseEnd.Add(-200*time.Millisecond)) ||
			!p.au.claimStart(later).Before(fr.End.Add(thawSlack)) {
			continue
		}
		return CauseFreezeTakeover, fmt.Sprintf("%s was stopped %v after delivery %d arrived, for %v", life.Name,
			fr.Start.Sub(earlier.Time).Round(time.Millisecond), earlier.Seq, fr.End.Sub(fr.Start).Round(time.Millisecond)), true
	}
	return "", "", false
}

// thawSlack is how long a continued gateway can take to act on what it
// held when it was stopped.
const thawSlack = 500 * time.Millisecond

// ambiguousRelease: the earlier copy went unanswered, and its gateway
// logged the release of an ambiguous forward while that copy was in
// flight (not some other copy's, at another time), before the later copy
// reached the upstream: the release is what freed the key, so a copy
// forwarded well before it was forwarded beside a live claim. On
// holdRoute only when the hold itself could not be written.
func (p *copyPair) ambiguousRelease() (DuplicateCause, string, bool) {
	in, earlier, later := p.au.in, p.earlier, p.later
	if p.earlierAnswered {
		return "", "", false
	}
	// A gateway stopped mid-forward times it out once continued.
	until := earlier.Time.Add(in.Timeout + 2*time.Second)
	if l := p.au.lives[earlier.Gateway]; l != nil {
		until = until.Add(stalledWithin(l.Frozen, earlier.Time, until))
	}
	// A release may have waited out a hung ledger first: it failed, or
	// PostgreSQL hung or slowed meanwhile.
	if _, failed := p.au.loggedAny(earlier.Gateway, p.ref, func(l LogLine) bool {
		return strings.HasPrefix(l.Msg, releaseFailedMsg) && !l.Time.Before(earlier.Time) && l.Time.Before(until.Add(ledgerCallTimeout))
	}); failed || p.au.ledgerStalled(earlier.Time, until) {
		until = until.Add(ledgerCallTimeout)
	}
	inFlight := func(l LogLine) bool {
		return !l.Time.Before(earlier.Time.Add(-100*time.Millisecond)) && l.Time.Before(until)
	}
	l, ok := p.au.loggedAny(earlier.Gateway, p.ref, func(l LogLine) bool {
		return l.Outcome == "released" && strings.Contains(l.Err, "after sending") && inFlight(l) &&
			!later.Time.Before(p.freedBy(l))
	})
	if !ok || (p.ev.Route == holdRoute && !holdFailed(earlier.Gateway, p.ref, inFlight, p.au.loggedAny)) {
		return "", "", false
	}
	return CauseAmbiguous, fmt.Sprintf("%s logged: %s", earlier.Gateway, l.Err), true
}

// freedBy is the earliest the release logged by rel can have freed the
// key in the ledger: the line is written once the release is over, the
// ledger's part first. When its screen part failed (logged just before
// rel), that part waited out a Redis call. A forward that timed out
// released nothing before its timeout, counted from no sooner than the
// first send to the earlier copy's gateway (its clock starts with the
// forward, which can be long before the upstream's arrival stamp: a
// slow claim, a slow connection).
func (p *copyPair) freedBy(rel LogLine) time.Time {
	lag := releaseLogLag
	if _, failed := p.au.loggedAny(p.earlier.Gateway, p.ref, func(l LogLine) bool {
		return strings.HasPrefix(l.Msg, releaseFailedMsg) && !l.Time.After(rel.Time) && l.Time.After(rel.Time.Add(-releaseLogLag))
	}); failed {
		lag += screenCallTimeout
	}
	freed := rel.Time.Add(-lag)
	sent, ok := p.firstSendTo(p.earlier.Gateway, p.earlier.Time, anySend)
	if t := sent.Add(p.au.in.Timeout); ok && strings.Contains(rel.Err, "timed out") && freed.Before(t) {
		freed = t
	}
	return freed
}

// ledgerStalled: a fault that makes ledger statements wait (not fail at
// once) overlapped [from, to].
func (au *auditor) ledgerStalled(from, to time.Time) bool {
	for _, f := range au.in.Faults {
		switch f.Kind {
		case FaultPGBlackhole, FaultPGHostLost, FaultPGLostReplies, FaultPGSlow:
			if f.Start.Before(to) && f.End.After(from) {
				return true
			}
		}
	}
	return false
}

// releaseFailedMsg starts what a gateway logs when a release failed in
// part (internal/idempotency); screenCallTimeout bounds one Redis call
// (redisscreen's default OpTimeout).
const (
	releaseFailedMsg  = "release failed"
	screenCallTimeout = time.Second
	// ledgerCallTimeout bounds one ledger statement (sqlledger's
	// default operation timeout).
	ledgerCallTimeout = 5 * time.Second
)

// operatorRelease: the operator released a held key while the earlier
// copy was at the upstream unapplied (with -inbox it can wait there in
// the application's transaction): the release freed the key, and the
// later copy is what releasing a held key means.
func (p *copyPair) operatorRelease() (DuplicateCause, string, bool) {
	if p.earlierAnswered || p.ev.Route != holdRoute {
		return "", "", false
	}
	for _, r := range p.au.in.Resolutions {
		if r.Route == p.ev.Route && r.Key == p.later.Key && r.Action == "release" &&
			r.End.After(p.earlier.Time) && r.Start.Before(p.later.Time) {
			return CauseOperatorRelease, fmt.Sprintf("the operator released the held key through %s", r.Life), true
		}
	}
	return "", "", false
}

// passMode: either copy was forwarded without deduplication — the
// later one, or the earlier one, which the ledger then never recorded, so
// that nothing but the screen stood before the later copy.
func (p *copyPair) passMode() (DuplicateCause, string, bool) {
	if s := p.answered[p.later.Seq]; s != nil && s.Outcome == "passthrough" {
		return CausePassMode, "the later copy was answered with outcome passthrough", true
	}
	for _, c := range []*UpRecord{p.later, p.earlier} {
		if passedThrough(p.au.in, c) {
			return CausePassMode, fmt.Sprintf("%s logged delivery %d passed through", c.Gateway, c.Seq), true
		}
	}
	return "", "", false
}

// commitFailure: the earlier copy's gateway logged a failed commit of
// the key, and the screen entry that was to keep its answer could not:
// that gateway could not reach Redis when it wrote the entry, or Redis
// forgot it before the later copy came, which came after the earlier
// claim's lease (its claim cannot be older than the earliest send to
// that gateway).
func (p *copyPair) commitFailure() (DuplicateCause, string, bool) {
	earlier := p.earlier
	failed, ok := p.au.loggedAny(earlier.Gateway, p.ref, isCommitFailure)
	if !ok || !p.leaseOverSince(anySend) {
		return "", "", false
	}
	if f, ok := p.au.screenWriteLost(earlier.Gateway, failed.Time, p.later.Time); ok {
		return CauseCommitFailure, fmt.Sprintf("%s logged a commit failure for the key at %s; %s from %s to %s",
			earlier.Gateway, failed.Time.Format("15:04:05.000"), f.Kind, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000")), true
	}
	return "", "", false
}

// screenWriteLost finds a Redis fault that kept gateway gw's screen write
// at written (a second's timeout) from landing, or lost or delayed it
// before until.
func (au *auditor) screenWriteLost(gw string, written, until time.Time) (FaultRecord, bool) {
	life := au.lives[gw]
	for _, f := range au.in.Faults {
		var hit bool
		switch f.Kind {
		case FaultRedisFlush, FaultRedisRestart:
			hit = f.Start.Before(until) && f.End.Add(time.Second).After(written)
		case FaultRedisSlow:
			hit = f.Start.Before(until) && f.End.After(written)
		case FaultRedisPartition:
			hit = life != nil && f.Gateway == life.Gateway && f.Start.Before(written.Add(time.Second)) && f.End.After(written)
		case FaultRedisCut, FaultRedisBlackhole, FaultRedisHostLost:
			hit = f.Start.Before(written.Add(time.Second)) && f.End.After(written)
		}
		if hit {
			return f, true
		}
	}
	return FaultRecord{}, false
}

// claimedFrom is the earliest either copy can have been claimed: between
// their provider's send and their arrival upstream.
func (p *copyPair) claimedFrom() time.Time {
	from := p.au.claimStart(p.earlier)
	if t := p.au.claimStart(p.later); t.Before(from) {
		from = t
	}
	return from
}

// screenLoss: Redis forgot its entries (flushed or restarted) while the
// copies were being claimed.
func (p *copyPair) screenLoss() (DuplicateCause, string, bool) {
	from := p.claimedFrom()
	for _, f := range p.au.in.Faults {
		if f.Kind != FaultRedisFlush && f.Kind != FaultRedisRestart {
			continue
		}
		if lost := f.Start; !lost.Before(from) && lost.Before(p.later.Time) {
			return CauseScreenLoss, fmt.Sprintf("%s at %s, while the earlier copy was in flight", f.Kind, lost.Format("15:04:05.000")), true
		}
	}
	return "", "", false
}

// screenOutage: Redis could not be reached while the copies were being
// claimed.
func (p *copyPair) screenOutage() (DuplicateCause, string, bool) {
	from := p.claimedFrom()
	for _, f := range p.au.in.Faults {
		switch f.Kind {
		case FaultRedisCut, FaultRedisBlackhole, FaultRedisSlow, FaultRedisRestart, FaultRedisPartition, FaultRedisHostLost:
		default:
			continue
		}
		// Clients notice a recovery a little late.
		if f.Start.Before(p.later.Time) && f.End.Add(time.Second).After(from) {
			return CauseScreenOutage, fmt.Sprintf("%s from %s to %s; the copies were claimed from %s",
				f.Kind, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), from.Format("15:04:05.000")), true
		}
	}
	return "", "", false
}

// stallTakeover: the earlier copy went unanswered and the host stalled
// while it was in flight (between its arrival and the upstream timeout),
// long enough to let its lease run out, and the later copy came no sooner
// than a lease after the earliest send to that gateway (the earlier claim
// cannot be older; a stall does not make a lease expire sooner).
func (p *copyPair) stallTakeover() (DuplicateCause, string, bool) {
	in, earlier, later := p.au.in, p.earlier, p.later
	if p.earlierAnswered {
		return "", "", false
	}
	stalled, first := stalledInFlight(in.Stalls, earlier, later, earlier.Time.Add(in.Timeout))
	if stalled == 0 || stalled < (in.Lease-in.Timeout)/2 || !p.leaseOverSince(anySend) {
		return "", "", false
	}
	return CauseStallTakeover, fmt.Sprintf("the host stalled %v in all (from %s) while delivery %d was in flight",
		stalled.Round(time.Millisecond), first.Start.Format("15:04:05.000"), earlier.Seq), true
}

// stalledInFlight is how long the host stalled in the stalls that began
// while earlier was in flight (before until) and before later arrived,
// and the first of them.
func stalledInFlight(stalls []Stall, earlier, later *UpRecord, until time.Time) (stalled time.Duration, first Stall) {
	for _, st := range stalls {
		if st.Start.Before(later.Time) && st.Start.Before(until) && st.End.After(earlier.Time) {
			if stalled == 0 {
				first = st
			}
			stalled += st.End.Sub(st.Start)
		}
	}
	return stalled, first
}

// liveLease: the copies came a lease apart or more, the earlier gateway
// alive: its lease ran out before it recorded the answer.
func (p *copyPair) liveLease() (DuplicateCause, string, bool) {
	lease := p.au.in.Lease
	if gap := p.later.Time.Sub(p.earlier.Time); gap >= lease-200*time.Millisecond {
		return CauseLiveLease, fmt.Sprintf("%v apart, lease %v; %s was alive", gap.Round(time.Millisecond), lease, p.earlier.Gateway), true
	}
	return "", "", false
}
