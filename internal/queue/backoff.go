package queue

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Backoff is an async route's retry schedule (async.backoff).
type Backoff struct {
	Initial, Max time.Duration
}

// next is the wait before the attempt after the n-th (n ≥ 1): exponential
// from Initial, capped at Max, with full jitter; an upstream's Retry-After
// is waited for, up to Max.
func (b Backoff) next(n int, retryAfter time.Duration) time.Duration {
	ceiling := b.Max
	if n < 63 {
		if d := b.Initial << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	wait := time.Duration(rand.Int64N(int64(ceiling) + 1))
	return max(wait, min(retryAfter, b.Max))
}

// retryAfter reads an answer's Retry-After: seconds or an HTTP date; 0
// when absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return time.Duration(min(s, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
