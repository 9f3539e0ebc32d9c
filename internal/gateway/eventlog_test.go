package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

func attemptsOf(tb testing.TB, g *Gateway, key string) []idempotency.Attempt {
	tb.Helper()
	got, err := g.Ledger().Attempts(context.Background(), idempotency.Ref{Route: "hooks", Key: key})
	if err != nil {
		tb.Fatalf("attempts of %s: %v", key, err)
	}
	return got
}

func storedRequestOf(tb testing.TB, g *Gateway, key string) *idempotency.Request {
	tb.Helper()
	got, err := g.Ledger().Request(context.Background(), idempotency.Ref{Route: "hooks", Key: key})
	if err != nil {
		tb.Fatalf("stored request of %s: %v", key, err)
	}
	return got
}

// With record.request, a released 502 and the forward recorded after it
// are both attempts of the record, which holds the request as forwarded
// (credentials and hop-by-hop headers left out); a replay adds none.
func TestRecordRequestKeepsRequestAndAttempts(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		})
		g := startGateway(t, s.config(t, up.URL, "    record: {request: true}", ""))
		hdr := []string{"X-Event-Id", "evt_1", "X-Signature", "sig=1", "Authorization", "Bearer secret",
			"Cookie", "session=1", "Connection", "X-Hop", "X-Hop", "1"}
		body := `{"id":"evt_1","amount":42}`

		wantOutcome(t, send(t, g, "/hooks?mode=live", body, hdr...), http.StatusBadGateway, "released")
		if got := attemptsOf(t, g, "evt_1"); len(got) != 1 || got[0].Status != http.StatusBadGateway {
			t.Fatalf("after the 502: attempts %+v, want one with status 502", got)
		}
		wantOutcome(t, send(t, g, "/hooks?mode=live", body, hdr...), http.StatusOK, "forwarded")
		wantOutcome(t, send(t, g, "/hooks?mode=live", body, hdr...), http.StatusOK, "replayed")
		if n := up.count("evt_1"); n != 2 {
			t.Fatalf("upstream received evt_1 %d times, want 2", n)
		}

		got := attemptsOf(t, g, "evt_1")
		host := replicaName()
		if len(got) != 2 || got[0].Attempt != 1 || got[0].Status != 502 || got[1].Attempt != 2 || got[1].Status != 200 {
			t.Fatalf("attempts = %+v, want 1: 502, 2: 200", got)
		}
		if got[1].Replica != host || got[1].Error != "" || got[1].StartedAt.Before(got[0].StartedAt) {
			t.Errorf("attempt 2 = %+v, want replica %q, no error, after attempt 1", got[1], host)
		}
		req := storedRequestOf(t, g, "evt_1")
		if req == nil {
			t.Fatal("no request stored")
		}
		if req.Method != http.MethodPost || req.Path != "/up?mode=live" || string(req.Body) != body {
			t.Errorf("stored request = %s %s %q, want POST /up?mode=live %q", req.Method, req.Path, req.Body, body)
		}
		if req.Headers.Get("X-Signature") != "sig=1" || req.Headers.Get("X-Event-Id") != "evt_1" {
			t.Errorf("stored headers %v lack the delivery's own", req.Headers)
		}
		for _, name := range []string{"Authorization", "Cookie", "Connection", "X-Hop"} {
			if v, ok := req.Headers[name]; ok {
				t.Errorf("stored header %s = %q, want none", name, v)
			}
		}
	})
}

// A forward that got no answer is an attempt with no status and the
// error; its claim was released, so no record holds it yet.
func TestRecordRequestKeepsTimedOutAttempt(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) { <-r.Context().Done() })
	cfg := gwConfig(t, up.URL, dbPath(t), "    record: {request: true}", "")
	cfg.Routes[0].Upstream.Timeout = 300 * time.Millisecond
	g := startGateway(t, cfg)
	r := send(t, g, "/hooks", `{"id":"evt_slow"}`)
	if r.status != http.StatusGatewayTimeout || r.outcome() != "released" {
		t.Fatalf("got %d %q, want 504 released", r.status, r.outcome())
	}
	got := attemptsOf(t, g, "evt_slow")
	if len(got) != 1 || got[0].Status != 0 || !strings.Contains(got[0].Error, "timeout") {
		t.Fatalf("attempts = %+v, want one without status whose error names the timeout", got)
	}
	if got[0].Duration < 300*time.Millisecond || got[0].ExpiresAt.IsZero() {
		t.Errorf("attempt = %+v, want the time it waited and an expiry", got[0])
	}
	if _, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_slow"}); err == nil {
		t.Error("a record exists for a released delivery")
	}
}

// A route without record.request stores neither.
func TestNoRecordRequestStoresNothing(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_plain"}`), http.StatusOK, "forwarded")
	if req := storedRequestOf(t, g, "evt_plain"); req != nil {
		t.Errorf("stored request %+v, want none", req)
	}
	if got := attemptsOf(t, g, "evt_plain"); len(got) != 0 {
		t.Errorf("attempts %+v, want none", got)
	}
}
