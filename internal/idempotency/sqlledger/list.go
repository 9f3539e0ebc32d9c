package sqlledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// listColumns are selectColumns without the response body, which a list
// never shows: scanRecord reads the NULL as no body.
var listColumns = strings.Replace(selectColumns, " body, ", " NULL, ", 1)

// List returns a page of q.Route's records, newest first, without bodies.
// It walks idx_hookstamp_records_log (route, created_at, key) backwards
// from the cursor; a state other than done is read from the smaller
// idx_hookstamp_records_unsettled. idempotency.ErrBadCursor when q.Cursor
// is not one List returned.
func (l *Ledger) List(ctx context.Context, q idempotency.ListQuery) (idempotency.RecordPage, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return idempotency.RecordPage{}, fmt.Errorf("list %q: %w", q.Route, err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return idempotency.RecordPage{}, fmt.Errorf("list %q: %w", q.Route, l.fail("clock", err))
	}
	query, args, err := listSQL(l.d, q, shift)
	if err != nil {
		return idempotency.RecordPage{}, fmt.Errorf("list %q: %w", q.Route, err)
	}
	rows, err := l.r.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return idempotency.RecordPage{}, l.fail(fmt.Sprintf("list %q", q.Route), err)
	}
	defer rows.Close()
	var page idempotency.RecordPage
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return idempotency.RecordPage{}, l.fail(fmt.Sprintf("list %q", q.Route), err)
		}
		page.Records = append(page.Records, *rec)
	}
	if err := rows.Err(); err != nil {
		return idempotency.RecordPage{}, l.fail(fmt.Sprintf("list %q", q.Route), err)
	}
	if len(page.Records) > q.Limit {
		page.Records = page.Records[:q.Limit]
		last := page.Records[q.Limit-1]
		page.Next = encodeCursor(last.CreatedAt, last.Key) // on the database's clock, as read
	}
	for i := range page.Records {
		fromDB(&page.Records[i], shift)
	}
	return page, nil
}

// listSQL builds List's statement. It reads one row more than the page
// holds, to know whether another page follows.
func listSQL(d dialect, q idempotency.ListQuery, shift time.Duration) (string, []any, error) {
	if q.Limit < 1 {
		return "", nil, fmt.Errorf("limit %d: want at least 1", q.Limit)
	}
	var b strings.Builder
	b.WriteString(listColumns + `WHERE route = ?`)
	args := []any{q.Route}
	if q.State != "" {
		if !knownStates[q.State] {
			return "", nil, fmt.Errorf("unknown state %q", q.State)
		}
		// A literal, not a parameter: a plan made for any state could not
		// use the partial index, which holds some states only.
		b.WriteString(` AND state = '` + string(q.State) + `'`)
	}
	if q.KeyPrefix != "" {
		b.WriteString(d.prefixSQL)
		args = append(args, d.prefixArgs(q.KeyPrefix)...)
	}
	if !q.Since.IsZero() {
		b.WriteString(` AND created_at >= ?`)
		args = append(args, toDB(q.Since, shift))
	}
	if !q.Until.IsZero() {
		b.WriteString(` AND created_at < ?`)
		args = append(args, toDB(q.Until, shift))
	}
	if q.Cursor != "" {
		at, key, err := decodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(` AND (created_at, "key") < (?, ?)`)
		args = append(args, at, key)
	}
	b.WriteString(` ORDER BY created_at DESC, "key" DESC LIMIT ?`)
	return b.String(), append(args, q.Limit+1), nil
}

// likePrefix is a LIKE pattern matching the strings that start with p.
func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// substrPrefix binds sqliteDialect's prefixSQL: p's length, then p.
func substrPrefix(p string) []any { return []any{utf8.RuneCountInString(p), p} }

// knownStates are the states List filters on.
var knownStates = map[idempotency.State]bool{
	idempotency.StatePending: true, idempotency.StateHeld: true, idempotency.StateDone: true,
	idempotency.StateQueued: true, idempotency.StateDead: true,
}

// cursor is the position after which the next page starts: the last
// row's created_at (database clock, microseconds) and key.
type cursor struct {
	At  int64  `json:"t"`
	Key string `json:"k"`
}

func encodeCursor(at time.Time, key string) string {
	b, _ := json.Marshal(cursor{At: at.UnixMicro(), Key: key}) // cannot fail: an int and a string
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", idempotency.ErrBadCursor
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.At == 0 || c.Key == "" || strings.IndexByte(c.Key, 0) >= 0 {
		return time.Time{}, "", idempotency.ErrBadCursor
	}
	// No list writes a time outside years 1-9999, and PostgreSQL would
	// fail its statement on some of them, as if it were down.
	at := time.UnixMicro(c.At).UTC()
	if y := at.Year(); y < 1 || y > 9999 {
		return time.Time{}, "", idempotency.ErrBadCursor
	}
	return at, c.Key, nil
}
