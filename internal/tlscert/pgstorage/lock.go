package pgstorage

import (
	"context"
	"fmt"
	"time"
)

// Lock takes the lock name, waiting while another holder's lease lasts.
// The lease is renewed in the background until Unlock.
func (s *Storage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.tryLock(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			s.keepLease(name)
			return nil
		}
		t := time.NewTimer(s.o.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("tls storage: lock %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// tryLock inserts the lock row, or takes over one whose lease has run out.
// A lock this process already holds is not taken again: certmagic's
// callers in one process serialize on it too.
func (s *Storage) tryLock(ctx context.Context, name string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO hookstamp_tls_locks (name, owner, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE hookstamp_tls_locks.expires_at < now()`, name, s.owner, s.o.Lease.Seconds())
	if err != nil {
		return false, fmt.Errorf("tls storage: lock %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// keepLease renews the lease of name every third of it until Unlock or
// Close.
func (s *Storage) keepLease(name string) {
	ctx, stop := context.WithCancel(context.Background())
	s.mu.Lock()
	s.held[name] = stop
	s.mu.Unlock()
	s.renew.Add(1)
	go func() {
		defer s.renew.Done()
		t := time.NewTicker(s.o.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.RenewLockLease(ctx, name, s.o.Lease); err != nil && ctx.Err() == nil {
				s.o.Logger.Warn("tls storage: cannot renew a lock's lease; another replica may take it when it runs out",
					"lock", name, "err", err)
			}
		}
	}()
}

// RenewLockLease extends this process's lock name to lease from now.
func (s *Storage) RenewLockLease(ctx context.Context, name string, lease time.Duration) error {
	res, err := s.db.ExecContext(ctx, `UPDATE hookstamp_tls_locks SET expires_at = now() + make_interval(secs => $3)
WHERE name = $1 AND owner = $2`, name, s.owner, lease.Seconds())
	if err != nil {
		return fmt.Errorf("tls storage: renew lock %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("tls storage: renew lock %s: not held (its lease ran out and another replica took it)", name)
	}
	return nil
}

// Unlock releases the lock name.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	if stop, ok := s.held[name]; ok {
		stop()
		delete(s.held, name)
	}
	s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, `DELETE FROM hookstamp_tls_locks WHERE name = $1 AND owner = $2`, name, s.owner)
	if err != nil {
		return fmt.Errorf("tls storage: unlock %s: %w", name, err)
	}
	return nil
}
