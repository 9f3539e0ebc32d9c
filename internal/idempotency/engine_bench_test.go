package idempotency_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// benchEngine is the embedded default: the memory screen, SQLite in a
// temporary directory, the local cache.
func benchEngine(b *testing.B) *idempotency.Engine {
	b.Helper()
	l := sqliteLedger(b)
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	b.Cleanup(s.Close)
	e := newEngine(b, idempotency.Options{Screen: s, Ledger: l, Cache: idempotency.NewCache(32<<20, 64<<10, 0)})
	return e
}

var benchPolicy = &idempotency.Policy{Route: "r", Final: idempotency.DefaultFinal, KeepHeaders: []string{"Content-Type"},
	MaxBody: 1 << 20, Retention: time.Hour, WaitTimeout: 10 * time.Second}

func benchForward(context.Context) (*idempotency.Upstream, error) {
	return &idempotency.Upstream{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"received":true}`)}, nil
}

// BenchmarkHandleUnique is a first delivery through the state machine:
// claim in the screen, confirm in the ledger, forward (a function that
// answers at once), commit (SQLite, group commit), complete; 16 at once.
func BenchmarkHandleUnique(b *testing.B) {
	e := benchEngine(b)
	fp := []byte("0123456789abcdef0123456789abcdef")
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_" + strconv.FormatInt(n.Add(1), 10)}, Fingerprint: fp}
			if r := e.Handle(ctx, benchPolicy, d, benchForward); r.Outcome != idempotency.Forwarded {
				b.Errorf("outcome %s: %v", r.Outcome, r.Err)
				return
			}
		}
	})
}

// BenchmarkHandleRepeat is a repeat of a recorded delivery answered from
// the local cache: no screen, ledger or upstream call.
func BenchmarkHandleRepeat(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_1"}, Fingerprint: []byte("0123456789abcdef0123456789abcdef")}
	if r := e.Handle(ctx, benchPolicy, d, benchForward); r.Outcome != idempotency.Forwarded {
		b.Fatalf("first delivery: %s %v", r.Outcome, r.Err)
	}
	fail := func(context.Context) (*idempotency.Upstream, error) {
		b.Error("a repeat was forwarded")
		return nil, context.Canceled
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := e.Handle(ctx, benchPolicy, d, fail); r.Outcome != idempotency.Replayed {
			b.Fatalf("outcome %s", r.Outcome)
		}
	}
}
