package loadbench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// N0 forwards to the upstream's /hook over kept connections, and its
// workers' CPU is counted with the master's.
func TestNginxForwardsOverKeptUpstreamConnections(t *testing.T) {
	bin := nginxBinary(t.Logf)
	if bin == "" {
		t.Skip("nginx is not installed and cannot be installed here (not root, no apt-get, or " + noInstallEnv + " set)")
	}
	var conns, hits atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/hook" {
			t.Errorf("upstream got path %q", r.URL.Path)
		}
		_, _ = w.Write([]byte(`{"received":true}`))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartNginx(ctx, bin, t.TempDir(), "n0", up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	for i := range 20 {
		resp, err := http.Post("http://"+c.Addr+"/hook", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"received":true}` {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if hits.Load() != 20 {
		t.Fatalf("upstream got %d requests, want 20", hits.Load())
	}
	// Sequential requests need one kept connection per worker at most.
	if n := conns.Load(); n > 4 {
		t.Fatalf("nginx opened %d upstream connections for 20 sequential requests: keep-alive is off", n)
	}
	master, _ := SampleProc(c.PID())
	tree, err := c.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if tree.RSS <= master.RSS {
		t.Fatalf("tree RSS %d not above the master's %d: the workers are not counted", tree.RSS, master.RSS)
	}
}
