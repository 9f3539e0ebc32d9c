package redisscreen

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func BenchmarkClaim(b *testing.B) {
	addr, prefix := testenv.RedisPrefix(b)
	s := newTB(b, Options{Addrs: []string{addr}, Prefix: prefix, MaxCachedBody: 64 << 10})
	ctx := context.Background()
	b.Run("acquire", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c, err := s.Claim(ctx, idempotency.ClaimRequest{
				Ref: idempotency.Ref{Route: "r", Key: "acq-" + strconv.Itoa(i)}, Owner: "a", Lease: 2 * time.Second,
			})
			if err != nil || c.Status != idempotency.Acquired {
				b.Fatal(c.Status, err)
			}
		}
	})
	b.Run("done-hit", func(b *testing.B) {
		ref := idempotency.Ref{Route: "r", Key: "done"}
		if err := s.Complete(ctx, ref, "a", codecSample(), time.Hour); err != nil {
			b.Fatal(err)
		}
		req := idempotency.ClaimRequest{Ref: ref, Owner: "b", Lease: time.Second}
		b.ReportAllocs()
		for b.Loop() {
			if c, err := s.Claim(ctx, req); err != nil || c.Status != idempotency.Done {
				b.Fatal(c.Status, err)
			}
		}
	})
}

// BenchmarkWaitWake measures how soon a waiting repeat learns that the
// first delivery completed, with the pub/sub subscription and with the
// poll alone, and how many state checks (Redis round trips) each wait
// costs. The first delivery takes 20ms to 1s; run it with
// -benchtime=8x. Results are in the Wait doc comment.
func BenchmarkWaitWake(b *testing.B) {
	works := []time.Duration{20 * time.Millisecond, 120 * time.Millisecond, 400 * time.Millisecond, time.Second}
	for _, mode := range []struct {
		name     string
		pollOnly bool
	}{{"pubsub", false}, {"poll", true}} {
		b.Run(mode.name, func(b *testing.B) {
			addr, prefix := testenv.RedisPrefix(b)
			s := newTB(b, Options{Addrs: []string{addr}, Prefix: prefix, PollOnly: mode.pollOnly})
			ctx := context.Background()
			var (
				wake   time.Duration
				checks int64
				n      int
			)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ref := idempotency.Ref{Route: "r", Key: "w" + strconv.Itoa(i)}
				if _, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "a", Lease: time.Minute}); err != nil {
					b.Fatal(err)
				}
				before := s.helds.Load()
				done := make(chan time.Time, 1)
				go func() {
					if err := s.Wait(ctx, ref, "a"); err != nil {
						b.Error(err)
					}
					done <- time.Now()
				}()
				time.Sleep(works[i%len(works)]) // the first delivery's upstream call
				completed := time.Now()
				if err := s.Complete(ctx, ref, "a", codecSample(), time.Minute); err != nil {
					b.Fatal(err)
				}
				wake += max((<-done).Sub(completed), 0)
				checks += s.helds.Load() - before
				n++
			}
			b.ReportMetric(float64(wake.Microseconds())/float64(n), "µs-to-wake")
			b.ReportMetric(float64(checks)/float64(n), "checks/wait")
		})
	}
}
