package idempotency

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// fullCache is a 32 MiB cache (screen.local_cache's default) filled with
// entries shaped like the load benchmark's: a 38-byte JSON receipt, one
// kept header, a SHA-256 fingerprint, trace and span ids. With
// uniqueHeaders each entry keeps a header of its own as well (a request id),
// so that header maps cannot be shared.
func fullCache(tb testing.TB, budget int, uniqueHeaders bool) (*Cache, []Ref) {
	tb.Helper()
	c := NewCache(budget, 64<<10, time.Hour)
	var refs []Ref
	full := 0 // entries put when the first shard filled
	for i := 0; full == 0 || len(refs) < 2*full; i++ {
		ref := Ref{Route: "hooks", Key: "evt_" + strconv.FormatInt(int64(i)*7919, 16) + "a1b2c3d4e5f6"}
		hdr := map[string]string{"Content-Type": "application/json"}
		if uniqueHeaders {
			hdr["X-Request-Id"] = "req_" + strconv.Itoa(i)
		}
		c.Put(ref, &Entry{
			Response: Response{Status: 200, Headers: hdr,
				Body: []byte(`{"received":true,"id":"rcpt_0123456"}` + "\n")},
			BodyCached: true, Fingerprint: make([]byte, 32),
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		}, c.Ticket())
		refs = append(refs, ref)
		if full == 0 && c.Len() < len(refs) {
			// The first eviction. Keys fall on shards unevenly, so the
			// others are not full yet: put as many again to fill them.
			full = len(refs)
		}
	}
	cached := refs[:0]
	for _, ref := range refs {
		if _, ok := c.Get(ref); ok {
			cached = append(cached, ref)
		}
	}
	return c, cached
}

// BenchmarkCacheGC is what a full local cache costs each garbage
// collection: the collector marks every pointer the entries hold, every
// cycle, and with unique deliveries arriving a cycle runs every fraction of
// a second.
func BenchmarkCacheGC(b *testing.B) {
	c, refs := fullCache(b, 32<<20, false)
	for b.Loop() {
		runtime.GC()
	}
	b.ReportMetric(float64(len(refs)), "entries")
	runtime.KeepAlive(c)
}

// BenchmarkCacheGet is a repeat's lookup in a full cache.
func BenchmarkCacheGet(b *testing.B) {
	c, refs := fullCache(b, 32<<20, false)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok := c.Get(refs[i%len(refs)]); !ok {
			b.Fatal("miss")
		}
		i += 7
	}
}
