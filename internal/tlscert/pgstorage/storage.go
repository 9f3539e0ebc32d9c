// Package pgstorage keeps certmagic's account, certificates and challenge
// tokens in PostgreSQL (the ledger's database), so that every replica of
// the gateway serves one certificate obtained once, with one ACME account.
//
// Keys live in hookstamp_tls_storage. Locks are rows of hookstamp_tls_locks
// with an expiry on the database's clock: a holder extends its lease while
// it holds the lock, and a replica that died holding one loses it when its
// lease runs out. Rows rather than advisory locks, because a session
// advisory lock needs one connection held for the whole ACME order, which
// a transaction-pooling PgBouncer does not give.
package pgstorage

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/hookstamp/hookstamp/internal/pgdsn"
)

var (
	_ certmagic.Storage          = (*Storage)(nil)
	_ certmagic.LockLeaseRenewer = (*Storage)(nil)
)

// Defaults of Options.
const (
	DefaultLease        = time.Minute
	DefaultPollInterval = time.Second
)

// Options configure a Storage.
type Options struct {
	// DSN is the PostgreSQL connection string (store.dsn).
	DSN string
	// Lease is how long a lock outlives its holder's last renewal; the
	// holder renews it every third of it (DefaultLease when 0).
	Lease time.Duration
	// PollInterval is how often a Lock call waiting for another holder
	// tries again (DefaultPollInterval when 0).
	PollInterval time.Duration
	// Logger receives failed lease renewals (slog.Default when nil).
	Logger *slog.Logger
}

// Storage is a certmagic.Storage on two PostgreSQL tables.
type Storage struct {
	db    *sql.DB
	o     Options
	owner string // this process's name in the lock rows

	mu    sync.Mutex
	held  map[string]context.CancelFunc // lock name → stops its renewal
	renew sync.WaitGroup
}

// connectTimeout bounds opening one connection, as the ledger's
// (sqlledger.DefaultOpTimeout) does.
const connectTimeout = 5 * time.Second

// Open connects to the database; call Migrate to create the tables.
func Open(o Options) (*Storage, error) {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	db, err := sql.Open("pgx", pgdsn.WithConnectTimeout(o.DSN, connectTimeout))
	if err != nil {
		return nil, fmt.Errorf("tls storage: %w", err)
	}
	db.SetMaxOpenConns(4)
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Storage{db: db, o: o, owner: hex.EncodeToString(b[:]), held: map[string]context.CancelFunc{}}, nil
}

// Migrate creates the tables when they do not exist.
func (s *Storage) Migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS hookstamp_tls_storage (
	key      text PRIMARY KEY,
	value    bytea NOT NULL,
	modified timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS hookstamp_tls_locks (
	name       text PRIMARY KEY,
	owner      text NOT NULL,
	expires_at timestamptz NOT NULL
)`)
	if err != nil {
		return fmt.Errorf("tls storage: create tables: %w", err)
	}
	return nil
}

// Close stops renewing the leases of held locks (they expire, as they
// would if the process died) and closes the connections.
func (s *Storage) Close() error {
	s.mu.Lock()
	for name, stop := range s.held {
		stop()
		delete(s.held, name)
	}
	s.mu.Unlock()
	s.renew.Wait()
	return s.db.Close()
}

// Store puts value at key.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO hookstamp_tls_storage (key, value, modified) VALUES ($1, $2, now())
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, modified = EXCLUDED.modified`, key, value)
	if err != nil {
		return fmt.Errorf("tls storage: store %s: %w", key, err)
	}
	return nil
}

// Load returns the value at key, fs.ErrNotExist when there is none.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM hookstamp_tls_storage WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tls storage: %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("tls storage: load %s: %w", key, err)
	}
	return v, nil
}

// Delete removes key and, when it is a directory, every key under it.
func (s *Storage) Delete(ctx context.Context, key string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM hookstamp_tls_storage WHERE key = $1 OR starts_with(key, $2)`, key, key+"/")
	if err != nil {
		return fmt.Errorf("tls storage: delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a file or a directory.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	var ok bool
	err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM hookstamp_tls_storage WHERE key = $1 OR starts_with(key, $2))`,
		key, key+"/").Scan(&ok)
	return err == nil && ok
}

// List returns the keys under dir: its files and subdirectories, and with
// recursive everything below them too (as certmagic's FileStorage does).
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	rows, err := s.db.QueryContext(ctx, `SELECT key FROM hookstamp_tls_storage WHERE starts_with(key, $1)`, prefix)
	if err != nil {
		return nil, fmt.Errorf("tls storage: list %s: %w", dir, err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("tls storage: list %s: %w", dir, err)
		}
		parts := strings.Split(strings.TrimPrefix(k, prefix), "/")
		if !recursive {
			parts = parts[:1]
		}
		for i := range parts {
			seen[prefix+strings.Join(parts[:i+1], "/")] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tls storage: list %s: %w", dir, err)
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("tls storage: %s: %w", dir, fs.ErrNotExist)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// Stat describes key: a file, or a directory when keys lie under it.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	var (
		size     int64
		modified time.Time
	)
	err := s.db.QueryRowContext(ctx, `SELECT length(value), modified FROM hookstamp_tls_storage WHERE key = $1`, key).Scan(&size, &modified)
	switch {
	case err == nil:
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: size, IsTerminal: true}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return certmagic.KeyInfo{}, fmt.Errorf("tls storage: stat %s: %w", key, err)
	case s.Exists(ctx, key):
		return certmagic.KeyInfo{Key: key}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("tls storage: %s: %w", key, fs.ErrNotExist)
}

// String names the storage in certmagic's logs.
func (s *Storage) String() string { return "postgres" }
