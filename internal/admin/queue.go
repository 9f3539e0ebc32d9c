package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Redeliverer is what the admin API needs to deliver stored requests
// again (*sqlledger.Ledger).
type Redeliverer interface {
	// Requeue queues ref's stored request again (see sqlledger).
	Requeue(ctx context.Context, ref idempotency.Ref, held bool) (bool, error)
	// Redrive queues route's dead records again, or those of keys.
	Redrive(ctx context.Context, route string, keys []string) (int, error)
}

// maxRedriveBody bounds a redrive request's body.
const maxRedriveBody = 1 << 20

// redeliver queues a record's stored request to the upstream again, with
// its key (SPEC §11): 202, or 409 when no request is stored.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	if s.o.Redeliver == nil {
		problem(w, http.StatusNotFound, "no route stores requests: nothing can be redelivered")
		return
	}
	queued, err := s.o.Redeliver.Requeue(r.Context(), ref, false)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		problem(w, http.StatusNotFound, "no record for this key on this route")
		return
	case errors.Is(err, sqlledger.ErrNoRequest):
		problem(w, http.StatusConflict, "no request is stored for this record (record.request is off, or it was recorded before)")
		return
	case errors.Is(err, idempotency.ErrNotOwner):
		problem(w, http.StatusConflict, "the record is in flight or held; resolve a held record instead")
		return
	case err != nil:
		s.ledgerFailed(w, r, "redeliver", ref, err)
		return
	}
	s.o.Logger.InfoContext(r.Context(), "admin: redelivery queued", "route", ref.Route, "key", ref.Key, "new_job", queued)
	writeJSON(w, http.StatusAccepted, map[string]any{"route": ref.Route, "key": ref.Key, "queued": true})
}

// redrive queues the route's dead records again: all, or those listed in
// {"keys": [...]}.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request, route string) {
	if s.o.Redeliver == nil {
		problem(w, http.StatusNotFound, "no route stores requests: nothing can be redriven")
		return
	}
	var req struct {
		Keys []string `json:"keys"`
	}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRedriveBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			problem(w, http.StatusBadRequest, `the body must be {"keys": ["…"]} or empty`)
			return
		}
	}
	n, err := s.o.Redeliver.Redrive(r.Context(), route, req.Keys)
	if err != nil {
		s.ledgerFailed(w, r, "redrive", idempotency.Ref{Route: route}, err)
		return
	}
	s.o.Logger.InfoContext(r.Context(), "admin: dead deliveries redriven", "route", route, "requeued", n)
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
}
