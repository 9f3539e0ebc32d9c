package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// SIGTERM while serve is still starting — here waiting for another
// replica's migration (the advisory lock that serialises them) — stops it
// cleanly: exit 0, as a SIGTERM after start-up does. Exit 1 would mark a
// stopped unit failed (systemd) and log a stop that was asked for as an
// error.
func TestSIGTERMDuringStartupExitsZero(t *testing.T) {
	dsn := testenv.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Another replica is migrating: it holds the migration lock.
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext(current_schema() || '.hookstamp_records'))"); err != nil {
		t.Fatal(err)
	}

	// This process must survive the SIGTERM it sends itself even if serve
	// has not registered for it yet.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg, `
server: {listen: "127.0.0.1:0"}
admin: {listen: ""}
store: {driver: postgres, dsn: "`+dsn+`", auto_migrate: true}
`+demoRoutes)
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run([]string{"serve", "-config", cfg}, nil, &out, &errb)
		done <- result{code, errb.String()}
	}()
	testenv.Eventually(t, 10*time.Second, "serve to wait for the migration lock", func() bool {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"+
			// this schema's lock only: other packages' tests run beside this one
			" AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"+
			" AND objid = ((hashtext(current_schema() || '.hookstamp_records')::bigint) & 4294967295)::oid").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || strings.Contains(r.stderr, `"level":"ERROR"`) {
			t.Fatalf("SIGTERM during start-up: exit %d, stderr %q; want exit 0 and no error", r.code, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM during start-up")
	}
}

// A second SIGTERM while serve drains ends the drain at once, as
// shutdown_timeout running out does: the delivery still in flight is cut
// and answered (released: nothing recorded, the provider's retry is
// forwarded), and the process exits 0. Swallowed, it left an operator who
// would not wait out shutdown_timeout only SIGKILL, whose claims outlive
// the process for their lease (409s to the provider's retries).
func TestSecondSIGTERMAbandonsDrain(t *testing.T) {
	// This process must survive the SIGTERMs it sends itself.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var received atomic.Int32
	block := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	release := sync.OnceFunc(func() { close(block) })
	defer release() // before up.Close: it waits for this handler

	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg, `
server: {listen: "`+addr+`", shutdown_timeout: 30s}
admin: {listen: "`+adminAddr+`"}
store: {dsn: "`+filepath.Join(dir, "ledger.db")+`"}
routes:
  - name: demo
    path: /d
    upstream: {url: "`+up.URL+`/d"}
    key: {sources: [{header: X-Event-Id}]}
`)
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- run([]string{"serve", "-config", cfg}, nil, &out, &errb)
	}()
	testenv.Eventually(t, 10*time.Second, "gateway listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	answered := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/d", strings.NewReader("{}"))
		req.Header.Set("X-Event-Id", "evt_second_sigterm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("delivery in flight: %v", err)
			resp = nil
		} else {
			resp.Body.Close()
		}
		answered <- resp
	}()
	testenv.Eventually(t, 10*time.Second, "delivery in flight", func() bool { return received.Load() == 1 })

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "drain begun (/readyz 503)", func() bool {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	start := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after a second SIGTERM, want 0; stderr %q", code, errb.String())
		}
		t.Logf("stopped %v after the second SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		release() // let the drain finish, so that the test ends
		<-done
		t.Fatalf("still draining 5s after a second SIGTERM (shutdown_timeout 30s): the signal was ignored")
	}
	if resp := <-answered; resp != nil && resp.Header.Get("Hookstamp-Outcome") != "released" {
		t.Fatalf("abandoned delivery: %d %q, want it released", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
	}
}

// After the second stop signal, a third ends the process at once, as Go
// does by default: an operator whose abandon is stuck (here releasing a
// claim in a ledger that hangs, each call bounded, not their sum) is not
// left with SIGKILL only. Swallowed, it changed nothing.
func TestThirdSIGTERMEndsTheProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dsn, pg := testenv.PostgresBehindProxy(t)
	received := make(chan struct{}, 1)
	block := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- struct{}{}
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(block) // before up.Close: it waits for this handler

	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := filepath.Join(dir, "c.yaml")
	// Screen none: claims are the ledger's rows, so releasing one waits
	// for the ledger.
	writeFile(t, cfg, `
server: {listen: "`+addr+`", shutdown_timeout: 30s}
admin: {listen: ""}
store: {driver: postgres, dsn: "`+dsn+`"}
screen: {driver: none}
routes:
  - name: demo
    path: /d
    upstream: {url: "`+up.URL+`/d"}
    key: {sources: [{header: X-Event-Id}]}
`)
	logs := &testenv.Buffer{}
	cmd := exec.Command(self, "serve", "-config", cfg)
	cmd.Env = append(os.Environ(), runAsGateway+"=1")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	testenv.Eventually(t, 20*time.Second, "gateway listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/d", strings.NewReader("{}"))
		req.Header.Set("X-Event-Id", "evt_third_sigterm")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-received:
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery in flight; gateway output:\n%s", logs)
	}
	pg.Hang()
	signalAndWait := func(what, logged string) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, what, func() bool { return strings.Contains(logs.String(), logged) })
	}
	signalAndWait("the drain begun", "stop signal: draining")
	signalAndWait("the drain abandoned", "second stop signal")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Fatalf("after a third SIGTERM: %v, want killed by it; gateway output:\n%s", waitErr, logs)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("still running 2s after a third SIGTERM; gateway output:\n%s", logs)
	}
}
