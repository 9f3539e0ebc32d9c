package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// The event log (SPEC §11): the paged record list and a record's detail
// with its stored request and attempts, which the console reads through
// the Server's methods, so that it serves the same answers as the API.

// Queue tells when an async route's record is next attempted.
type Queue interface {
	// NextAttempt returns when ref's delivery is next attempted, and false
	// when none is scheduled (not queued, or not an async route).
	NextAttempt(ctx context.Context, ref idempotency.Ref) (time.Time, bool, error)
}

// List limits (?limit=).
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// RecordList is the answer of GET /admin/routes/{route}/records.
type RecordList struct {
	Records []ListedRecord `json:"records"`
	// NextCursor continues the list (?cursor=); null on the last page.
	NextCursor *string `json:"next_cursor"`
}

// ListedRecord is a record in a list: without its body.
type ListedRecord struct {
	Record
	// BodyBase64 shadows Record's (the shallower field wins in JSON), so
	// that it is left out.
	BodyBase64 *string `json:"body_base64,omitempty"`
}

// RecordDetail is the answer of GET /admin/routes/{route}/records/{key}.
type RecordDetail struct {
	Record
	// Request is the stored request; absent when none is stored.
	Request  *StoredRequest `json:"request,omitempty"`
	Attempts []Attempt      `json:"attempts"`
	// NextAttemptAt is when the record's delivery is next attempted: on
	// async routes always shown, null when none waits; elsewhere shown
	// only while a redelivery waits.
	NextAttemptAt ShownTime `json:"next_attempt_at,omitzero"`
}

// ShownTime is a member shown as a time or null, or left out when not
// Shown.
type ShownTime struct {
	Shown bool
	At    *time.Time
}

func (t ShownTime) IsZero() bool { return !t.Shown }

func (t ShownTime) MarshalJSON() ([]byte, error) { return json.Marshal(t.At) }

func (t *ShownTime) UnmarshalJSON(b []byte) error {
	t.Shown = true
	return json.Unmarshal(b, &t.At)
}

// StoredRequest is a stored request as the API shows it.
type StoredRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// Headers keep every value of a repeated field, in order.
	Headers    map[string][]string `json:"headers"`
	BodyBase64 string              `json:"body_base64"`
}

// Attempt is one forward of a stored request.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// Status is null when nothing came back (Error says why).
	Status  *int   `json:"status"`
	Error   string `json:"error"`
	Replica string `json:"replica"`
}

// QueryError is a list query the API refuses (400).
type QueryError struct{ Detail string }

func (e *QueryError) Error() string { return e.Detail }

var listParams = map[string]bool{"state": true, "key_prefix": true, "since": true, "until": true, "limit": true, "cursor": true}

// ParseListQuery reads and checks the list's query parameters; a refusal
// is a *QueryError.
func ParseListQuery(route string, v url.Values) (idempotency.ListQuery, error) {
	q := idempotency.ListQuery{Route: route, Limit: DefaultListLimit}
	for name, vals := range v {
		if !listParams[name] {
			return q, &QueryError{fmt.Sprintf("unknown parameter %q (state, key_prefix, since, until, limit, cursor)", name)}
		}
		if len(vals) > 1 {
			return q, &QueryError{fmt.Sprintf("parameter %q is given more than once", name)}
		}
	}
	switch s := idempotency.State(v.Get("state")); s {
	case "", idempotency.StatePending, idempotency.StateHeld, idempotency.StateDone, idempotency.StateQueued, idempotency.StateDead:
		q.State = s
	default:
		return q, &QueryError{"state must be pending, held, done, queued or dead"}
	}
	q.KeyPrefix = v.Get("key_prefix")
	if !utf8.ValidString(q.KeyPrefix) || strings.IndexByte(q.KeyPrefix, 0) >= 0 {
		return q, &QueryError{"key_prefix must be UTF-8 text without NUL"}
	}
	var err error
	if q.Since, err = parseTime(v, "since"); err != nil {
		return q, err
	}
	if q.Until, err = parseTime(v, "until"); err != nil {
		return q, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, &QueryError{"since must be before until"}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, &QueryError{fmt.Sprintf("limit must be an integer from 1 to %d", MaxListLimit)}
		}
		q.Limit = n
	}
	q.Cursor = v.Get("cursor")
	return q, nil
}

func parseTime(v url.Values, name string) (time.Time, error) {
	s := v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &QueryError{name + " must be an RFC 3339 time, e.g. 2026-12-05T10:00:00Z"}
	}
	return t, nil
}

