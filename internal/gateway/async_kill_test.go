package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func TestAsyncKilledMidAttemptIsDeliveredAgainWithTheSameKey(t *testing.T) {
	bin := buildGateway(t)
	c := sharedCluster(t)
	var mu sync.Mutex
	var keys, sent []string
	up := firstCopyHangs(t, func(r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		sent = append(sent, r.Header.Get("Hookstamp-Attempt"))
		mu.Unlock()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	proc := startProcess(t, bin, addr, c.processYAML(processConfig{addr: addr, upstream: up.URL, timeout: 3 * time.Second,
		route: "    delivery: async\n    async: {backoff: {initial: 10ms, max: 100ms}}\n"}))
	resp, err := client.Post("http://"+addr+"/hooks", "application/json", strings.NewReader(`{"id":"evt_kill"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("intake answered %d, want 202", resp.StatusCode)
	}
	testenv.Eventually(t, 10*time.Second, "the first attempt to reach the upstream", func() bool { return up.count("evt_kill") == 1 })
	if err := proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}

	// Another replica rescues the job once upstream.timeout and its margin
	// have passed, and delivers it once more.
	cfg := c.replicaConfig(t, up.URL, "store")
	cfg.Routes[0].Delivery = "async"
	cfg.Routes[0].Upstream.Timeout = 3 * time.Second
	replica := startGatewayWith(t, cfg, asyncOptions(t))
	var rec *idempotency.Record
	testenv.Eventually(t, 90*time.Second, "the rescued delivery recorded", func() bool {
		r, err := replica.Ledger().Lookup(t0ctx, idempotency.Ref{Route: "hooks", Key: "evt_kill"})
		rec = r
		return err == nil && r.State == idempotency.StateDone
	})
	if string(rec.Body) != `{"copy":2}` {
		t.Fatalf("recorded %q, want the second copy's answer", rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != "evt_kill" || keys[1] != "evt_kill" {
		t.Fatalf("upstream got %q, want the same key twice (the lost attempt and the rescue)", keys)
	}
	assertLostThenDelivered(t, replica, idempotency.Ref{Route: "hooks", Key: "evt_kill"}, sent)
}

// assertLostThenDelivered checks ref's timeline: the killed replica's
// attempt as interrupted, then the rescue's answer, numbered as the
// upstream saw them in Hookstamp-Attempt.
func assertLostThenDelivered(t *testing.T, g *Gateway, ref idempotency.Ref, sent []string) {
	t.Helper()
	atts, err := g.Ledger().Attempts(t0ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 2 {
		t.Fatalf("ledger holds %d attempts (%+v), want the lost one and the rescue", len(atts), atts)
	}
	lost, rescue := atts[0], atts[1]
	if lost.Attempt != 1 || lost.Status != 0 || !strings.HasPrefix(lost.Error, "interrupted: ") || lost.Replica == "" {
		t.Errorf("first attempt %+v, want number 1, no status, an interrupted error and the killed replica", lost)
	}
	if rescue.Attempt != 2 || rescue.Status != http.StatusOK || rescue.Error != "" || rescue.StartedAt.Before(lost.StartedAt) {
		t.Errorf("second attempt %+v, want number 2 answered 200 after the lost one", rescue)
	}
	if strings.Join(sent, ",") != "1,2" {
		t.Errorf("upstream saw Hookstamp-Attempt %q, want 1 then 2", sent)
	}
}
