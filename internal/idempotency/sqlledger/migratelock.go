package sqlledger

import (
	"context"
	"fmt"
	"os"
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
