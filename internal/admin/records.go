package admin

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Record is a ledger row as the admin API shows it (SPEC §8).
type Record struct {
	Route   string            `json:"route"`
	Key     string            `json:"key"`
	State   string            `json:"state"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	// BodyBase64 is the recorded body, standard base64 with padding.
	BodyBase64 string `json:"body_base64"`
	// BodyOmitted: the body exceeded record.max_body and was not kept.
	BodyOmitted bool `json:"body_omitted,omitempty"`
	// Fingerprint is hex; null when the route's fingerprint mode is none.
	Fingerprint *string    `json:"fingerprint"`
	TraceID     string     `json:"trace_id"`
	SpanID      string     `json:"span_id"`
	Source      string     `json:"source"`
	CreatedAt   *time.Time `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at"` // null until done
	ExpiresAt   *time.Time `json:"expires_at"`
	// LeaseUntil is set for pending claims only.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// RecordOf converts a ledger row; times are UTC, zero times null.
func RecordOf(rec *idempotency.Record) Record {
	out := Record{
		Route: rec.Route, Key: rec.Key, State: string(rec.State), Status: rec.Status,
		Headers: map[string]string{}, BodyBase64: base64.StdEncoding.EncodeToString(rec.Body),
		BodyOmitted: rec.BodyOmitted, TraceID: rec.TraceID, SpanID: rec.SpanID, Source: rec.Source,
		CreatedAt: timeOrNull(rec.CreatedAt), CompletedAt: timeOrNull(rec.CompletedAt), ExpiresAt: timeOrNull(rec.ExpiresAt),
	}
	for k, v := range rec.Headers {
		out.Headers[k] = v
	}
	if rec.Fingerprint != nil {
		fp := hex.EncodeToString(rec.Fingerprint)
		out.Fingerprint = &fp
	}
	if rec.State == idempotency.StatePending {
		out.LeaseUntil = timeOrNull(rec.LeaseUntil)
	}
	return out
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ledgerFailed answers a ledger error other than ErrNotFound: 503, the
// cause logged, not shown.
func (s *Server) ledgerFailed(w http.ResponseWriter, r *http.Request, op string, ref idempotency.Ref, err error) {
	s.o.Logger.ErrorContext(r.Context(), "admin: ledger call failed", "op", op, "route", ref.Route, "key", ref.Key, "err", err)
	w.Header().Set("Retry-After", "1")
	problem(w, http.StatusServiceUnavailable, "the ledger did not answer; retry later")
}

func (s *Server) getRecord(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	rec, err := Detail(r.Context(), s.o.Ledger, s.o.Queue, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		problem(w, http.StatusNotFound, "no record for this key on this route")
	case err != nil:
		s.ledgerFailed(w, r, "lookup", ref, err)
	default:
		writeJSON(w, http.StatusOK, rec)
	}
}

// deleteRecord forgets a key: the ledger row first, then the screen and
// every replica's cache (in that order: a repeat in between still finds
// the screen entry and is replayed; a repeat that read the record before
// and refills the screen or a cache after is refused by the tombstone they
// keep for idempotency.ForgetTombstone). The screen and caches are cleared even when
// the ledger has no row — a done entry can outlive a failed commit — and
// the answer is 204 either way (SPEC §8): the key is forgotten, and a
// DELETE repeated by a script or a retrying client is not an error.
func (s *Server) deleteRecord(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	ctx := r.Context()
	if s.o.Deleting != nil {
		s.o.Deleting(ref)
	}
	rec, err := s.o.Ledger.Lookup(ctx, ref)
	if err == nil {
		err = s.o.Ledger.Delete(ctx, ref)
	}
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		rec = nil // no row: the screen and caches may still hold the key
	case err != nil:
		s.ledgerFailed(w, r, "delete", ref, err)
		return
	}
	if rec != nil {
		if rec.State == idempotency.StateHeld {
			s.heldChanged(ref.Route, -1)
		}
		s.o.Logger.InfoContext(ctx, "admin: record deleted", "route", ref.Route, "key", ref.Key, "state", string(rec.State))
	}
	if err := s.forget(ctx, ref); err != nil {
		s.o.Logger.ErrorContext(ctx, "admin: the screen did not forget a deleted key", "route", ref.Route, "key", ref.Key, "err", err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable,
			"the ledger holds no record for this key, but the screen did not answer: repeats may still be replayed from it; retry the DELETE")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) forget(ctx context.Context, ref idempotency.Ref) error {
	if s.o.Forget == nil {
		return nil
	}
	return s.o.Forget(ctx, ref)
}

func (s *Server) heldChanged(route string, delta int) {
	if s.o.HeldChanged != nil {
		s.o.HeldChanged(route, delta)
	}
}

// maxHeldList bounds ?limit= of the held list.
const maxHeldList = 1000

// heldList is the answer of GET /admin/routes/{route}/held.
type heldList struct {
	Route string `json:"route"`
	// Held are the held records, oldest first.
	Held []Record `json:"held"`
	// Truncated: there are more than the limit.
	Truncated bool `json:"truncated"`
}

// held lists the held keys of route, oldest first; ?limit= (1-1000,
// default 100) bounds the list.
func (s *Server) held(w http.ResponseWriter, r *http.Request, route string) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHeldList {
			problem(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", maxHeldList))
			return
		}
		limit = n
	}
	recs, err := s.o.Ledger.Held(r.Context(), route, limit+1)
	if err != nil {
		s.ledgerFailed(w, r, "held", idempotency.Ref{Route: route}, err)
		return
	}
	out := heldList{Route: route, Held: make([]Record, 0, len(recs))}
	if len(recs) > limit {
		recs, out.Truncated = recs[:limit], true
	}
	for i := range recs {
		out.Held = append(out.Held, RecordOf(&recs[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// resolveRequest is the body of POST .../records/{key}/resolve.
type resolveRequest struct {
	Action     string            `json:"action"`
	Status     *int              `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 *string           `json:"body_base64"`
}

// maxResolveBody bounds the JSON of a resolve request.
const maxResolveBody = 16 << 20

// resolve settles a held key: "release" deletes the held row (the next
// delivery is forwarded), "record" makes it done with the operator's
// response (repeats replay it). The answer is the record afterwards; for
// release, the record as it was, with state "released".
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	req, resp, msg := decodeResolve(w, r)
	if msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	ctx := r.Context()
	rec, err := s.o.Ledger.Lookup(ctx, ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		problem(w, http.StatusNotFound, "no held record for this key on this route")
		return
	case err != nil:
		s.ledgerFailed(w, r, "lookup", ref, err)
		return
	case rec.State != idempotency.StateHeld:
		problem(w, http.StatusNotFound, fmt.Sprintf("the record for this key is %s, not held", rec.State))
		return
	}
	// The screen holds nothing for a held key but the short claims of
	// repeats being turned away; forgetting before the ledger changes
	// drops no claim made after it.
	if err := s.forget(ctx, ref); err != nil {
		s.o.Logger.WarnContext(ctx, "admin: forget before resolve failed", "route", ref.Route, "key", ref.Key, "err", err)
	}
	if req.Action == "release" && s.o.Async[ref.Route] && s.o.Redeliver != nil {
		s.releaseAsync(w, r, rec)
		return
	}
	var settle *idempotency.Record
	if req.Action == "record" {
		settle = &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: resp}
	}
	err = s.o.Ledger.Resolve(ctx, ref, settle)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		problem(w, http.StatusNotFound, "no held record for this key on this route (resolved meanwhile?)")
		return
	case err != nil:
		s.ledgerFailed(w, r, "resolve", ref, err)
		return
	}
	s.heldChanged(ref.Route, -1)
	s.o.Logger.InfoContext(ctx, "admin: held record resolved", "route", ref.Route, "key", ref.Key, "action", req.Action)

	if req.Action == "release" {
		out := RecordOf(rec)
		out.State = "released"
		writeJSON(w, http.StatusOK, out)
		return
	}
	done, err := s.o.Ledger.Lookup(ctx, ref)
	if err != nil {
		// Resolved; only the read-back failed: answer from what we wrote,
		// on the clock the ledger wrote by (to within the call).
		done = rec
		done.State, done.Response, done.CompletedAt = idempotency.StateDone, resp, s.o.Now()
	}
	writeJSON(w, http.StatusOK, RecordOf(done))
}

// decodeResolve reads and checks a resolve request. A non-empty message
// is the 400 detail.
func decodeResolve(w http.ResponseWriter, r *http.Request) (resolveRequest, idempotency.Response, string) {
	var req resolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxResolveBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, idempotency.Response{}, fmt.Sprintf("the request body is larger than %d bytes", maxResolveBody)
		}
		return req, idempotency.Response{}, "the body must be a JSON object: {\"action\":\"release\"} or {\"action\":\"record\",\"status\":200,...}"
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, idempotency.Response{}, "the body must be one JSON object"
	}
	switch req.Action {
	case "release":
		if req.Status != nil || req.Headers != nil || req.Body != nil || req.BodyBase64 != nil {
			return req, idempotency.Response{}, `action "release" takes no status, headers or body`
		}
		return req, idempotency.Response{}, ""
	case "record":
	default:
		return req, idempotency.Response{}, `action must be "release" or "record"`
	}
	if req.Status == nil || *req.Status < 200 || *req.Status > 599 {
		return req, idempotency.Response{}, `action "record" needs "status", from 200 to 599`
	}
	if idempotency.NeverFinal(*req.Status) {
		// A record is replayed to every repeat for its retention: a "try
		// again" recorded would keep the provider retrying for all of it.
		return req, idempotency.Response{}, fmt.Sprintf(`status %d is never final (408, 425, 429 and 5xx are never recorded, SPEC §1); `+
			`to have the next delivery forwarded, resolve with {"action":"release"}`, *req.Status)
	}
	resp := idempotency.Response{Status: *req.Status, Headers: map[string]string{}}
	for name, v := range req.Headers {
		if msg := checkHeader(name, v); msg != "" {
			return req, idempotency.Response{}, msg
		}
		c := http.CanonicalHeaderKey(name)
		if _, dup := resp.Headers[c]; dup {
			return req, idempotency.Response{}, fmt.Sprintf("header %q is given twice", c)
		}
		resp.Headers[c] = v
	}
	switch {
	case req.Body != nil && req.BodyBase64 != nil:
		return req, idempotency.Response{}, `give "body" or "body_base64", not both`
	case req.Body != nil:
		resp.Body = []byte(*req.Body)
	case req.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.BodyBase64)
		if err != nil {
			return req, idempotency.Response{}, `"body_base64" is not valid standard base64`
		}
		resp.Body = b
	}
	if msg := bodyFits(resp.Status, resp.Body); msg != "" {
		return req, idempotency.Response{}, msg
	}
	return req, resp, ""
}

// bodyFits says why an answer of status cannot be recorded with body, or
// "". A 304 answers a conditional request, which no delivery is, and has
// no body; 204 and 205 have none either (RFC 9110 §15.3.5, §15.3.6,
// §15.4.5): a replay would write it into the connection after an answer
// that ends with its header, where the client reads it as the start of
// the next answer.
func bodyFits(status int, body []byte) string {
	switch {
	case status == http.StatusNotModified:
		return "status 304 answers a conditional request, which no delivery is: it cannot be recorded"
	case (status == http.StatusNoContent || status == http.StatusResetContent) && len(body) > 0:
		return fmt.Sprintf("status %d has no body: record it without one", status)
	}
	return ""
}

// checkHeader refuses what a replay must not carry: Set-Cookie (a replay
// would hand one client's session to another; config refuses it too),
// framing and hop-by-hop headers (the replay sets its own), hookstamp's
// own headers, and names or values that are not valid HTTP.
func checkHeader(name, value string) string {
	if !validName(name) {
		return "a header name is not a valid HTTP token"
	}
	c := http.CanonicalHeaderKey(name)
	if c == "Set-Cookie" {
		return "Set-Cookie cannot be recorded: a replay would hand it to whoever repeats the delivery"
	}
	if idempotency.SetByReplay(c) {
		return fmt.Sprintf("header %q is set by the replay itself", c)
	}
	for i := 0; i < len(value); i++ {
		if b := value[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return fmt.Sprintf("the value of header %q has a control character", c)
		}
	}
	return ""
}

// validName reports whether s is an RFC 9110 token.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// releaseAsync releases a held record of an async route by delivering it
// again: its provider was acknowledged and will not send it again.
func (s *Server) releaseAsync(w http.ResponseWriter, r *http.Request, rec *idempotency.Record) {
	_, err := s.o.Redeliver.Requeue(r.Context(), rec.Ref, true)
	switch {
	case errors.Is(err, idempotency.ErrNotFound), errors.Is(err, idempotency.ErrNotOwner):
		problem(w, http.StatusNotFound, "no held record for this key on this route (resolved meanwhile?)")
		return
	case err != nil:
		s.ledgerFailed(w, r, "release", rec.Ref, err)
		return
	}
	s.heldChanged(rec.Route, -1)
	s.o.Logger.InfoContext(r.Context(), "admin: held async delivery released: delivered again", "route", rec.Route, "key", rec.Key)
	out := RecordOf(rec)
	out.State = string(idempotency.StateQueued)
	writeJSON(w, http.StatusOK, out)
}
