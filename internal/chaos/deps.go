package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/freeport"
)

// freePort returns a loopback TCP port for a server the harness starts,
// and restarts, on it (freeport.Port: outside the ephemeral range).
func freePort() (int, error) { return freeport.Port() }

func randomName(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RedisServer is a redis-server process of the harness's own, on a free
// loopback port, so that it can be killed, restarted and flushed without
// touching the machine's shared Redis. It keeps no data on disk: a restart
// loses everything, like a Redis without persistence.
type RedisServer struct {
	Addr string
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server with its working files under dir.
func StartRedis(dir string) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not on PATH: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir,
		args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir}}
	return r, r.Start()
}

// Start (re)starts the server and waits until it answers PING.
func (r *RedisServer) Start() error {
	if r.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", r.args...)
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(r.done)
	}()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	return poll(10*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis-server on %s: %w", r.Addr, err)
		}
		return nil
	})
}

// Kill stops the server with SIGKILL (an outage, not a shutdown): every
// key is lost.
func (r *RedisServer) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// FlushAll deletes every key, as an operator's FLUSHALL would.
func (r *RedisServer) FlushAll(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flushall: %w", err)
	}
	return nil
}

// poll calls f every interval until it succeeds or timeout passes, and
// returns its last error.
func poll(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// DefaultPostgresAdminDSN is the server the harness creates its database
// on; HOOKSTAMP_TEST_PG overrides it (the same variable as the tests').
func DefaultPostgresAdminDSN() string {
	if v := os.Getenv("HOOKSTAMP_TEST_PG"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Database is a PostgreSQL database of the harness's own, dropped by Drop.
type Database struct {
	Name  string
	admin string
	// direct is the DSN of the database itself, not through the proxy: the
	// auditor reads the ledger with it.
	direct string
}

// CreateDatabase creates a fresh database on the server of adminDSN.
func CreateDatabase(ctx context.Context, adminDSN string) (*Database, error) {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s not reachable: %w", redactDSN(adminDSN), err)
	}
	defer conn.Close(ctx)
	d := &Database{Name: randomName("hookstamp_chaos_"), admin: adminDSN}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+d.Name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", d.Name, err)
	}
	d.direct, err = withDatabase(adminDSN, d.Name, "")
	if err != nil {
		return nil, err
	}
	return d, nil
}

// DSNVia is the URL of the database reached through hostport (the proxy).
func (d *Database) DSNVia(hostport string) (string, error) {
	return withDatabase(d.admin, d.Name, hostport)
}

// Drop drops the database, closing whatever still connects to it.
func (d *Database) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// withDatabase rewrites a postgres:// URL to name database db, and
// optionally another host:port.
func withDatabase(dsn, db, hostport string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("the PostgreSQL admin DSN must be a postgres:// URL")
	}
	u.Path = "/" + db
	if hostport != "" {
		u.Host = hostport
	}
	return u.String(), nil
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// LedgerRow is one row of hookstamp_records, as the auditor reads it.
type LedgerRow struct {
	Route, Key, State string
	Status            int
	Headers           map[string]string
	Body              []byte
	CreatedAt         time.Time
	CompletedAt       time.Time
}

// Ledger reads every row of hookstamp_records.
func (d *Database) Ledger(ctx context.Context) (map[string]*LedgerRow, error) {
	conn, err := pgx.Connect(ctx, d.direct)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT route, "key", state, status, headers, body, created_at, completed_at FROM hookstamp_records`)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	out := map[string]*LedgerRow{}
	for rows.Next() {
		var (
			r         LedgerRow
			headers   string
			completed *time.Time
		)
		if err := rows.Scan(&r.Route, &r.Key, &r.State, &r.Status, &headers, &r.Body, &r.CreatedAt, &completed); err != nil {
			return nil, fmt.Errorf("read ledger: %w", err)
		}
		r.Headers = parseHeaders(headers)
		if completed != nil {
			r.CompletedAt = *completed
		}
		out[refKey(r.Route, r.Key)] = &r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return out, nil
}

// refKey is the map key of a (route, key) record identity.
func refKey(route, key string) string { return route + "\x00" + key }

// parseHeaders decodes the headers column (a JSON object of name → value).
func parseHeaders(s string) map[string]string {
	h := map[string]string{}
	_ = json.Unmarshal([]byte(s), &h)
	return h
}
