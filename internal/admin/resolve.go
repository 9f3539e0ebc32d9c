package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// ResolveRequest is the body of POST .../records/{key}/resolve.
type ResolveRequest struct {
	// Action is "release" (the next delivery is forwarded) or "record"
	// (repeats replay Status, Headers and Body or BodyBase64).
	Action     string            `json:"action"`
	Status     *int              `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 *string           `json:"body_base64"`
}

// maxResolveBody bounds the JSON of a resolve request.
const maxResolveBody = 16 << 20

// resolve answers POST .../resolve with Resolve.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	req, msg := decodeResolve(w, r)
	if msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	rec, err := s.Resolve(r.Context(), ref, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// Resolve settles a held key: "record" makes it done with the operator's
// response (repeats replay it); "release" has the delivery made again,
// as the row says, whatever its route is now (SPEC §8): a row whose
// provider was acknowledged (Acked: an async intake, or queued again by
// an operator) is queued again, as nobody would send it again; any other
// is deleted, so that the provider's next delivery is forwarded. It
// returns the record afterwards; for release, the record as it was,
// with state "queued" or "released".
func (s *Server) Resolve(ctx context.Context, ref idempotency.Ref, req ResolveRequest) (Record, error) {
	resp, msg := req.response()
	if msg != "" {
		return Record{}, refused(http.StatusBadRequest, msg)
	}
	none, err := s.checkRef(ref)
	if err != nil {
		return Record{}, err
	}
	if none {
		return Record{}, refused(http.StatusNotFound, "no record for this key on this route")
	}
	rec, err := s.o.Ledger.Lookup(ctx, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return Record{}, refused(http.StatusNotFound, "no held record for this key on this route")
	case err != nil:
		return Record{}, s.unavailable(ctx, "lookup", ref, err)
	case rec.State != idempotency.StateHeld:
		return Record{}, refused(http.StatusNotFound, fmt.Sprintf("the record for this key is %s, not held", rec.State))
	}
	// The screen holds nothing for a held key but the short claims of
	// repeats being turned away; forgetting before the ledger changes
	// drops no claim made after it.
	if err := s.forget(ctx, ref); err != nil {
		s.o.Logger.WarnContext(ctx, "admin: forget before resolve failed", "route", ref.Route, "key", ref.Key, "err", err)
	}
	if req.Action == "release" && (rec.Acked || s.o.Async[ref.Route]) {
		// A row of a route async now is queued again too when its request
		// is stored: one an async intake of a release without the acked
		// column held reads as unknown (AckUnknown), not acknowledged.
		out, err := s.releaseAcked(ctx, rec)
		if rec.Acked || !errors.Is(err, errAckedNoRequest) {
			return out, err
		}
	}
	var settle *idempotency.Record
	if req.Action == "record" {
		settle = &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: resp}
	}
	// The ledger deletes a held row only if it is not acknowledged: one
	// that took the key meanwhile and was acknowledged is not lost.
	err = s.o.Ledger.Resolve(ctx, ref, settle)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return Record{}, refused(http.StatusNotFound, "no held record for this key on this route (resolved meanwhile?)")
	case err != nil:
		return Record{}, s.unavailable(ctx, "resolve", ref, err)
	}
	s.heldChanged(ref.Route, -1)
	s.o.Logger.InfoContext(ctx, "admin: held record resolved", "route", ref.Route, "key", ref.Key, "action", req.Action)

	if req.Action == "release" {
		out := RecordOf(rec)
		out.State = "released"
		return out, nil
	}
	done, err := s.o.Ledger.Lookup(ctx, ref)
	if err != nil {
		// Resolved; only the read-back failed: answer from what we wrote,
		// on the clock the ledger wrote by (to within the call).
		done = rec
		done.State, done.Response, done.CompletedAt = idempotency.StateDone, resp, s.o.Now()
	}
	return RecordOf(done), nil
}

// decodeResolve reads a resolve request. A non-empty message is the 400
// detail.
func decodeResolve(w http.ResponseWriter, r *http.Request) (ResolveRequest, string) {
	var req ResolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxResolveBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, fmt.Sprintf("the request body is larger than %d bytes", maxResolveBody)
		}
		return req, "the body must be a JSON object: {\"action\":\"release\"} or {\"action\":\"record\",\"status\":200,...}"
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, "the body must be one JSON object"
	}
	return req, ""
}

// response checks req and returns the response to record. A non-empty
// message says what is wrong.
func (req ResolveRequest) response() (idempotency.Response, string) {
	switch req.Action {
	case "release":
		if req.Status != nil || req.Headers != nil || req.Body != nil || req.BodyBase64 != nil {
			return idempotency.Response{}, `action "release" takes no status, headers or body`
		}
		return idempotency.Response{}, ""
	case "record":
	default:
		return idempotency.Response{}, `action must be "release" or "record"`
	}
	if req.Status == nil || *req.Status < 200 || *req.Status > 599 {
		return idempotency.Response{}, `action "record" needs "status", from 200 to 599`
	}
	if idempotency.NeverFinal(*req.Status) {
		// A record is replayed to every repeat for its retention: a "try
		// again" recorded would keep the provider retrying for all of it.
		return idempotency.Response{}, fmt.Sprintf(`status %d is never final (408, 425, 429 and 5xx are never recorded, SPEC §1); `+
			`to have the next delivery forwarded, resolve with {"action":"release"}`, *req.Status)
	}
	resp := idempotency.Response{Status: *req.Status, Headers: map[string]string{}}
	for name, v := range req.Headers {
		if msg := checkHeader(name, v); msg != "" {
			return idempotency.Response{}, msg
		}
		c := http.CanonicalHeaderKey(name)
		if _, dup := resp.Headers[c]; dup {
			return idempotency.Response{}, fmt.Sprintf("header %q is given twice", c)
		}
		resp.Headers[c] = v
	}
	switch {
	case req.Body != nil && req.BodyBase64 != nil:
		return idempotency.Response{}, `give "body" or "body_base64", not both`
	case req.Body != nil:
		resp.Body = []byte(*req.Body)
	case req.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.BodyBase64)
		if err != nil {
			return idempotency.Response{}, `"body_base64" is not valid standard base64`
		}
		resp.Body = b
	}
	if msg := bodyFits(resp.Status, resp.Body); msg != "" {
		return idempotency.Response{}, msg
	}
	return resp, ""
}
