package sqlledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// LockMigrations keeps other processes from migrating the ledger's SQLite
// file until unlock is called: each of River's migrations commits on its
// own, so two processes starting on a fresh file would both apply the
// first. The lock is a file lock on <file>.migrate.lock, released by the
// system when the process dies. PostgreSQL (advisory locks in each
// migration) and in-memory files need none: unlock is then a no-op.
func (l *Ledger) LockMigrations(ctx context.Context) (unlock func(), err error) {
	if l.lockFile == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(l.lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	waited := l.NoteWait("ledger")
	defer waited()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		held, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("migration lock %s: %w", l.lockFile, err)
		}
		if held {
			return func() { _ = unlockFile(f); f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("migration lock %s: another process is migrating: %w", l.lockFile, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// ErrServedElsewhere: another process holds the ledger's SQLite file alone
// (LockAlone).
var ErrServedElsewhere = errors.New("another process serves this SQLite file alone")

// LockAlone keeps other processes from taking the ledger's SQLite file
// alone until release is called, for a process whose claims live in its
// own memory: a second one beside it would forward the same deliveries.
// The lock is a file lock on <file>.serve.lock, released by the system
// when the process dies; ErrServedElsewhere when another holds it.
// PostgreSQL and in-memory files: a no-op.
func (l *Ledger) LockAlone() (release func() error, err error) {
	if l.lockFile == "" {
		return func() error { return nil }, nil
	}
	name := strings.TrimSuffix(l.lockFile, ".migrate.lock") + ".serve.lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	held, err := tryLock(f)
	switch {
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	case !held:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, ErrServedElsewhere)
	}
	return func() error { _ = unlockFile(f); return f.Close() }, nil
}

// NoteWait logs, once, that a migration waits for another process's when
// stop has not been called within a second: the wait may be long, and a
// replica starting meanwhile shows nothing else.
func (l *Ledger) NoteWait(what string) (stop func()) {
	log := cmp.Or(l.log, slog.Default())
	t := time.AfterFunc(time.Second, func() {
		log.Info("migration waits for another process migrating the same database", "tables", what)
	})
	return func() { t.Stop() }
}
