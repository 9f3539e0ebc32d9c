package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Forwarder sends one attempt upstream.
type Forwarder interface {
	Do(ctx context.Context, r *forward.Request) (*forward.Response, error)
}

// Route is an async route as its deliveries need it.
type Route struct {
	Name string
	// Policy decides which answers are final and what is recorded of them.
	Policy      *idempotency.Policy
	UpstreamURL string
	KeyHeader   string
	Timeout     time.Duration // upstream.timeout
	MaxAttempts int
	MaxAge      time.Duration
	Backoff     Backoff
	Concurrency int
	// PollInterval is how often each replica looks for this route's jobs
	// that became available, besides right after finishing one (River has
	// no LISTEN through database/sql); zero is DefaultPollInterval.
	PollInterval time.Duration
}

// HeaderAttempt numbers each attempt of a delivery to the upstream.
const HeaderAttempt = "Hookstamp-Attempt"

// worker runs delivery jobs.
type worker struct {
	river.WorkerDefaults[Args]
	q *Queue
}

// Timeout lets an attempt run for its route's upstream.timeout and the
// settling after it; River's own default would cut a slow upstream. River
// also asks it when its leader rescues a job: a negative timeout would
// leave the job of a route this replica does not serve, its replica dead,
// running for as long as this replica leads.
func (w *worker) Timeout(job *river.Job[Args]) time.Duration {
	if r := w.q.known(job.Args.Route); r != nil && r.Timeout > 0 {
		return r.Timeout + w.q.o.RescueMargin/2
	}
	return w.q.jobTimeout
}

func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	return w.q.attempt(ctx, job)
}

// attempt makes one attempt of job's delivery and settles it: done,
// dead or held with the job deleted in the same transaction (the record
// and its attempts keep the delivery's history), or snoozed until the
// next attempt.
func (q *Queue) attempt(ctx context.Context, job *river.Job[Args]) error {
	ref := idempotency.Ref{Route: job.Args.Route, Key: job.Args.Key}
	r := q.route(ref.Route)
	if r == nil {
		// The route left the configuration: its deliveries wait for it.
		q.o.Logger.WarnContext(ctx, "delivery job for a route that is not configured (or not async); it waits", "route", ref.Route, "key", ref.Key)
		return river.JobSnooze(time.Hour)
	}
	horizon := q.horizon(r)
	kept := q.kept.take(job.ID)
	st, err := q.o.Ledger.Stored(ctx, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return nil // deleted by an operator or swept: nothing to deliver
	case err != nil:
		if kept != nil {
			q.kept.put(kept)
		}
		return unsent{fmt.Errorf("read delivery %q: %w", ref.Key, err)}
	case st.Request == nil || (st.State != idempotency.StateQueued && st.State != idempotency.StateDone):
		return nil // resolved or already settled by an operator
	case !st.Is(job.Args.Created):
		// Deleted by an operator and stored again, with a job of its own.
		q.o.Logger.WarnContext(ctx, "delivery job ended: its record was deleted and the key stored again since; the new record's job delivers it",
			"route", ref.Route, "key", ref.Key)
		return nil
	}
	if kept != nil && !job.Args.Created.IsZero() {
		// An earlier run here sent the attempt and got a final answer it
		// could not record: recorded now, not sent again. (A job from
		// before Created names no record: its answer might be another's.)
		sent := *kept
		sent.job, sent.route, sent.st, sent.horizon = job, r, st, horizon
		return q.finish(ctx, &sent)
	}
	run := job.Attempt + int(gjson.GetBytes(job.Metadata, "snoozes").Int())
	recorded, err := q.recordLost(ctx, job, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return nil // deleted since read: nothing to deliver
	case err != nil:
		return unsent{err}
	}
	a := idempotency.Attempt{Ref: ref, Attempt: st.Attempts + recorded + 1, StartedAt: q.o.Now(), Replica: q.o.Replica}
	sctx, span := q.attemptSpan(ctx, r, st, &a)
	// Ended once settled, so that it says what became of the attempt.
	defer span.End()
	up, ferr := q.send(sctx, r, st, &a)
	a.Duration = q.o.Now().Sub(a.StartedAt)
	sent := &sentAttempt{job: job, route: r, st: st, a: a, up: up, err: ferr, run: run, horizon: horizon}
	err = q.finish(ctx, sent)
	if sent.result != "" {
		span.SetAttributes(attribute.String("hookstamp.attempt.result", sent.result))
	}
	return err
}

