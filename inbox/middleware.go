package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
)

// Final reports whether an answer with this status is recorded and
// replayed. 5xx, 408, 425 and 429 say "try again later": the handler's
// writes roll back and a repeat runs the handler again (as hookstamp's
// record.statuses default does).
func Final(status int) bool {
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooEarly,
		status == http.StatusTooManyRequests:
		return false
	}
	return true
}

// answer is a recorded response: what a repeat gets.
type answer struct {
	status int
	header http.Header // the recorded headers only
	body   []byte
}

// binaryHeaders marks recorded headers whose values are base64: JSON would
// replace a value's bytes that are not UTF-8, and a repeat would not get
// them back.
const binaryHeaders = "b64:"

func (in *Inbox) encodeHeader(h http.Header) string {
	kept := map[string][]string{}
	utf := true
	for _, name := range in.o.Headers {
		name = http.CanonicalHeaderKey(name)
		v, set := h[name]
		switch {
		case len(v) > 0:
			kept[name] = v
			for _, s := range v {
				utf = utf && utf8.ValidString(s)
			}
		case set: // present with no value: net/http sends none and sniffs no Content-Type
			kept[name] = []string{}
		}
	}
	if utf {
		b, _ := json.Marshal(kept) // a map of strings always marshals
		return string(b)
	}
	raw := make(map[string][][]byte, len(kept))
	for name, v := range kept {
		raw[name] = make([][]byte, 0, len(v))
		for _, s := range v {
			raw[name] = append(raw[name], []byte(s))
		}
	}
	b, _ := json.Marshal(raw)
	return binaryHeaders + string(b)
}

func decodeHeader(s string) (http.Header, error) {
	h := http.Header{}
	switch {
	case s == "":
	case strings.HasPrefix(s, binaryHeaders):
		var raw map[string][][]byte
		if err := json.Unmarshal([]byte(s[len(binaryHeaders):]), &raw); err != nil {
			return nil, err
		}
		for name, v := range raw {
			h[name] = make([]string, 0, len(v))
			for _, b := range v {
				h[name] = append(h[name], string(b))
			}
		}
	default:
		if err := json.Unmarshal([]byte(s), &h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// record writes an answer's status, headers and body to c's row, in c's
// transaction. The row is gone (ErrRolledBack) when the database rolled
// the transaction back.
func (in *Inbox) record(c *claim, status int, headers string, body []byte) error {
	if body == nil {
		body = []byte{}
	}
	res := c.tx.Exec(in.answerSQL, status, headers, body, in.o.Consumer, c.key, c.token)
	switch {
	case res.Error != nil:
		return fmt.Errorf("inbox: record %q: %w", c.key, res.Error)
	case res.RowsAffected != 1:
		return fmt.Errorf("inbox: record %q: %w", c.key, ErrRolledBack)
	}
	return nil
}

// recorded reads key's answer; found is false when the row is gone (swept
// since the insert found it).
func (in *Inbox) recorded(ctx context.Context, key string) (a answer, found bool, err error) {
	var headers string
	row := in.db.WithContext(ctx).Raw(in.selectSQL, in.o.Consumer, key).Row()
	if err := row.Scan(&a.status, &headers, &a.body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return a, false, nil
		}
		return a, false, fmt.Errorf("inbox: read %q: %w", key, err)
	}
	if a.status == 0 { // recorded by Once: no answer of its own, headers hold its claim's token
		return answer{status: http.StatusOK, header: http.Header{}}, true, nil
	}
	if a.header, err = decodeHeader(headers); err != nil {
		return a, false, fmt.Errorf("inbox: read %q: headers: %w", key, err)
	}
	return a, true, nil
}

// begin claims key for a handler: it returns the open transaction, or the
// recorded answer of a key already taken. leave, returned with the
// transaction, ends the key's turn (gate) once the transaction has ended.
func (in *Inbox) begin(ctx context.Context, key string) (c *claim, replay *answer, leave func(), err error) {
	if leave, err = in.gate.enter(ctx, key); err != nil {
		return nil, nil, nil, fmt.Errorf("inbox: record %q: %w", key, err)
	}
	if c, replay, err = in.claimOrRead(ctx, key); c == nil {
		leave()
		return nil, replay, nil, err
	}
	return c, nil, leave, nil
}

// claimOrRead claims key: the open transaction, or the recorded answer
// of a key already taken.
func (in *Inbox) claimOrRead(ctx context.Context, key string) (*claim, *answer, error) {
	const rounds = 3 // a row swept between the insert and the read, more than once, is a database that does not keep what it reports
	for range rounds {
		c, err := in.claim(ctx, key)
		if err != nil || c != nil {
			return c, nil, err
		}
		a, found, err := in.recorded(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if found {
			return nil, &a, nil
		}
	}
	return nil, nil, fmt.Errorf("inbox: key %q recorded but not found %d times", key, rounds)
}

// keyProblem is the 400 answer's text for a key the table cannot hold.
func (in *Inbox) keyProblem(key string) string {
	switch checkKey(key) {
	case nil:
		return ""
	case ErrNoKey:
		return "missing " + in.o.Header + " header"
	case ErrKeyTooLong:
		return fmt.Sprintf("%s longer than %d bytes", in.o.Header, MaxKeyLen)
	}
	return in.o.Header + " not valid UTF-8 or holding a control character"
}

// Middleware runs next at most once per key (the Options.Header request
// header) and answers every repeat with the recorded answer.
//
// next runs inside the transaction that records the key; its business
// writes go through Tx(r.Context()). A final answer (see Final) is recorded
// with the key, committed, and only then written to the client, with all
// the headers next set; a repeat gets the status, the Options.Headers and
// the body, byte for byte. A non-final answer rolls everything back and is
// passed on; a panic rolls back and panics again. A request without a key
// gets 400; a database that cannot record gets 503 (nothing committed), and
// so does a 2xx after a statement that aborted the transaction (PostgreSQL):
// the handler's writes went with it.
func (in *Inbox) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(in.o.Header)
		if p := in.keyProblem(key); p != "" {
			http.Error(w, p, http.StatusBadRequest)
			return
		}
		c, replay, leave, err := in.begin(r.Context(), key)
		if leave != nil {
			defer leave()
		}
		switch {
		case err != nil:
			in.o.Logger.Error("inbox: could not claim the key", "key", key, "err", err)
			http.Error(w, "inbox unavailable", http.StatusServiceUnavailable)
			return
		case replay != nil:
			replay.writeTo(w)
			return
		}
		rec := &recorder{header: http.Header{}}
		replay, ok := in.run(r.Context(), c, func() int {
			next.ServeHTTP(rec, r.WithContext(in.withTx(r.Context(), key, c.tx)))
			return rec.code()
		}, func() (string, []byte) { return in.encodeHeader(rec.header), rec.body.Bytes() })
		switch {
		case !ok:
			http.Error(w, "inbox could not record the answer", http.StatusServiceUnavailable)
		case replay != nil:
			replay.writeTo(w)
		default:
			rec.writeTo(w)
		}
	})
}

