package admin

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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
	// Acked: its provider got the route's acknowledgement (an async
	// intake, SPEC §5), not the upstream's answer. Queued and dead
	// records always are.
	Acked bool `json:"acked"`
}

// LosesEvent reports whether deleting the record loses its event: its
// provider was acknowledged, so it will not send the event again, and
// the upstream has not taken it (queued, dead, or held).
func (r Record) LosesEvent() bool {
	switch idempotency.State(r.State) {
	case idempotency.StateQueued, idempotency.StateDead, idempotency.StateHeld:
		return r.Acked
	}
	return false
}

// RecordOf converts a ledger row; times are UTC, zero times null.
func RecordOf(rec *idempotency.Record) Record {
	out := Record{
		Route: rec.Route, Key: rec.Key, State: string(rec.State), Status: rec.Status,
		Headers: map[string]string{}, BodyBase64: base64.StdEncoding.EncodeToString(rec.Body),
		BodyOmitted: rec.BodyOmitted, TraceID: rec.TraceID, SpanID: rec.SpanID, Source: rec.Source,
		CreatedAt: timeOrNull(rec.CreatedAt), CompletedAt: timeOrNull(rec.CompletedAt), ExpiresAt: timeOrNull(rec.ExpiresAt),
		Acked: rec.Acked || rec.State == idempotency.StateQueued || rec.State == idempotency.StateDead,
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
	s.logLedgerFailure(r.Context(), op, ref, err)
	w.Header().Set("Retry-After", "1")
	problem(w, http.StatusServiceUnavailable, "the ledger did not answer; retry later")
}

func (s *Server) getRecord(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	rec, err := s.detail(r.Context(), ref)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		problem(w, http.StatusNotFound, "no record for this key on this route")
	case err != nil:
		s.ledgerFailed(w, r, "lookup", ref, err)
	default:
		writeJSON(w, http.StatusOK, rec)
	}
}

// deleteRecord forgets a key (Delete; Discard with ?discard=true): 204
// whether or not there was a row.
func (s *Server) deleteRecord(w http.ResponseWriter, r *http.Request, ref idempotency.Ref) {
	del := s.Delete
	switch r.URL.Query().Get("discard") {
	case "", "false":
	case "true":
		del = s.Discard
	default:
		problem(w, http.StatusBadRequest, "discard must be true or false")
		return
	}
	if err := del(r.Context(), ref); err != nil {
		s.fail(w, r, err)
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
		if err != nil {
			n = -1
		}
		limit = n
	}
	recs, truncated, err := s.HeldRecords(r.Context(), route, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, heldList{Route: route, Held: recs, Truncated: truncated})
}

// HeldCounts are the numbers of held records of every route that has
// some, in one query.
func (s *Server) HeldCounts(ctx context.Context) (map[string]int, error) {
	n, err := s.o.Ledger.CountHeldByRoute(ctx)
	if err != nil {
		return nil, s.unavailable(ctx, "count held", idempotency.Ref{}, err)
	}
	return n, nil
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