// finish settles a sent attempt: it ends the job or snoozes it until the
// next attempt. A final answer the ledger would not take is kept for the
// job's next run here.
func (q *Queue) finish(ctx context.Context, sent *sentAttempt) error {
	ended, err := q.end(ctx, sent)
	if !ended {
		return q.retry(ctx, sent)
	}
	if err != nil {
		q.kept.put(sent)
	}
	return err
}

// sentAttempt is a run's attempt once sent: what the run read, sent and
// got back.
type sentAttempt struct {
	job     *river.Job[Args]
	route   *Route
	st      *sqlledger.Stored
	a       idempotency.Attempt
	up      *idempotency.Upstream // nil: no answer (err)
	err     error
	run     int // the job's run, snoozes included
	horizon time.Time
	result  string // what became of it (Hooks.Attempt's result), once settled
}

// settlement is the attempt's record, numbered by the ledger: a concurrent
// redelivery may have taken the attempt's own number.
func (s *sentAttempt) settlement() *sqlledger.Settlement {
	out := &sqlledger.Settlement{Ref: s.a.Ref, Attempt: s.a, Created: s.job.Args.Created}
	out.Attempt.Attempt = 0
	return out
}

// end settles an attempt that ends its job (ended): delivered, dead, held,
// or a redelivery that gave up. Settled even when shutdown cut the
// attempt.
func (q *Queue) end(ctx context.Context, sent *sentAttempt) (ended bool, err error) {
	r, st, a, ref := sent.route, sent.st, sent.a, sent.a.Ref
	sctx := context.WithoutCancel(ctx)
	s := sent.settlement()
	s.Job = sent.job.ID
	hold := sent.up == nil && forward.Ambiguous(sent.err) && r.Policy.HoldAmbiguous
	queued := st.QueuedAt(sent.job.Args.Requeued)
	spent := sentRuns(sent.job, sent.run) >= r.MaxAttempts || q.o.Now().Sub(queued) >= r.MaxAge
	switch {
	case sent.up != nil && r.Policy.Settles(sent.up):
		s.State, s.Response = idempotency.StateDone, r.Policy.Recorded(sent.up)
		wrote, err := q.settle(sctx, s, sent.horizon, nil)
		if err != nil {
			return true, fmt.Errorf("record delivery %q: %w", ref.Key, err)
		}
		if wrote && st.State == idempotency.StateDone && q.o.Hooks.Replaced != nil {
			q.o.Hooks.Replaced(sctx, ref)
		}
		q.settled(sent, "delivered")
		if q.o.Hooks.Lag != nil && st.State == idempotency.StateQueued {
			q.o.Hooks.Lag(ref.Route, q.o.Now().Sub(queued))
		}
	case st.State == idempotency.StateDone && (spent || hold):
		// A redelivery that gives up leaves the record its earlier answer:
		// only a queued row becomes dead or held. Its attempt is recorded
		// and its job ends.
		if _, err := q.settle(sctx, s, sent.horizon, nil); err != nil {
			return true, fmt.Errorf("record the last redelivery of %q: %w", ref.Key, err)
		}
		q.settled(sent, "gave_up")
		q.o.Logger.WarnContext(ctx, "redelivery gave up; the record keeps its earlier answer",
			"route", ref.Route, "key", ref.Key, "status", a.Status, "err", a.Error)
	case hold:
		s.State, s.KeepUntil = idempotency.StateHeld, q.o.Now().Add(r.Policy.Retention)
		if _, err := q.settle(sctx, s, sent.horizon, nil); err != nil {
			return true, fmt.Errorf("hold delivery %q: %w", ref.Key, err)
		}
		if st.State == idempotency.StateQueued && q.o.Hooks.HeldChanged != nil {
			q.o.Hooks.HeldChanged(ref.Route, 1)
		}
		q.settled(sent, "held")
		q.o.Logger.WarnContext(ctx, "async delivery held after an ambiguous upstream result; resolve it through the admin API",
			"route", ref.Route, "key", ref.Key, "err", sent.err)
	case spent:
		s.State, s.KeepUntil = idempotency.StateDead, q.o.Now().Add(r.Policy.Retention)
		if _, err := q.settle(sctx, s, sent.horizon, nil); err != nil {
			return true, fmt.Errorf("give up delivery %q: %w", ref.Key, err)
		}
		q.settled(sent, "dead")
		q.o.Logger.WarnContext(ctx, "async delivery is dead: out of attempts or age; redrive it through the admin API",
			"route", ref.Route, "key", ref.Key, "attempts", a.Attempt, "status", a.Status, "err", a.Error)
	default:
		return false, nil
	}
	return true, nil
}

