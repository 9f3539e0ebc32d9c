package loadbench

import (
	"math"
	"math/bits"
	"time"
)

// Hist is a log-linear latency histogram in the manner of HdrHistogram:
// values (nanoseconds) below 128 have a bucket each; above, every power of
// two is split into 64 linear buckets, so a reported percentile is within
// 1/64 (1.6%) of the true value, from 1ns to over an hour, in a fixed
// 16 KiB. Percentiles report the highest value of their bucket (as
// HdrHistogram's highestEquivalentValue does): never optimistic.
//
// A Hist is not safe for concurrent use: each load worker keeps its own and
// they are merged at the end.
type Hist struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
	sum    float64
}

const (
	histSubBits = 7 // 128 sub-buckets: 64 per power of two above 128
	histHalf    = 1 << (histSubBits - 1)
	histBuckets = (1 << histSubBits) + 36*histHalf // to 2^42 ns (73 min)
)

// bucketOf maps a value to its bucket index.
func bucketOf(v int64) int {
	if v < 1<<histSubBits {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - histSubBits // >= 1
	m := int(uint64(v) >> uint(e))           // in [64, 127]
	i := (1 << histSubBits) + (e-1)*histHalf + (m - histHalf)
	if i >= histBuckets {
		return histBuckets - 1
	}
	return i
}

// bucketHigh is the highest value that maps to bucket i.
func bucketHigh(i int) int64 {
	if i < 1<<histSubBits {
		return int64(i)
	}
	j := i - (1 << histSubBits)
	e := j/histHalf + 1
	m := int64(j%histHalf + histHalf)
	return (m+1)<<uint(e) - 1
}

// Record adds one latency.
func (h *Hist) Record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	if v > h.max {
		h.max = v
	}
}

// Merge adds o's values to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of values recorded.
func (h *Hist) Count() uint64 { return h.n }

// Max is the largest value recorded.
func (h *Hist) Max() time.Duration { return time.Duration(h.max) }

// Mean is the average value.
func (h *Hist) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value at quantile q (0.99 = p99): the highest value
// of the bucket holding the ceil(q*n)-th smallest value, capped at Max.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}
