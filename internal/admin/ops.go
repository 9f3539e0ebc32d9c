package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/stats"
)

// The exported methods of Server are the admin API's operations as Go
// calls: the HTTP handlers answer with them, and the operator console
// (Options.Console) calls them directly, so that both do the same thing.

// OpError is an operation refused or failed: the status the admin API
// answers with and the detail it shows. Err, the cause, is logged and
// never shown.
type OpError struct {
	Status int
	Detail string
	Err    error
}

func (e *OpError) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	return e.Detail
}

func (e *OpError) Unwrap() error { return e.Err }

func refused(status int, detail string) error { return &OpError{Status: status, Detail: detail} }

// unavailable logs a ledger error and returns the 503 the API answers.
func (s *Server) unavailable(ctx context.Context, op string, ref idempotency.Ref, err error) error {
	s.logLedgerFailure(ctx, op, ref, err)
	return &OpError{Status: http.StatusServiceUnavailable, Detail: "the ledger did not answer; retry later", Err: err}
}

// logLedgerFailure logs a failed ledger call as an error, unless the
// caller went away first (its request's context canceled): no fault of
// the ledger's, and nobody reads the answer.
func (s *Server) logLedgerFailure(ctx context.Context, op string, ref idempotency.Ref, err error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		s.o.Logger.InfoContext(ctx, "admin: request abandoned by its client", "op", op, "route", ref.Route, "key", ref.Key)
		return
	}
	s.o.Logger.ErrorContext(ctx, "admin: ledger call failed", "op", op, "route", ref.Route, "key", ref.Key, "err", err)
}

// fail answers err: an OpError as its status and detail, anything else as
// a 500 whose cause is logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var oe *OpError
	if !errors.As(err, &oe) {
		s.o.Logger.ErrorContext(r.Context(), "admin: operation failed", "err", err)
		problem(w, http.StatusInternalServerError, "the operation failed")
		return
	}
	if oe.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	problem(w, oe.Status, oe.Detail)
}

// RouteNames are the configured routes, sorted.
func (s *Server) RouteNames() []string {
	names := make([]string, 0, len(s.routes))
	for r := range s.routes {
		names = append(names, r)
	}
	slices.Sort(names)
	return names
}

// checkRef refuses a route that is not configured, and reports whether
// key can have no record: no delivery has a key that is not UTF-8 or
// holds a NUL (ingress answers invalid_key), and PostgreSQL refuses such
// text, so there is no record rather than a ledger failure to retry.
func (s *Server) checkRef(ref idempotency.Ref) (none bool, err error) {
	if err := s.checkRoute(ref.Route); err != nil {
		return false, err
	}
	return !recordable(ref.Key), nil
}

// recordable reports whether the ledger can hold key: non-empty, valid
// UTF-8, no NUL (PostgreSQL refuses both in text).
func recordable(key string) bool {
	return key != "" && utf8.ValidString(key) && strings.IndexByte(key, 0) < 0
}

func (s *Server) checkRoute(route string) error {
	if !s.routes[route] {
		return refused(http.StatusNotFound, "no route of that name is configured")
	}
	return nil
}

// Stats are the per-route numbers of GET /admin/stats over window, with
// topN keys and sources each. Every configured route is listed.
func (s *Server) Stats(ctx context.Context, window time.Duration, topN int) (StatsAnswer, error) {
	if s.o.Stats == nil {
		return StatsAnswer{}, refused(http.StatusNotFound, "statistics are off")
	}
	snap, err := s.o.Stats.Query(ctx, window, topN)
	if errors.Is(err, stats.ErrWindow) {
		return StatsAnswer{}, refused(http.StatusBadRequest, "window must be a duration such as 15m or 1h, at most 24h")
	}
	if err != nil {
		s.o.Logger.ErrorContext(ctx, "admin: stats query failed", "err", err)
		return StatsAnswer{}, &OpError{Status: http.StatusServiceUnavailable, Detail: "the statistics store did not answer; retry later", Err: err}
	}
	out := StatsAnswer{Window: shortDuration(window), Scope: string(snap.Scope), Routes: make(map[string]*RouteStats, len(s.routes))}
	for route := range s.routes {
		out.Routes[route] = routeStats(snap.Routes[route])
	}
	return out, nil
}