// retry records an attempt that did not end its job and snoozes the job
// until the next attempt.
func (q *Queue) retry(ctx context.Context, sent *sentAttempt) error {
	ref := sent.a.Ref
	if sent.up == nil && forward.Ambiguous(sent.err) {
		// As a synchronous route's release is: the application may have
		// acted on this attempt, and the next one sends it again.
		q.o.Logger.InfoContext(ctx, "async attempt sent without an answer; the next attempt delivers it again, with the same key",
			"route", ref.Route, "key", ref.Key, "attempt", sent.a.Attempt, "err", sent.err)
	}
	// The run's number is noted on the job with its attempt, for a next
	// run to tell this one from a run that lost its attempt should the
	// snooze not be stored (recordLost).
	noted := func(ctx context.Context, tx *sql.Tx) error {
		_, err := q.jobs.JobUpdateTx(ctx, tx, sent.job.ID, &river.JobUpdateParams{Output: recordedRun{Run: sent.run}})
		return err
	}
	var wait time.Duration
	if sent.up != nil {
		wait = retryAfter(sent.up.Header, q.o.Now())
	}
	snooze := sent.route.Backoff.next(sent.run, wait)
	// The last attempt goes out by max_age: if it fails, the delivery is
	// then past max_age and dead.
	deadline := sent.st.QueuedAt(sent.job.Args.Requeued).Add(sent.route.MaxAge)
	snooze = max(min(snooze, deadline.Sub(q.o.Now())), 0)
	s := sent.settlement()
	if sent.st.State == idempotency.StateDone {
		// A redelivery: the record is not queued, so the sweeper may take
		// it at its expiry; it is kept past the next attempt.
		s.KeepUntil = q.o.Now().Add(snooze + sent.route.Policy.Retention)
	}
	switch _, err := q.settle(context.WithoutCancel(ctx), s, sent.horizon, noted); {
	case errors.Is(err, idempotency.ErrNotFound):
		return nil // deleted during the attempt: nothing left to deliver
	case err != nil:
		return fmt.Errorf("record attempt of %q: %w", ref.Key, err)
	}
	q.settled(sent, "retried")
	// River schedules the next run at its own clock's now plus the
	// snooze, and fetches it once the database's clock gets there: the
	// snooze is shifted onto the database's clock, or a replica behind it
	// would cut every wait short by its lag. A replica ahead cannot snooze
	// less than nothing: a wait shorter than its lead lasts its lead.
	offset, err := q.o.Ledger.Offset(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("schedule the next attempt of %q: %w", ref.Key, err)
	}
	return river.JobSnooze(max(snooze+offset, 0))
}

