package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookstamp/hookstamp/internal/config"
)

func TestBackoffStaysWithinItsBoundsAndHonoursRetryAfter(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: time.Second}
	tests := []struct {
		name       string
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{"first retry: up to initial", 1, 0, 0, 10 * time.Millisecond},
		{"fourth: up to initial·2³", 4, 0, 0, 80 * time.Millisecond},
		{"late: capped at max", 40, 0, 0, time.Second},
		{"past 63 doublings: capped at max", 200, 0, 0, time.Second},
		{"Retry-After waited for", 1, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond},
		{"Retry-After capped at max", 1, time.Hour, time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 1000 {
				if d := b.next(tt.n, tt.retryAfter); d < tt.lo || d > tt.hi {
					t.Fatalf("next(%d, %v) = %v, want within [%v, %v]", tt.n, tt.retryAfter, d, tt.lo, tt.hi)
				}
			}
		})
	}
}

func TestBackoffJittersOverTheWholeWindow(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Second}
	var low, high bool
	for range 1000 {
		d := b.next(1, 0)
		low = low || d < 100*time.Millisecond
		high = high || d > 900*time.Millisecond
	}
	if !low || !high {
		t.Fatalf("full jitter should reach both ends of [0, 1s]: low %v high %v", low, high)
	}
}

func TestRetryAfterReadsSecondsAndDates(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"120", 2 * time.Minute},
		{"-1", 0},
		{"soon", 0},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.value != "" {
			h.Set("Retry-After", tt.value)
		}
		if got := retryAfter(h, now); got != tt.want {
			t.Errorf("Retry-After %q = %v, want %v", tt.value, got, tt.want)
		}
	}
}

func TestQueueNamesAreRiverValid(t *testing.T) {
	fits := strings.Repeat("a", 58) // "route_" and 58: River's 64
	tests := []struct{ route, want string }{
		{"github", "route_github"},
		{"pay-in_eu", "route_pay-in_eu"},
		{fits, "route_" + fits},
		// Queued jobs keep the queue they were inserted in: these must not change.
		{"a__b", "route_" + digest("a__b", 8)},
		{"a__" + fits, "route_" + digest("a__"+fits, 8)},
	}
	for _, tt := range tests {
		if got := QueueName(tt.route); got != tt.want {
			t.Errorf("QueueName(%q) = %q, want %q", tt.route, got, tt.want)
		}
	}
	long := strings.Repeat("b", 64)
	odd := []string{"a__b", "-x", "x-", "a-_b", fits + "b", long, long[:63] + "c", QueueName(long)[len("route_"):]}
	seen := map[string]string{}
	for _, route := range odd {
		got := QueueName(route)
		if !queueNameOK.MatchString(got) || len(got) > 64 {
			t.Errorf("QueueName(%q) = %q, not a River queue name", route, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("QueueName(%q) = QueueName(%q) = %q", route, other, got)
		}
		seen[got] = route
	}
}

func TestConfigConcurrencyLimitIsRivers(t *testing.T) {
	if config.MaxConcurrency != river.QueueNumWorkersMax {
		t.Fatalf("config.MaxConcurrency = %d, River's QueueNumWorkersMax = %d", config.MaxConcurrency, river.QueueNumWorkersMax)
	}
}

// digest is the first n bytes of name's SHA-256, in hex.
func digest(name string, n int) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:n])
}
