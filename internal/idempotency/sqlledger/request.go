package sqlledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Execer is what the *Tx methods write through, so that a caller can put
// the ledger's statements in its own transaction: a *sql.Tx, a *sql.DB, or
// a GORM transaction's Statement.ConnPool. Statements are written for the
// ledger's driver (PostgreSQL's $n placeholders, SQLite's ?).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const (
	storeRequestSQL = `UPDATE hookstamp_records SET request_method = ?, request_path = ?, request_headers = ?, request_body = ? ` +
		`WHERE route = ? AND "key" = ?`
	requestSQL = `SELECT request_method, request_path, request_headers, request_body FROM hookstamp_records ` +
		`WHERE route = ? AND "key" = ?`
)

// requestColumns is a stored request as its four columns bind; all NULL
// when there is none.
type requestColumns struct {
	method, path, headers *string
	body                  []byte
}

// encodeRequest returns req's columns, its headers filtered by
// idempotency.StorableHeader.
func encodeRequest(req *idempotency.Request) (requestColumns, error) {
	if req == nil {
		return requestColumns{}, nil
	}
	h, err := EncodeRequestHeaders(req.Headers)
	if err != nil {
		return requestColumns{}, err
	}
	return requestColumns{method: &req.Method, path: &req.Path, headers: &h, body: req.Body}, nil
}

func (c requestColumns) args() []any {
	return []any{c.method, c.path, c.headers, nullBytes(c.body)}
}

// EncodeRequestHeaders is the request_headers column for h: a JSON object
// of value lists (names canonical, hop-by-hop headers, Authorization and
// Cookie left out). Values that are not UTF-8 would become U+FFFD in JSON,
// so such a header set is stored with base64 values behind a prefix, as
// response headers are.
func EncodeRequestHeaders(h http.Header) (string, error) {
	h = idempotency.StorableHeader(h)
	var v any = h
	prefix := ""
	if !validHeader(h) {
		b := make(map[string][][]byte, len(h))
		for name, values := range h {
			for _, val := range values {
				b[name] = append(b[name], []byte(val))
			}
		}
		v, prefix = b, binaryHeaders
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode request headers: %w", err)
	}
	return prefix + string(out), nil
}

func validHeader(h http.Header) bool {
	for name, values := range h {
		if !utf8.ValidString(name) {
			return false
		}
		for _, v := range values {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// decodeRequestHeaders reads EncodeRequestHeaders' text.
func decodeRequestHeaders(s string) (http.Header, error) {
	if rest, ok := strings.CutPrefix(s, binaryHeaders); ok {
		var b map[string][][]byte
		if err := json.Unmarshal([]byte(rest), &b); err != nil {
			return nil, fmt.Errorf("decode request headers: %w", err)
		}
		h := make(http.Header, len(b))
		for name, values := range b {
			for _, v := range values {
				h[name] = append(h[name], string(v))
			}
		}
		return h, nil
	}
	h := http.Header{}
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("decode request headers: %w", err)
	}
	return h, nil
}

// StoreRequest stores req with ref's record, replacing any stored before.
// ErrNotFound when ref has no record.
func (l *Ledger) StoreRequest(ctx context.Context, r idempotency.Ref, req *idempotency.Request) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("store request %s: %w", ref(r), err)
	}
	db, err := l.w.DB()
	if err != nil {
		return l.fail(fmt.Sprintf("store request %s", ref(r)), err)
	}
	return l.StoreRequestTx(ctx, db, r, req)
}

// StoreRequestTx is StoreRequest through ex, for a caller that writes the
// record in its own transaction.
func (l *Ledger) StoreRequestTx(ctx context.Context, ex Execer, r idempotency.Ref, req *idempotency.Request) error {
	cols, err := encodeRequest(req)
	if err != nil {
		return fmt.Errorf("store request %s: %w", ref(r), err)
	}
	res, err := ex.ExecContext(ctx, l.d.rebind(storeRequestSQL), append(cols.args(), r.Route, r.Key)...)
	if err != nil {
		return l.fail(fmt.Sprintf("store request %s", ref(r)), err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("store request %s: %w", ref(r), errors.Join(idempotency.ErrNotFound, err))
	}
	return nil
}

// Request returns the request stored with ref's record, nil when none is
// stored, or ErrNotFound when ref has no record.
func (l *Ledger) Request(ctx context.Context, r idempotency.Ref) (*idempotency.Request, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("request %s: %w", ref(r), err)
	}
	var (
		method, path, headers sql.NullString
		body                  []byte
	)
	err := l.r.WithContext(ctx).Raw(requestSQL, r.Route, r.Key).Row().Scan(&method, &path, &headers, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("request %s: %w", ref(r), idempotency.ErrNotFound)
	}
	if err != nil {
		return nil, l.fail(fmt.Sprintf("request %s", ref(r)), err)
	}
	if !method.Valid {
		return nil, nil
	}
	h, err := decodeRequestHeaders(headers.String)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", ref(r), err)
	}
	return &idempotency.Request{Method: method.String, Path: path.String, Headers: h, Body: nonEmpty(body)}, nil
}
