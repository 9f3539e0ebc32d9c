package loadbench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every value lands in a bucket whose upper bound is at or above it and
// within 1/64 of it: percentiles are never optimistic and at most 1.6% high.
func TestHistBucketBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		v := int64(r.ExpFloat64() * 5e6)
		i := bucketOf(v)
		hi := bucketHigh(i)
		if hi < v {
			t.Fatalf("value %d: bucket %d ends at %d, below it", v, i, hi)
		}
		if v >= 128 && float64(hi-v) > float64(v)/64 {
			t.Fatalf("value %d: bucket %d ends at %d, more than 1/64 above", v, i, hi)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Fatalf("value %d: previous bucket %d already covers it", v, i-1)
		}
	}
}

// Quantiles match the exact order statistic within the bucket precision,
// and merging per-worker histograms equals recording into one.
func TestHistQuantilesAgreeWithSortedValues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b, all Hist
	var vals []int64
	for i := range 100000 {
		d := time.Duration(50_000 + r.ExpFloat64()*2e6)
		vals = append(vals, int64(d))
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		idx := int(float64(len(vals))*q+0.999999) - 1
		exact := vals[max(idx, 0)]
		got := a.Quantile(q)
		if int64(got) < exact || float64(int64(got)-exact) > float64(exact)/64 {
			t.Errorf("q%.3f: got %v, exact %v", q, got, time.Duration(exact))
		}
		if got != all.Quantile(q) {
			t.Errorf("q%.3f: merged %v != single %v", q, got, all.Quantile(q))
		}
	}
	if a.Count() != 100000 || a.Max() != time.Duration(vals[len(vals)-1]) {
		t.Errorf("count %d max %v", a.Count(), a.Max())
	}
}
