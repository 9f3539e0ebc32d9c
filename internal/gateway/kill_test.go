package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// buildGateway builds cmd/gateway into the test's temporary directory.
func buildGateway(tb testing.TB) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("go not on PATH: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "gateway")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/hookstamp/hookstamp/cmd/gateway").CombinedOutput()
	if err != nil {
		tb.Fatalf("go build cmd/gateway: %v\n%s", err, out)
	}
	return bin
}

// firstCopyHangs is an upstream that tells arrived of every request and
// never answers the first copy of a key before the gateway forwarding it
// dies (or the test ends); later copies get {"copy":N}.
func firstCopyHangs(tb testing.TB, arrived func(r *http.Request)) *upstream {
	hold := make(chan struct{})
	up := newUpstream(tb)
	tb.Cleanup(func() { close(hold) })
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		arrived(r)
		if n == 1 {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	return up
}

// gatewayProcess is the real binary serving a configuration file.
type gatewayProcess struct {
	cmd  *exec.Cmd
	logs *testenv.Buffer
}

// startProcess runs bin serve -config with yaml and waits until it accepts
// connections on addr. It is killed when the test ends; its logs are
// printed if the test failed.
func startProcess(tb testing.TB, bin, addr, yaml string) *gatewayProcess {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := &gatewayProcess{logs: &testenv.Buffer{}}
	p.cmd = exec.Command(bin, "serve", "-config", path)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start gateway: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-exited
		if tb.Failed() {
			tb.Logf("gateway process output:\n%s", p.logs.String())
		}
	})
	testenv.Eventually(tb, 15*time.Second, "the gateway process to listen on "+addr, func() bool {
		select {
		case <-exited:
			tb.Fatalf("gateway process exited before listening:\n%s", p.logs.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return p
}

// processConfig is what differs between the configuration files of the
// gateway processes these tests kill.
type processConfig struct {
	addr     string // server.listen
	upstream string // the route forwards to upstream/up
	timeout  time.Duration
	lease    time.Duration // > 0: the cluster's Redis screen, no local cache
	route    string        // YAML the route adds, indented as its keys
}

// processYAML is a gateway process's configuration file on the cluster's
// ledger: one route, hooks at /hooks, keyed by the body's id.
func (c cluster) processYAML(p processConfig) string {
	screen := ""
	if p.lease > 0 {
		screen = fmt.Sprintf(`screen:
  driver: redis
  redis:
    addrs: [%q]
  prefix: %q
  lease: %s
  local_cache: 0
`, c.addrs[0], c.prefix, p.lease)
	}
	return fmt.Sprintf(`
server:
  listen: %q
admin:
  listen: ""
store:
  driver: postgres
  dsn: %q
%stelemetry:
  log: {level: warn, format: text}
routes:
  - name: hooks
    path: /hooks
%s    upstream:
      url: %s/up
      timeout: %s
    key:
      sources:
        - json: id
`, p.addr, c.dsn, screen, p.route, p.upstream, p.timeout)
}

// A replica process killed with SIGKILL while its upstream call is in
// flight: nothing of the delivery is recorded, its claim expires with its
// lease, and the provider's retry (to another replica) is forwarded once
// more with the same Idempotency-Key, then recorded once (SPEC §6).
func TestReplicaKilledMidForward(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	c := sharedCluster(t)

	type arrival struct {
		at  time.Time
		key string
	}
	var (
		mu       sync.Mutex
		arrivals []arrival
	)
	up := firstCopyHangs(t, func(r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, arrival{time.Now(), r.Header.Get("Idempotency-Key")})
		mu.Unlock()
	})

	const lease = 2 * time.Second
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	proc := startProcess(t, bin, addr, c.processYAML(processConfig{addr: addr, upstream: up.URL, timeout: 1500 * time.Millisecond, lease: lease}))

	// The provider's first delivery, to the process.
	delivered := make(chan error, 1)
	go func() {
		resp, err := client.Post("http://"+addr+"/hooks", "application/json", strings.NewReader(`{"id":"evt_kill"}`))
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the killed gateway answered %d", resp.StatusCode)
		}
		delivered <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the first copy to reach the upstream", func() bool { return up.count("evt_kill") == 1 })
	if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	if err := <-delivered; err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("the provider's first delivery should have failed with the process: %v", err)
	}

	// Nothing half-written: the dead replica's claim (a pending row beside
	// its screen entry) holds no response that could be replayed.
	replica := startGateway(t, c.replicaConfig(t, up.URL, "store"))
	rec, err := replica.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_kill"})
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
	case err != nil:
		t.Fatalf("ledger lookup: %v", err)
	case rec.State != idempotency.StatePending || rec.Status != 0 || len(rec.Body) != 0:
		t.Fatalf("the killed replica left a %s row with status %d and %d body bytes, want at most a pending claim", rec.State, rec.Status, len(rec.Body))
	}

	// The provider retries on another replica: it waits out the lease,
	// takes the key over and forwards it once more.
	retry := send(t, replica, "/hooks", `{"id":"evt_kill"}`)
	wantOutcome(t, retry, 200, "forwarded")
	if string(retry.body) != `{"copy":2}` {
		t.Fatalf("retry answered %q, want the upstream's answer to the second copy", retry.body)
	}
	mu.Lock()
	got := append([]arrival(nil), arrivals...)
	mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("upstream received %d copies, want 2 (the lost one and the takeover)", len(got))
	}
	for i, a := range got {
		if a.key != "evt_kill" {
			t.Fatalf("copy %d carried Idempotency-Key %q, want evt_kill", i+1, a.key)
		}
	}
	if gap := got[1].at.Sub(got[0].at); gap < lease-300*time.Millisecond {
		t.Fatalf("second copy forwarded %v after the first, before the %v lease expired", gap, lease)
	}

	rec = lookup(t, replica, "hooks", "evt_kill")
	if rec.State != idempotency.StateDone || rec.Status != 200 || string(rec.Body) != `{"copy":2}` {
		t.Fatalf("ledger row %s %d %q, want done with the second copy's answer", rec.State, rec.Status, rec.Body)
	}
	again := send(t, replica, "/hooks", `{"id":"evt_kill"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, retry, again)
	if n := up.count("evt_kill"); n != 2 {
		t.Fatalf("upstream received %d copies after the replay, want 2", n)
	}
}
