package gateway

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// An upstream whose kept headers are large and differ from answer to
// answer (here a 16 KiB Location naming each receipt; an upstream that
// echoes what the sender sent into one does the same) grows the gateway
// by no more than screen.local_cache: 1 100 deliveries on a 1 MiB cache
// leave a few MiB of heap, not the ~35 MiB that the cache's table of
// shared header sets kept uncharged for the process's lifetime.
//
// Not parallel: it reads the process's heap.
func TestLargeUniqueKeptHeadersStayWithinLocalCache(t *testing.T) {
	const deliveries, budget = 1100, 1 << 20
	pad := strings.Repeat("r", 16<<10)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/receipts/"+r.Header.Get("Idempotency-Key")+"/"+pad)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ok":true}`)
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "    record:\n      headers: [Content-Type, Location]",
		"screen:\n  local_cache: 1MiB")
	g := startGateway(t, cfg)

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// Warm up connections, pools and the ledger before the baseline.
	for i := range 20 {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":"evt_warm_%d"}`, i)), 201, "forwarded")
	}
	base := heap()
	for i := range deliveries {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":"evt_loc_%05d"}`, i)), 201, "forwarded")
	}
	// The last answers are still cached and replayed whole.
	last := fmt.Sprintf(`{"id":"evt_loc_%05d"}`, deliveries-1)
	r := send(t, g, "/hooks", last)
	wantOutcome(t, r, 201, "replayed")
	if !strings.HasSuffix(r.header.Get("Location"), pad) {
		t.Fatalf("replayed Location is %d bytes, want the recorded one", len(r.header.Get("Location")))
	}
	grew := int64(heap()) - int64(base)
	t.Logf("%d deliveries with a 16 KiB Location each: heap grew by %.1f MiB (local_cache %d MiB)",
		deliveries, float64(grew)/(1<<20), budget>>20)
	if grew > 4*budget {
		t.Fatalf("heap grew by %.1f MiB after %d deliveries, past a local_cache of %d MiB",
			float64(grew)/(1<<20), deliveries, budget>>20)
	}
	runtime.KeepAlive(g)
}
