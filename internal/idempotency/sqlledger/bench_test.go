package sqlledger_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// BenchmarkCommit measures the commit of a delivery the screen claimed (no
// row yet): one conditional INSERT, with a 1 KiB body.
func BenchmarkCommit(b *testing.B) {
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			l := openLedger(b, d.options(b))
			ctx := context.Background()
			rec := doneRecord(ref(""), t0, t0.Add(time.Hour))
			rec.Body = make([]byte, 1024)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rec.Key = "evt_" + strconv.Itoa(i)
				if err := l.Commit(ctx, rec, "owner", t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimCommit is the ledger-claim path (screen "none"): claim,
// then commit by the owner.
func BenchmarkClaimCommit(b *testing.B) {
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			l := openLedger(b, d.options(b))
			ctx := context.Background()
			rec := doneRecord(ref(""), t0, t0.Add(time.Hour))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rec.Key = "evt_" + strconv.Itoa(i)
				c, err := l.Claim(ctx, claimReq(rec.Ref, "owner", time.Hour), t0)
				if err != nil || c.Status != idempotency.Acquired {
					b.Fatalf("claim: %v %v", c.Status, err)
				}
				if err := l.Commit(ctx, rec, "owner", t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLookup is the confirm step of every first delivery.
func BenchmarkLookup(b *testing.B) {
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			l := openLedger(b, d.options(b))
			ctx := context.Background()
			r := ref("evt_lookup")
			mustCommit(b, l, doneRecord(r, t0, t0.Add(time.Hour)), "owner", t0)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Lookup(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommitParallel is many deliveries committing at once (64
// goroutines), with group commit on (the default) and off: what a burst of
// unique deliveries costs the ledger.
func BenchmarkCommitParallel(b *testing.B) {
	for _, d := range drivers {
		for _, mode := range []struct {
			name  string
			batch int
		}{{"group", 0}, {"single", 1}} {
			b.Run(d.name+"/"+mode.name, func(b *testing.B) {
				o := d.options(b)
				o.CommitBatch = mode.batch
				o.MaxOpenConns = 16
				l := openLedger(b, o)
				ctx := context.Background()
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					rec := doneRecord(ref(""), t0, t0.Add(time.Hour))
					rec.Body = make([]byte, 512)
					for pb.Next() {
						rec.Key = "evt_" + strconv.FormatInt(n.Add(1), 10)
						if err := l.Commit(ctx, rec, "owner", t0); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkClaimCommitParallel is what a unique delivery asks of the
// ledger when claims are confirmed in it (screen.on_unavailable: store):
// a pending row, then the commit that settles it, from 64 deliveries at
// once, with batching off and with 1, 2 and 4 batch workers.
func BenchmarkClaimCommitParallel(b *testing.B) {
	for _, mode := range []struct {
		name           string
		batch, workers int
	}{{"single", 1, 0}, {"batch-1w", 0, 1}, {"batch-2w", 0, 2}, {"batch-4w", 0, 4}} {
		b.Run(mode.name, func(b *testing.B) {
			o := postgresOptions(b)
			o.CommitBatch, o.CommitWorkers, o.MaxOpenConns = mode.batch, mode.workers, 16
			l := openLedger(b, o)
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				rec := doneRecord(ref(""), t0, t0.Add(time.Hour))
				for pb.Next() {
					rec.Key = "evt_" + strconv.FormatInt(n.Add(1), 10)
					owner := rec.Key
					if c, err := l.Claim(ctx, claimReq(rec.Ref, owner, time.Hour), t0); err != nil || c.Status != idempotency.Acquired {
						b.Errorf("claim: %v %v", c.Status, err)
						return
					}
					if err := l.Commit(ctx, rec, owner, t0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLookupParallel is the confirm step of many first deliveries at
// once (64 goroutines, half the keys recorded), unbatched and batched with
// 1, 2 and 4 workers.
func BenchmarkLookupParallel(b *testing.B) {
	for _, mode := range []struct {
		name           string
		batch, workers int
	}{{"single", 1, 0}, {"batch-1w", 0, 1}, {"batch-2w", 0, 2}, {"batch-4w", 0, 4}} {
		b.Run(mode.name, func(b *testing.B) {
			o := postgresOptions(b)
			o.LookupBatch, o.LookupWorkers, o.MaxOpenConns = mode.batch, mode.workers, 16
			l := openLedger(b, o)
			ctx := context.Background()
			for i := range 1000 {
				mustCommit(b, l, doneRecord(ref("evt_"+strconv.Itoa(2*i)), t0, t0.Add(time.Hour)), "owner", t0)
			}
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.Lookup(ctx, ref("evt_"+strconv.FormatInt(n.Add(1)%2000, 10))); err != nil && !errors.Is(err, idempotency.ErrNotFound) {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
