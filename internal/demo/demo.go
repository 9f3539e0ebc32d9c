// Package demo is a tiny upstream for trying hookstamp out: it logs every
// request it receives and answers with a small JSON receipt, so that a
// newcomer can watch the upstream see each event once while repeats are
// replayed by the gateway.
package demo

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Upstream counts and logs what it receives.
type Upstream struct {
	log      *slog.Logger
	received atomic.Int64
	srv      *http.Server
}

// New returns a demo upstream that logs to log.
func New(log *slog.Logger) *Upstream {
	u := &Upstream{log: log}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	return u
}

// Serve serves on ln until Close.
func (u *Upstream) Serve(ln net.Listener) error {
	err := u.srv.Serve(ln)
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

// Close stops the server.
func (u *Upstream) Close() error { return u.srv.Close() }

// Received is the number of requests served.
func (u *Upstream) Received() int64 { return u.received.Load() }

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	n := u.received.Add(1)
	key := r.Header.Get("Idempotency-Key")
	u.log.Info("demo upstream received a delivery",
		"n", n, "method", r.Method, "path", r.URL.Path, "idempotency_key", key, "bytes", len(body))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"received":        n,
		"idempotency_key": key,
		"processed_at":    time.Now().UTC().Format(time.RFC3339Nano),
	})
}
