package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
)

// A client that opens many connections, each declaring a body as large as
// server.body_limit and sending only its first bytes, makes the gateway
// hold what arrived, not what was promised: a slow-body flood cannot make a
// replica reserve connections × body_limit. Once the bodies do arrive,
// every delivery is forwarded once.
//
// Not parallel: it reads the process's heap, which parallel tests of this
// package would grow (Go runs them only after the sequential ones).
func TestPromisedBodiesReserveNoMemory(t *testing.T) {
	const conns, limit = 32, 4 << 20
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), "", "")
	cfg.Server.BodyLimit = config.Size(limit)
	cfg.Server.ReadTimeout = time.Minute
	cfg.Routes[0].Upstream.Timeout = 30 * time.Second // 4 MiB each to the upstream, under -race
	g := startGateway(t, cfg)

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// Each body is as large as the limit allows, its key at the end: the
	// gateway must read it all. The bodies share their padding, so that
	// the test's own heap does not grow with them.
	tail := func(i int) string { return fmt.Sprintf(`","id":"evt_promise_%02d"}`, i) }
	pad := `{"pad":"` + strings.Repeat("x", limit-len(`{"pad":"`)-len(tail(0)))
	const sent = 64 << 10
	base := heap()
	open := make([]net.Conn, conns)
	for i := range open {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		open[i] = c
		head := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", limit)
		// The header and the first 64 KiB: past any prefetch the server
		// makes, so the request has reached whoever reads its body.
		if _, err := io.WriteString(c, head+pad[:sent]); err != nil {
			t.Fatal(err)
		}
	}
	// Promised: conns × 4 MiB = 128 MiB. Received: conns × 64 KiB = 2 MiB.
	// Watched for a while, as the server reads what was sent.
	const most = 32 << 20
	var peak int64
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		peak = max(peak, int64(heap())-int64(base))
		if peak > most {
			t.Fatalf("with %d bodies of %d MiB promised and 64 KiB of each sent, the heap grew by %d MiB (at most %d MiB)",
				conns, limit>>20, peak>>20, most>>20)
		}
	}
	t.Logf("heap grew by at most %.1f MiB", float64(peak)/(1<<20))

	for i, c := range open {
		if _, err := io.WriteString(c, pad[sent:]+tail(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Hookstamp-Outcome") != "forwarded" {
			t.Fatalf("connection %d: %d %q, want 200 forwarded", i, resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
		}
	}
	for i := range conns {
		if n := up.count(fmt.Sprintf("evt_promise_%02d", i)); n != 1 {
			t.Fatalf("upstream received evt_promise_%02d %d times, want 1", i, n)
		}
	}
}
