package fiberidem

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// post sends a delivery with key and returns the answer's body.
func post(t *testing.T, addr, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hook", strings.NewReader(`{"id":"`+key+`"}`))
	req.Header.Set("X-Event-Id", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", key, resp.StatusCode, b)
	}
	return string(b)
}

func TestRepeatIsAnsweredFromRedisUnderThePrefix(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		if r.URL.Path != "/hook" {
			t.Errorf("upstream got path %q", r.URL.Path)
		}
		_, _ = w.Write([]byte(`{"n":` + string(rune('0'+n)) + `}`))
	}))
	defer up.Close()
	addr, prefix := testenv.RedisPrefix(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app, err := Start(ln, Options{Upstream: up.URL, RedisAddr: addr, Prefix: prefix, KeyHeader: "X-Event-Id", Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()

	first := post(t, ln.Addr().String(), "evt_1")
	again := post(t, ln.Addr().String(), "evt_1")
	other := post(t, ln.Addr().String(), "evt_2")
	if hits.Load() != 2 {
		t.Fatalf("upstream got %d deliveries, want 2 (the repeat answered by the middleware)", hits.Load())
	}
	if again != first || other == first {
		t.Fatalf("answers %q, %q, %q: want the repeat to get the first's", first, again, other)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	n, err := c.Exists(context.Background(), prefix+"evt_1", prefix+"evt_2").Result()
	if err != nil || n != 2 {
		t.Fatalf("keys under the prefix: %d, %v; want 2", n, err)
	}
}