// List returns a page of the event log. An invalid cursor is a
// *QueryError; other errors are the ledger's.
func List(ctx context.Context, l Ledger, q idempotency.ListQuery) (RecordList, error) {
	page, err := l.List(ctx, q)
	if errors.Is(err, idempotency.ErrBadCursor) {
		return RecordList{}, &QueryError{"cursor is not one this API returned"}
	}
	if err != nil {
		return RecordList{}, err
	}
	out := RecordList{Records: make([]ListedRecord, 0, len(page.Records))}
	for i := range page.Records {
		out.Records = append(out.Records, ListedRecord{Record: RecordOf(&page.Records[i])})
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return out, nil
}

// detail returns ref's record with its stored request, attempts and, on
// async routes, next attempt; idempotency.ErrNotFound when there is none.
func (s *Server) detail(ctx context.Context, ref idempotency.Ref) (RecordDetail, error) {
	l, q := s.o.Ledger, s.o.Queue
	rec, err := l.Lookup(ctx, ref)
	if err != nil {
		return RecordDetail{}, err
	}
	req, err := l.Request(ctx, ref)
	if err != nil && !errors.Is(err, idempotency.ErrNotFound) { // deleted since: shown without
		return RecordDetail{}, err
	}
	atts, err := l.Attempts(ctx, ref)
	if err != nil {
		return RecordDetail{}, err
	}
	out := RecordDetail{Record: RecordOf(rec), Request: storedRequestOf(req, s.o.Secrets[ref.Route]), Attempts: make([]Attempt, 0, len(atts))}
	for _, a := range atts {
		out.Attempts = append(out.Attempts, attemptOf(a))
	}
	if q != nil {
		at, ok, err := q.NextAttempt(ctx, ref)
		if err != nil {
			return RecordDetail{}, fmt.Errorf("next attempt: %w", err)
		}
		if ok {
			out.NextAttemptAt = ShownTime{Shown: true, At: timeOrNull(at)}
		} else if s.o.Async[ref.Route] {
			out.NextAttemptAt.Shown = true
		}
	}
	return out, nil
}

// Secret is where a route's deliveries carry its verify secret itself
// (scheme token): a header, or a GJSON path in the JSON body.
type Secret struct{ Header, JSON string }

// redacted stands for a secret in a stored request shown.
const redacted = "[redacted]"

// storedRequestOf is r as shown, sec's secret redacted: whoever reads the
// event log could otherwise forge deliveries that pass verification. The
// ledger keeps it, so that a redelivery carries it as the original did.
func storedRequestOf(r *idempotency.Request, sec Secret) *StoredRequest {
	if r == nil {
		return nil
	}
	h := make(map[string][]string, len(r.Headers))
	for name, v := range r.Headers {
		if sec.Header != "" && strings.EqualFold(name, sec.Header) {
			v = slices.Repeat([]string{redacted}, len(v))
		}
		h[name] = v
	}
	body := r.Body
	if sec.JSON != "" {
		// Every copy of the token's JSON string, wherever it is: a few
		// equal strings too many redacted leak nothing.
		if tok := gjson.GetBytes(body, sec.JSON); tok.Type == gjson.String {
			body = bytes.ReplaceAll(body, []byte(tok.Raw), []byte(`"`+redacted+`"`))
		}
	}
	return &StoredRequest{Method: r.Method, Path: r.Path, Headers: h, BodyBase64: base64.StdEncoding.EncodeToString(body)}
}

func attemptOf(a idempotency.Attempt) Attempt {
	out := Attempt{Attempt: a.Attempt, StartedAt: a.StartedAt.UTC(), DurationMS: a.Duration.Milliseconds(), Error: a.Error, Replica: a.Replica}
	if a.Status != 0 {
		s := a.Status
		out.Status = &s
	}
	return out
}

// listRecords answers GET /admin/routes/{route}/records.
func (s *Server) listRecords(w http.ResponseWriter, r *http.Request, route string) {
	q, err := ParseListQuery(route, r.URL.Query())
	if err == nil {
		var out RecordList
		if out, err = List(r.Context(), s.o.Ledger, q); err == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	var qe *QueryError
	if errors.As(err, &qe) {
		problem(w, http.StatusBadRequest, qe.Detail)
		return
	}
	s.ledgerFailed(w, r, "list", idempotency.Ref{Route: route}, err)
}
