package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Redeliverer is what the admin API needs to deliver stored requests
// again (*sqlledger.Ledger).
type Redeliverer interface {
	// Requeue queues ref's stored request again (see sqlledger).
	Requeue(ctx context.Context, ref idempotency.Ref, held bool, keep time.Time) (bool, error)
	// Redrive queues route's dead records again, or those of keys, and
	// returns how many; with an error, how many it queued before it (see
	// sqlledger).
	Redrive(ctx context.Context, route string, keys []string, keep time.Time) (int, error)
}

// maxRedriveBody bounds a redrive request's body, and maxRedriveKeys the
// keys it lists: each is a statement parameter, and PostgreSQL takes at
// most 65 535 of them.
const (
	maxRedriveBody = 1 << 20
	maxRedriveKeys = 1000
)

// errNotStoring refuses to queue a delivery on a route that stores no
// requests now: no worker would run it.
var errNotStoring = refused(http.StatusConflict, "this route stores no requests now (record.request is off): nothing can be delivered again")

// delivers reports whether route's records can be queued again.
func (s *Server) delivers(route string) bool {
	_, ok := s.o.Stores[route]
	return s.o.Redeliver != nil && ok
}

// keep is the earliest a record of route queued again now may expire: its
// route's retention from now.
func (s *Server) keep(route string) time.Time {
	return s.o.Now().Add(s.o.Stores[route])
}

// redeliver answers POST .../records/{key}/redeliver with Redeliver:
// 202.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	if err := s.Redeliver(r.Context(), ref); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"route": ref.Route, "key": ref.Key, "queued": true})
}

// Redeliver queues a record's stored request to the upstream again, with
// its key (SPEC §11); a conflict (409) when no request is stored.
func (s *Server) Redeliver(ctx context.Context, ref idempotency.Ref) error {
	none, err := s.checkRef(ref)
	if err != nil {
		return err
	}
	if none {
		return refused(http.StatusNotFound, "no record for this key on this route")
	}
	if !s.delivers(ref.Route) {
		if _, err := s.o.Ledger.Lookup(ctx, ref); errors.Is(err, idempotency.ErrNotFound) {
			return refused(http.StatusNotFound, "no record for this key on this route")
		} else if err != nil {
			return s.unavailable(ctx, "redeliver", ref, err)
		}
		return errNotStoring
	}
	queued, err := s.o.Redeliver.Requeue(ctx, ref, false, s.keep(ref.Route))
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return refused(http.StatusNotFound, "no record for this key on this route")
	case errors.Is(err, sqlledger.ErrNoRequest):
		return refused(http.StatusConflict, "no request is stored for this record (record.request is off, or it was recorded before)")
	case errors.Is(err, idempotency.ErrNotOwner):
		return refused(http.StatusConflict, "the record is in flight or held; resolve a held record instead")
	case err != nil:
		return s.unavailable(ctx, "redeliver", ref, err)
	case !queued:
		// Its job may be on its last attempt: promising another would be
		// false, and a second job would send it twice.
		return refused(http.StatusConflict, "a delivery of this record is still queued, its attempts under way; redeliver it once they end")
	}
	s.o.Logger.InfoContext(ctx, "admin: redelivery queued", "route", ref.Route, "key", ref.Key)
	return nil
}

// redrive answers POST .../dead/redrive with Redrive: all the route's
// dead records, or those listed in {"keys": [...]}.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request, route string) {
	var req struct {
		Keys []string `json:"keys"`
	}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRedriveBody))
		dec.DisallowUnknownFields()
		err := dec.Decode(&req)
		if err == nil {
			_, err = dec.Token() // nothing may follow the object
			if errors.Is(err, io.EOF) {
				err = nil
			} else if err == nil {
				err = errors.New("data after the object")
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			problem(w, http.StatusBadRequest, `the body must be {"keys": ["…"]} or empty`)
			return
		}
	}
	n, err := s.Redrive(r.Context(), route, req.Keys)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
}