// horizon is when a run that starts now stops settling. A run still
// settling when River presumes its replica lost would meet the rescued
// run sending the delivery again: settling stops a quarter of the margin
// before the rescue (the run then fails, and the rescue delivers it again
// with its key, as after a crash).
func (q *Queue) horizon(r *Route) time.Time {
	if r.Timeout <= 0 {
		return time.Now().Add(settleFor)
	}
	return time.Now().Add(r.Timeout + q.o.RescueMargin*3/4)
}

// sentRuns is how many of job's runs, run (this one) included, sent their
// attempt: a run that failed before sending (unsent, the ledger not
// readable) uses up none of the route's max_attempts.
func sentRuns(job *river.Job[Args], run int) int {
	for _, e := range job.Errors {
		if strings.HasPrefix(e.Error, unsentPrefix) {
			run--
		}
	}
	return run
}

// unsent is a run's error from before its attempt was sent: no attempt
// of that run is lost.
type unsent struct{ err error }

// unsentPrefix starts the text River keeps of an unsent error.
const unsentPrefix = "not sent: "

func (e unsent) Error() string { return unsentPrefix + e.err.Error() }
func (e unsent) Unwrap() error { return e.err }

// interrupted starts the error of an attempt whose run ended without
// recording it (SPEC §11 has no other field for an outcome).
const interrupted = "interrupted: "

// recordedRun is a job's output once a run has recorded a retry's
// attempt: the run's number, River's attempt plus the job's snoozes,
// which grows by one with every run.
type recordedRun struct {
	Run int `json:"recorded_run"`
}

// wasRecorded reports whether the run River noted as lost recorded its
// attempt before its end was lost: its snooze was not stored (the
// database cut) and the rescuer took the job back. The job's snooze
// count is the lost run's own: only a stored snooze adds to it, and the
// runs after a lost one up to this one failed before sending.
func wasRecorded(job *river.Job[Args], lost rivertype.AttemptError) bool {
	run := lost.Attempt + int(gjson.GetBytes(job.Metadata, "snoozes").Int())
	noted := gjson.GetBytes(job.Metadata, rivertype.MetadataKeyOutput+".recorded_run")
	return noted.Exists() && noted.Int() == int64(run)
}

// recordLost records the attempt of the job's last run when that run sent
// it and ended without recording it — its replica killed mid-attempt (the
// job rescued) or the ledger cut before the outcome was stored — so the
// timeline shows the copy the upstream may have got. It reports how many
// attempts it recorded (0 or 1), ErrNotFound once the record is gone.
func (q *Queue) recordLost(ctx context.Context, job *river.Job[Args], ref idempotency.Ref) (int, error) {
	lost, ok := lastSentError(job.Errors)
	if !ok || wasRecorded(job, lost) {
		return 0, nil
	}
	// River's note of the loss is the lost attempt's only trace: its
	// start died with the run.
	at := lost.At.Truncate(time.Millisecond)
	attempts, err := q.o.Ledger.Attempts(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("read attempts of %q: %w", ref.Key, err)
	}
	if n := len(attempts); n > 0 && !attempts[n-1].StartedAt.Before(at) {
		return 0, nil // recorded since, by this job or another
	}
	a := idempotency.Attempt{Ref: ref, StartedAt: at, Error: interrupted + lost.Error, Replica: previousReplica(job.AttemptedBy)}
	if err := q.o.Ledger.AddDeliveryAttempt(ctx, a, job.Args.Created); err != nil {
		return 0, fmt.Errorf("record the lost attempt of %q: %w", ref.Key, err)
	}
	q.hook(q.o.Hooks.Takeover, ref.Route)
	q.o.Logger.WarnContext(ctx, "delivering again a delivery whose previous attempt was not recorded; the upstream may get it twice, with the same key",
		"route", ref.Route, "key", ref.Key, "lost", lost.Error)
	return 1, nil
}

// lastSentError is River's note of the last run that failed or was
// rescued after it may have sent its attempt.
func lastSentError(errs []rivertype.AttemptError) (rivertype.AttemptError, bool) {
	for i := len(errs) - 1; i >= 0; i-- {
		if !strings.HasPrefix(errs[i].Error, unsentPrefix) {
			return errs[i], true
		}
	}
	return rivertype.AttemptError{}, false
}

