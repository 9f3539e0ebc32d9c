package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// An answer whose headers pass the forwarder's 1 MiB limit was released
// as 502: the provider's retry was forwarded a second time although the
// upstream had received and acted on the first. The answer is final or
// not by its status like any other: a 200 is recorded (its status and the
// kept headers that fit, its body omitted and flagged) and replayed; a
// 503 is released, and the retry forwarded again.
func TestAnswerWithHugeHeadersIsSettledByItsStatus(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("p", 1000)
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "application/json") // written first: Go sorts the fields
			for i := range 1200 {
				w.Header().Set(fmt.Sprintf("X-Pad-%04d", i), pad)
			}
			status := http.StatusOK
			if r.Header.Get("Idempotency-Key") == "evt_big_503" {
				status = http.StatusServiceUnavailable
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"n":%d}`, n)
		})
		g := startGateway(t, s.config(t, up.URL, "", ""))

		first := send(t, g, "/hooks", `{"id":"evt_big_head"}`)
		wantOutcome(t, first, http.StatusOK, "forwarded")
		if first.header.Get("Hookstamp-Body-Omitted") != "true" || first.header.Get("Content-Type") != "application/json" {
			t.Fatalf("first answer: Hookstamp-Body-Omitted %q, Content-Type %q", first.header.Get("Hookstamp-Body-Omitted"), first.header.Get("Content-Type"))
		}
		rec := lookup(t, g, "hooks", "evt_big_head")
		if rec.State != idempotency.StateDone || rec.Status != http.StatusOK || !rec.BodyOmitted || rec.Headers["Content-Type"] != "application/json" {
			t.Fatalf("the ledger holds %s %d omitted=%v headers %v", rec.State, rec.Status, rec.BodyOmitted, rec.Headers)
		}
		again := send(t, g, "/hooks", `{"id":"evt_big_head"}`)
		wantOutcome(t, again, http.StatusOK, "replayed")
		if again.header.Get("Hookstamp-Body-Omitted") != "true" || len(again.body) != 0 {
			t.Fatalf("replay: Hookstamp-Body-Omitted %q, body %q", again.header.Get("Hookstamp-Body-Omitted"), again.body)
		}
		if n := up.count("evt_big_head"); n != 1 {
			t.Fatalf("the upstream got evt_big_head %d times, want 1", n)
		}

		// A non-final status with huge headers is released, as any 503.
		for i := 1; i <= 2; i++ {
			r := send(t, g, "/hooks", `{"id":"evt_big_503"}`)
			if r.status != http.StatusServiceUnavailable || r.outcome() != "released" {
				t.Fatalf("attempt %d: %d %q, want 503 released", i, r.status, r.outcome())
			}
			if n := up.count("evt_big_503"); n != i {
				t.Fatalf("attempt %d: the upstream got evt_big_503 %d times", i, n)
			}
		}
		wantNoRecord(t, g, "hooks", "evt_big_503")
	})
}
