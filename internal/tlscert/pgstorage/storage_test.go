package pgstorage_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
	"github.com/hookstamp/hookstamp/internal/tlscert/pgstorage"
)

func open(tb testing.TB, dsn string, lease time.Duration) *pgstorage.Storage {
	tb.Helper()
	s, err := pgstorage.Open(pgstorage.Options{DSN: dsn, Lease: lease, PollInterval: 20 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestFilesAndDirectories(t *testing.T) {
	s := open(t, testenv.Postgres(t), 0)
	ctx := context.Background()
	for k, v := range map[string]string{
		"certificates/ca/example.com/example.com.crt": "cert",
		"certificates/ca/example.com/example.com.key": "key",
		"acme/ca/users/a@b/a.json":                    "user",
	} {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store(ctx, "acme/ca/users/a@b/a.json", []byte("user2")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctx, "acme/ca/users/a@b/a.json"); err != nil || string(v) != "user2" {
		t.Fatalf("Load after overwrite = %q, %v; want user2", v, err)
	}
	if _, err := s.Load(ctx, "certificates/ca"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a directory: err = %v, want fs.ErrNotExist", err)
	}
	if !s.Exists(ctx, "certificates/ca") || !s.Exists(ctx, "certificates/ca/example.com/example.com.key") || s.Exists(ctx, "certificates/c") {
		t.Fatal("Exists: wrong answer for a directory, a file or a partial component")
	}
	if fi, err := s.Stat(ctx, "certificates/ca/example.com/example.com.crt"); err != nil || !fi.IsTerminal || fi.Size != 4 || fi.Modified.IsZero() {
		t.Fatalf("Stat of a file = %+v, %v", fi, err)
	}
	if fi, err := s.Stat(ctx, "certificates/ca"); err != nil || fi.IsTerminal {
		t.Fatalf("Stat of a directory = %+v, %v", fi, err)
	}
	if _, err := s.Stat(ctx, "nothing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat of nothing: err = %v, want fs.ErrNotExist", err)
	}

	got, err := s.List(ctx, "certificates", false)
	if err != nil || !slices.Equal(got, []string{"certificates/ca"}) {
		t.Fatalf("List(certificates, false) = %q, %v", got, err)
	}
	got, err = s.List(ctx, "certificates", true)
	want := []string{"certificates/ca", "certificates/ca/example.com",
		"certificates/ca/example.com/example.com.crt", "certificates/ca/example.com/example.com.key"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List(certificates, true) = %q, %v; want %q", got, err, want)
	}

	if err := s.Delete(ctx, "certificates/ca/example.com"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates") {
		t.Fatal("Delete of a directory left keys under it")
	}
	if err := s.Delete(ctx, "certificates"); err != nil {
		t.Fatalf("Delete of a missing key: %v, want nil", err)
	}
	if !s.Exists(ctx, "acme/ca/users/a@b/a.json") {
		t.Fatal("Delete removed a key outside the directory")
	}
}

// Replicas share one database: a lock taken by one keeps the others out
// until it is released, however long the holder works (its lease is
// renewed), and never two at once.
func TestLockExcludesOtherReplicas(t *testing.T) {
	dsn := testenv.Postgres(t)
	lease := 300 * time.Millisecond
	replicas := []*pgstorage.Storage{open(t, dsn, lease), open(t, dsn, lease), open(t, dsn, lease)}
	var inside, maxInside, entries atomic.Int32
	var wg sync.WaitGroup
	for _, s := range replicas {
		for range 2 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := s.Lock(ctx, "issue_cert_example.com"); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				entries.Add(1)
				time.Sleep(lease) // outlives the first lease: only renewal keeps the others out
				inside.Add(-1)
				if err := s.Unlock(ctx, "issue_cert_example.com"); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if entries.Load() != 6 || maxInside.Load() != 1 {
		t.Fatalf("%d entries, at most %d holders at once; want 6 and 1", entries.Load(), maxInside.Load())
	}
}

// A replica that dies holding a lock does not hold it forever: another
// takes it once the lease has run out.
func TestLockOfADeadReplicaExpires(t *testing.T) {
	dsn := testenv.Postgres(t)
	dead := open(t, dsn, 500*time.Millisecond)
	alive := open(t, dsn, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dead.Lock(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	dead.Close() // its renewals stop, the row stays: as a killed process leaves it

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := alive.Lock(short, "x"); err == nil {
		t.Fatal("took a lock whose lease had not run out")
	}
	start := time.Now()
	if err := alive.Lock(ctx, "x"); err != nil {
		t.Fatalf("lock of a dead replica never expired: %v", err)
	}
	if err := alive.RenewLockLease(ctx, "x", time.Second); err != nil {
		t.Fatalf("renew a held lock: %v", err)
	}
	t.Logf("taken over after %s", time.Since(start))
}
