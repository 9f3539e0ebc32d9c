package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PgBouncer is a pgbouncer process of the test's own in front of the test's
// PostgreSQL schema, in transaction pooling mode (how production poolers
// usually run): consecutive transactions of one client connection may run
// on different server connections.
type PgBouncer struct {
	// DSN reaches the test's schema through the pooler. PgBouncer refuses
	// startup parameters it does not know (search_path among them), so the
	// schema is set by the pooler on each server connection instead.
	DSN string
	cmd *exec.Cmd
}

// StartPgBouncer starts pgbouncer (Debian's package: apt-get install
// pgbouncer) on a free loopback port, pooling at most poolSize server
// connections to the schema of pgDSN (a DSN from Postgres). It is stopped
// when the test ends.
func StartPgBouncer(tb testing.TB, pgDSN string, poolSize int) *PgBouncer {
	tb.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/pgbouncer"); e != nil {
			tb.Fatalf("testenv: pgbouncer not installed (apt-get install -y pgbouncer): %v", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	u, err := url.Parse(pgDSN)
	if err != nil {
		tb.Fatalf("testenv: pgbouncer: parse %q: %v", pgDSN, err)
	}
	schema := u.Query().Get("search_path")
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	listen := FreePort(tb)
	// PgBouncer refuses to run as root; the files must be the runner's.
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		tb.Fatalf("testenv: pgbouncer dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	db := fmt.Sprintf("host=%s port=%s dbname=%s user=%s", host, port, strings.TrimPrefix(u.Path, "/"), u.User.Username())
	if schema != "" {
		db += fmt.Sprintf(" connect_query='SET search_path TO %s'", schema)
	}
	ini := fmt.Sprintf(`[databases]
hs = %s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 200
logfile = %s
pidfile = %s
`, db, listen, filepath.Join(dir, "users.txt"), poolSize, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatalf("testenv: pgbouncer %s: %v", name, err)
		}
	}
	write("pgbouncer.ini", ini)
	write("users.txt", fmt.Sprintf("%q \"\"\n", u.User.Username()))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("testenv: pgbouncer must not run as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				tb.Fatalf("testenv: pgbouncer chown: %v", err)
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("testenv: start pgbouncer: %v", err)
	}
	b := &PgBouncer{cmd: cmd, DSN: fmt.Sprintf("postgres://%s@127.0.0.1:%d/hs?sslmode=disable", u.User.Username(), listen)}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c, err := sql.Open("pgx", b.DSN)
	if err != nil {
		tb.Fatalf("testenv: pgbouncer client: %v", err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.PingContext(ctx)
		cancel()
		if err == nil {
			return b
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			tb.Fatalf("testenv: pgbouncer on %d did not answer within 10s: %v\n%s", listen, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