// HeldRecords are route's held records, oldest first, at most limit;
// truncated when there are more.
func (s *Server) HeldRecords(ctx context.Context, route string, limit int) (held []Record, truncated bool, err error) {
	if err := s.checkRoute(route); err != nil {
		return nil, false, err
	}
	if limit < 1 || limit > maxHeldList {
		return nil, false, refused(http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", maxHeldList))
	}
	recs, err := s.o.Ledger.Held(ctx, route, limit+1)
	if err != nil {
		return nil, false, s.unavailable(ctx, "held", idempotency.Ref{Route: route}, err)
	}
	if len(recs) > limit {
		recs, truncated = recs[:limit], true
	}
	held = make([]Record, 0, len(recs))
	for i := range recs {
		held = append(held, RecordOf(&recs[i]))
	}
	return held, truncated, nil
}

// Delete forgets a key: the ledger row first, then the screen and every
// replica's cache (in that order: a repeat in between still finds the
// screen entry and is replayed; a repeat that read the record before and
// refills the screen or a cache after is refused by the tombstone they
// keep for idempotency.ForgetTombstone). The screen and caches are
// cleared even when the ledger has no row — a done entry can outlive a
// failed commit — and no row is not an error (SPEC §8): the key is
// forgotten, and a DELETE repeated by a script is not a failure.
//
// It refuses (409) a record whose deletion would lose its event
// (Record.LosesEvent): the provider will not send it again. Discard
// deletes it all the same.
func (s *Server) Delete(ctx context.Context, ref idempotency.Ref) error {
	return s.delete(ctx, ref, false)
}

// Discard is Delete that also deletes a record whose event is then lost
// (DELETE ...?discard=true): the operator said so.
func (s *Server) Discard(ctx context.Context, ref idempotency.Ref) error {
	return s.delete(ctx, ref, true)
}

func (s *Server) delete(ctx context.Context, ref idempotency.Ref, discard bool) error {
	none, err := s.checkRef(ref)
	if err != nil || none {
		return err
	}
	rec, err := s.o.Ledger.Lookup(ctx, ref)
	if err == nil && !discard && RecordOf(rec).LosesEvent() {
		return errLosesEvent(rec.State)
	}
	if s.o.Deleting != nil {
		s.o.Deleting(ref)
	}
	if err == nil {
		err = s.o.Ledger.Delete(ctx, ref)
	}
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		rec = nil // no row: the screen and caches may still hold the key
	case err != nil:
		return s.unavailable(ctx, "delete", ref, err)
	}
	if rec != nil {
		if rec.State == idempotency.StateHeld {
			s.heldChanged(ref.Route, -1)
		}
		s.o.Logger.InfoContext(ctx, "admin: record deleted", "route", ref.Route, "key", ref.Key, "state", string(rec.State), "discard", discard)
	}
	if err := s.forget(ctx, ref); err != nil {
		s.o.Logger.ErrorContext(ctx, "admin: the screen did not forget a deleted key", "route", ref.Route, "key", ref.Key, "err", err)
		return &OpError{Status: http.StatusServiceUnavailable, Err: err,
			Detail: "the ledger holds no record for this key, but the screen did not answer: repeats may still be replayed from it; retry the DELETE"}
	}
	return nil
}

// errLosesEvent refuses to delete a record in state whose provider was
// acknowledged and whose upstream has not taken it, and says what to do
// instead.
func errLosesEvent(state idempotency.State) error {
	instead := "Wait for the queue to deliver it (its next attempt is the record's next_attempt_at)."
	switch state {
	case idempotency.StateDead:
		instead = "To have it delivered, redrive it (POST .../dead/redrive) once the upstream takes it."
	case idempotency.StateHeld:
		instead = `To have it delivered again, resolve it with {"action":"release"}; if the upstream acted on it, with {"action":"record",...}.`
	}
	return refused(http.StatusConflict, "The delivery is "+string(state)+": its provider was acknowledged and will not send it again, "+
		"so deleting the record loses the event, which the upstream would never receive. "+instead+" To lose it knowingly, DELETE with ?discard=true")
}

// EventList is a page of route's event log (GET .../records): q as
// ParseListQuery reads it.
func (s *Server) EventList(ctx context.Context, q idempotency.ListQuery) (RecordList, error) {
	if err := s.checkRoute(q.Route); err != nil {
		return RecordList{}, err
	}
	out, err := List(ctx, s.o.Ledger, q)
	var qe *QueryError
	switch {
	case errors.As(err, &qe):
		return RecordList{}, refused(http.StatusBadRequest, qe.Detail)
	case err != nil:
		return RecordList{}, s.unavailable(ctx, "list", idempotency.Ref{Route: q.Route}, err)
	}
	return out, nil
}

// EventDetail is ref's record with its request and attempts (GET
// .../records/{key}).
func (s *Server) EventDetail(ctx context.Context, ref idempotency.Ref) (RecordDetail, error) {
	none, err := s.checkRef(ref)
	if err != nil {
		return RecordDetail{}, err
	}
	if none {
		return RecordDetail{}, refused(http.StatusNotFound, "no record for this key on this route")
	}
	out, err := s.detail(ctx, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return RecordDetail{}, refused(http.StatusNotFound, "no record for this key on this route")
	case err != nil:
		return RecordDetail{}, s.unavailable(ctx, "detail", ref, err)
	}
	return out, nil
}
