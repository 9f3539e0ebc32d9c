// Package testenv gives tests their own slice of the machine's real
// PostgreSQL and Redis: a fresh schema per test, a unique Redis key prefix per
// test, and, for outage tests, a dedicated redis-server on a free port that
// the test may stop and start without touching the shared one.
//
// Tests that need a dependency fail (never skip) when it is unreachable, and
// name the address they tried: a green run must mean the tests ran.
package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/internal/freeport"
)

// PostgresAdminDSN is the server the tests use; HOOKSTAMP_TEST_PG overrides it.
func PostgresAdminDSN() string {
	return cmp.Or(os.Getenv("HOOKSTAMP_TEST_PG"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// RedisAddr is the shared Redis the tests use; HOOKSTAMP_TEST_REDIS overrides it.
func RedisAddr() string {
	return cmp.Or(os.Getenv("HOOKSTAMP_TEST_REDIS"), "127.0.0.1:6379")
}

// Name returns a short random identifier usable in SQL and Redis names.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Postgres creates a schema of its own for the test and returns a DSN whose
// search_path points at it. The schema is dropped when the test ends.
func Postgres(tb testing.TB) string {
	tb.Helper()
	admin := PostgresAdminDSN()
	db, err := gorm.Open(postgres.Open(admin), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatalf("testenv: PostgreSQL at %s not reachable (start it: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", admin, err)
	}
	sqlDB, _ := db.DB()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		tb.Fatalf("testenv: PostgreSQL at %s not reachable (start it: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", admin, err)
	}
	schema := Name("hs_")
	if err := db.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		tb.Fatalf("testenv: create schema: %v", err)
	}
	tb.Cleanup(func() {
		db.Exec("DROP SCHEMA " + schema + " CASCADE")
		sqlDB.Close()
	})
	sep := "?"
	if strings.Contains(admin, "?") {
		sep = "&"
	}
	return admin + sep + "search_path=" + schema
}

// RedisPrefix checks that the shared Redis answers and returns a key prefix
// of the test's own; every key under it is deleted when the test ends.
func RedisPrefix(tb testing.TB) (addr, prefix string) {
	tb.Helper()
	addr = RedisAddr()
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		tb.Fatalf("testenv: Redis at %s not reachable (start it: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no): %v", addr, err)
	}
	prefix = Name("hst:") + ":"
	tb.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return addr, prefix
}

// FreePort returns a loopback TCP port for a server another process binds
// later, and again after a restart (freeport.Port: outside the ephemeral
// range, where an outgoing connection could take it meanwhile).
func FreePort(tb testing.TB) int {
	tb.Helper()
	p, err := freeport.Port()
	if err != nil {
		tb.Fatalf("testenv: free port: %v", err)
	}
	return p
}

// RedisServer is a redis-server process of the test's own, for outage tests.
type RedisServer struct {
	tb   testing.TB
	Port int
	Addr string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// StartRedisServer starts a dedicated redis-server on a free loopback port,
// with extra arguments appended (e.g. "--cluster-enabled", "yes"). It is
// stopped when the test ends.
func StartRedisServer(tb testing.TB, extra ...string) *RedisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testenv: redis-server not on PATH: %v", err)
	}
	port := FreePort(tb)
	dir := tb.TempDir()
	s := &RedisServer{tb: tb, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	s.args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	_ = bin
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server and waits until it answers PING.
func (s *RedisServer) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", s.args...)
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("testenv: start redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.tb.Fatalf("testenv: redis-server on %s did not answer within 10s", s.Addr)
}

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits for it.
func (s *RedisServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