// previousReplica is the replica that ran the job before this run (River
// appends each run's client ID).
func previousReplica(by []string) string {
	if len(by) < 2 {
		return ""
	}
	return by[len(by)-2]
}

// settleFor is how long an attempt's outcome is retried against a ledger
// that cannot be reached before the job run fails: a run that fails after
// the upstream answered is delivered again.
const settleFor = 30 * time.Second

// settle records s, retrying while the ledger is unavailable, until
// settleFor has passed or until, whichever comes first. It reports
// whether a final settlement was written to the record (Ledger.Settle).
func (q *Queue) settle(ctx context.Context, s *sqlledger.Settlement, until time.Time, then func(context.Context, *sql.Tx) error) (bool, error) {
	deadline := time.Now().Add(settleFor)
	if until.Before(deadline) {
		deadline = until
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		wrote, err := q.o.Ledger.Settle(ctx, s, q.o.Now(), then)
		if err == nil || !errors.Is(err, idempotency.ErrUnavailable) || time.Now().Add(wait).After(deadline) {
			return wrote, err
		}
		s.Again = true
		time.Sleep(wait)
	}
}

// attemptSpan starts the client span of attempt a, linked to the
// intake's; the caller ends it.
func (q *Queue) attemptSpan(ctx context.Context, r *Route, st *sqlledger.Stored, a *idempotency.Attempt) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("hookstamp.route", r.Name), attribute.String("hookstamp.key", a.Key), attribute.Int("hookstamp.attempt", a.Attempt))}
	if link, ok := intakeLink(st); ok {
		opts = append(opts, trace.WithLinks(link))
	}
	return q.o.Tracer.Start(ctx, "hookstamp.attempt", opts...)
}

// send forwards st's request for attempt a, notes its status or error in
// a and on ctx's span (attemptSpan's).
func (q *Queue) send(ctx context.Context, r *Route, st *sqlledger.Stored, a *idempotency.Attempt) (*idempotency.Upstream, error) {
	span := trace.SpanFromContext(ctx)
	stored := forward.Stored{Method: st.Request.Method, Path: st.Request.Path, Header: st.Request.Headers, Body: st.Request.Body}
	req := stored.Request(r.UpstreamURL, r.KeyHeader, a.Key)
	req.Timeout = r.Timeout
	req.Header.Set(HeaderAttempt, fmt.Sprint(a.Attempt))
	start := time.Now()
	resp, err := q.o.Forwarder.Do(ctx, req)
	if q.o.Hooks.Upstream != nil {
		q.o.Hooks.Upstream(ctx, r.Name, time.Since(start))
	}
	if forward.HeadOnly(resp, err) {
		a.Status = resp.Status
		idempotency.AnswerOnSpan(span, resp.Status)
		return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, BodyOmitted: true}, nil
	}
	if err != nil {
		a.Error = err.Error()
		span.RecordError(err)
		span.SetStatus(codes.Error, "the upstream did not answer")
		return nil, err
	}
	a.Status = resp.Status
	idempotency.AnswerOnSpan(span, resp.Status)
	return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
}

// intakeLink links an attempt to the span of the delivery's intake.
func intakeLink(st *sqlledger.Stored) (trace.Link, bool) {
	tid, err1 := trace.TraceIDFromHex(st.TraceID)
	sid, err2 := trace.SpanIDFromHex(st.SpanID)
	if err1 != nil || err2 != nil {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true})}, true
}

func (q *Queue) hook(f func(string), route string) {
	if f != nil {
		f(route)
	}
}

// settled notes what became of sent (delivered, retried, held, dead,
// gave_up), for its span and Hooks.Attempt.
func (q *Queue) settled(sent *sentAttempt, result string) {
	sent.result = result
	if q.o.Hooks.Attempt != nil {
		q.o.Hooks.Attempt(sent.a.Route, result)
	}
}
