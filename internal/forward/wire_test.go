package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// failingConn refuses every write while fail is set, writing nothing.
type failingConn struct {
	net.Conn
	fail *atomic.Bool
}

func (c *failingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, syscall.EPIPE
	}
	return c.Conn.Write(p)
}

// A reused connection whose very first write fails sent nothing: the error
// is ErrUnreachable (safe to release), not the ambiguous ErrNoAnswer, and
// the upstream never sees the delivery.
func TestDoNothingWrittenIsUnreachable(t *testing.T) {
	var got atomic.Int64
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Test-Id") == "refused" {
			got.Add(1)
		}
	}))
	defer u.Close()

	for _, body := range [][]byte{[]byte(`{"a":1}`), nil} {
		var fail atomic.Bool
		f := New(Options{})
		var d net.Dialer
		f.dialTCP = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &failingConn{Conn: c, fail: &fail}, nil
		}
		send := func(id string) error {
			_, err := f.Do(context.Background(), &Request{
				Method: http.MethodPost, URL: u.URL, Body: body, Timeout: 5 * time.Second,
				Header: http.Header{"X-Test-Id": {id}}, KeyHeader: "Idempotency-Key", Key: id,
			})
			return err
		}
		if err := send("warm"); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		fail.Store(true)
		err := send("refused")
		f.Close()
		if !errors.Is(err, ErrUnreachable) || Ambiguous(err) {
			t.Errorf("body %q: Do error = %v, want unambiguous ErrUnreachable", body, err)
		}
	}
	if n := got.Load(); n != 0 {
		t.Errorf("upstream got %d failed deliveries, want 0", n)
	}
}