// Redrive queues route's dead records again (keys nil: every one) and
// returns how many were. A redrive of every one goes in batches
// (sqlledger): one that fails midway returns the count of those queued
// before it, which stay queued, with a 503 saying so; a retry queues the
// rest.
func (s *Server) Redrive(ctx context.Context, route string, keys []string) (int, error) {
	if err := s.checkRoute(route); err != nil {
		return 0, err
	}
	if !s.delivers(route) {
		return 0, errNotStoring
	}
	if len(keys) > maxRedriveKeys {
		return 0, refused(http.StatusBadRequest, fmt.Sprintf("at most %d keys a request", maxRedriveKeys))
	}
	if keys != nil {
		// A key the ledger cannot hold names no dead record; sent on, a
		// NUL or invalid UTF-8 fails the statement like an outage.
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !recordable(k) })
	}
	rctx, cancel := context.WithTimeout(ctx, redriveTime)
	defer cancel()
	n, err := s.o.Redeliver.Redrive(rctx, route, keys, s.keep(route))
	if n > 0 {
		s.o.Logger.InfoContext(ctx, "admin: dead deliveries redriven", "route", route, "requeued", n)
	}
	switch {
	case err == nil:
		return n, nil
	case rctx.Err() != nil && ctx.Err() == nil:
		s.o.Logger.WarnContext(ctx, "admin: redrive stopped at its time limit: the rest of the dead deliveries stay dead", "route", route, "requeued", n)
		return n, &OpError{Status: http.StatusServiceUnavailable, Err: err,
			Detail: fmt.Sprintf("%d dead deliveries were queued again, but queuing the rest would outlast the request: redrive again to queue them", n)}
	case n > 0:
		s.logLedgerFailure(ctx, "redrive", idempotency.Ref{Route: route}, err)
		return n, &OpError{Status: http.StatusServiceUnavailable, Err: err,
			Detail: fmt.Sprintf("the ledger did not answer; retry later: %d dead deliveries were queued again before it failed, and stay queued; a retry queues the rest", n)}
	}
	return 0, s.unavailable(ctx, "redrive", idempotency.Ref{Route: route}, err)
}

// redriveTime bounds a redrive, so that its answer, the count, is written
// before the listener's writeTimeout cuts it.
const redriveTime = writeTimeout * 3 / 4

// releaseAcked releases a held record whose provider was acknowledged by
// delivering it again through the queue: the provider will not send it
// again, and deleting the row would lose the event. The queue delivers it
// whatever the route is now (one storing no requests adopts its jobs).
func (s *Server) releaseAcked(ctx context.Context, rec *idempotency.Record) (Record, error) {
	if s.o.Redeliver == nil {
		return Record{}, errAckedNoQueue
	}
	_, err := s.o.Redeliver.Requeue(ctx, rec.Ref, true, s.keep(rec.Route))
	switch {
	case errors.Is(err, idempotency.ErrNotFound), errors.Is(err, idempotency.ErrNotOwner):
		return Record{}, refused(http.StatusNotFound, "no held record for this key on this route (resolved meanwhile?)")
	case errors.Is(err, sqlledger.ErrNoRequest):
		return Record{}, errAckedNoRequest
	case err != nil:
		return Record{}, s.unavailable(ctx, "release", rec.Ref, err)
	}
	s.heldChanged(rec.Route, -1)
	s.o.Logger.InfoContext(ctx, "admin: held acknowledged delivery released: delivered again", "route", rec.Route, "key", rec.Key)
	out := RecordOf(rec)
	out.State = string(idempotency.StateQueued)
	return out, nil
}

// errAckedNoRequest and errAckedNoQueue refuse to release a held delivery
// whose provider was acknowledged when nothing here can deliver it again:
// deleting it instead would lose the event, as the provider will not
// send it again.
var (
	errAckedNoRequest = refused(http.StatusConflict, "the held delivery was acknowledged to its provider, which will not send it again, "+
		"but no request is stored for it: it cannot be delivered again, and releasing it would lose it. "+
		`If the upstream acted on it, resolve it with {"action":"record",...}; otherwise discard it knowingly (DELETE ...?discard=true)`)
	errAckedNoQueue = refused(http.StatusConflict, "the held delivery was acknowledged to its provider, which will not send it again, "+
		"and this gateway runs no delivery queue to deliver it: releasing it would lose it")
)