func (a *answer) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for name, v := range a.header {
		h[name] = v
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// run calls handle inside c's transaction; a final status is recorded
// (with the headers and body answer gives) and committed, anything else
// rolled back. ok is false when the answer could not be recorded; replay,
// when not nil, is the answer another copy recorded, to send instead of
// the handler's. A panic in handle rolls back and goes on.
func (in *Inbox) run(ctx context.Context, c *claim, handle func() int, answer func() (string, []byte)) (replay *answer, ok bool) {
	settled := false
	defer func() {
		if !settled {
			c.rollback()
		}
	}()
	status := handle()
	settled = true
	if !Final(status) {
		c.rollback()
		return nil, true
	}
	headers, body := answer()
	err := in.record(c, status, headers, body)
	if err != nil && in.d.aborted != nil && in.d.aborted(err) {
		c.rollback()
		if !appliesNothing(status) {
			// The handler's writes before the failed statement are gone
			// with the transaction: recording its 2xx would acknowledge
			// an event none of whose effects applied.
			in.o.Logger.Error("inbox: the handler answered success after a failed statement aborted its transaction; rolled back, answered 503",
				"key", c.key, "status", status, "err", err)
			return nil, false
		}
		if replay, err = in.recordAlone(ctx, c.key, status, headers, body); err == nil {
			return replay, true
		}
	}
	if err != nil {
		c.rollback()
		in.o.Logger.Error("inbox: could not record the answer; rolled back", "key", c.key, "err", err)
		return nil, false
	}
	if err := c.commit(); err != nil {
		in.o.Logger.Error("inbox: commit failed; the handler's writes are not applied", "key", c.key, "err", err)
		return nil, false
	}
	return nil, true
}

// appliesNothing reports whether a final answer with this status says
// the event was refused rather than applied (not 2xx): such an answer
// stands without the handler's writes.
func appliesNothing(status int) bool { return status < 200 || status > 299 }

// recordAlone records key with a final answer that applies nothing (see
// appliesNothing) in a statement of its own, after PostgreSQL aborted the
// handler's transaction (a statement of it failed, and the handler
// refused the event): none of the handler's writes apply. A key another
// copy recorded meanwhile gives that copy's answer, as a repeat would get.
func (in *Inbox) recordAlone(ctx context.Context, key string, status int, headers string, body []byte) (*answer, error) {
	if body == nil {
		body = []byte{}
	}
	now := in.o.Now().UTC().Truncate(time.Microsecond)
	err := in.db.WithContext(ctx).Session(&gorm.Session{Logger: in.quiet}).
		Exec(in.insertSQL, in.o.Consumer, key, status, headers, body, now, now.Add(in.o.Retention)).Error
	switch {
	case err == nil:
		return nil, nil
	case !in.d.duplicate(in.db, err):
		return nil, fmt.Errorf("inbox: record %q alone: %w", key, err)
	}
	a, found, err := in.recorded(ctx, key)
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, fmt.Errorf("inbox: record %q alone: recorded but not found", key)
	}
	return &a, nil
}

// recorder holds a handler's answer until it is committed.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 { // informational answers are not the answer
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

func (r *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for name, v := range r.header {
		h[name] = v
	}
	w.WriteHeader(r.code())
	_, _ = w.Write(r.body.Bytes())
}
