package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
)

// depStatus is one dependency in the /readyz answer.
type depStatus struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// readyz asks every dependency concurrently, each within ReadyTimeout:
// 200 when all answer, else 503. Errors are summarised ("unreachable",
// "no answer in time", or an error's own ReadyText), never shown: a
// driver's error may quote its DSN.
// ?optional=screen (names, comma-separated) reports those members without
// letting them fail the answer: a replica that serves every delivery
// while Redis is down (screen.on_unavailable: store) stays in rotation.
// A shutting-down server is never optional.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	optional := map[string]bool{}
	for _, v := range r.URL.Query()["optional"] {
		for name := range strings.SplitSeq(v, ",") {
			optional[strings.TrimSpace(name)] = true
		}
	}
	delete(optional, "server")
	out := make(map[string]depStatus, len(s.o.Checks))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, c := range s.o.Checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), s.o.ReadyTimeout)
			defer cancel()
			st := depStatus{OK: true}
			if err := c.Ping(ctx); err != nil {
				s.o.Logger.DebugContext(ctx, "readyz: dependency not ready", "dependency", c.Name, "err", err)
				st = depStatus{Error: "unreachable"}
				var shown interface{ ReadyText() string }
				if errors.As(err, &shown) {
					st.Error = shown.ReadyText()
				}
				if c.Show {
					st.Error = err.Error()
				} else if ctx.Err() != nil {
					st.Error = "no answer in time"
				}
			}
			mu.Lock()
			out[c.Name] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	if s.o.Draining != nil && s.o.Draining() {
		out["server"] = depStatus{Error: "shutting down"}
	}
	status := http.StatusOK
	for name, st := range out {
		if !st.OK && !optional[name] {
			status = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, status, out)
}
