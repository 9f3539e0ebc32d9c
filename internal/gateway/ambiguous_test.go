package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// A JSON body naming the key's member twice ({"id":"A","id":"B"}) was
// keyed by the first, while the application's parser (Go, Python,
// JavaScript) reads the last: a later {"id":"B"} was forwarded again and B
// processed twice. Such a body is refused under either value, with a
// problem document that says why; nothing is forwarded or recorded.
func TestDuplicateKeyMemberIsRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		for _, body := range []string{
			`{"id":"evt_A","id":"evt_B"}`,
			`{"id":"evt_A","amount":1,"\u0069d":"evt_B"}`, // the same name, escaped
			`{"id":null,"id":"evt_B"}`,                    // the first is no key, the last is
			`{"id":"evt_A","ID":"evt_B"}`,                 // another case: Go's encoding/json reads it
			`{"ID":"evt_B"}`,                              // read as the key by Go, not by GJSON
		} {
			r := send(t, g, "/hooks", body)
			p := wantProblem(t, r, http.StatusBadRequest, "invalid_key")
			if !strings.Contains(p.Detail, "more than once") {
				t.Fatalf("detail %q does not say the member is named twice", p.Detail)
			}
		}
		if n := up.total.Load(); n != 0 {
			t.Fatalf("the upstream got %d requests", n)
		}
		wantNoRecord(t, g, "hooks", "evt_A")
		wantNoRecord(t, g, "hooks", "evt_B")
		// Each event, sent plainly, is a delivery of its own.
		for _, key := range []string{"evt_B", "evt_A"} {
			wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, key)), http.StatusOK, "forwarded")
			if n := up.count(key); n != 1 {
				t.Fatalf("the upstream got %s %d times", key, n)
			}
			if rec := lookup(t, g, "hooks", key); rec.State != idempotency.StateDone {
				t.Fatalf("%s recorded %s", key, rec.State)
			}
		}
		// A key from a header: a duplicate the key does not come from is
		// the application's business.
		wantOutcome(t, send(t, g, "/hooks", `{"id":"x","id":"y"}`, "X-Event-Id", "evt_hdr"), http.StatusOK, "forwarded")
		if n := up.count("evt_hdr"); n != 1 {
			t.Fatalf("the upstream got evt_hdr %d times", n)
		}
	})
}

// In fingerprint mode fields, a field named twice was digested by its
// first member: {"id":"X","amount":1,"amount":2}, which the application
// reads as amount 2, was replayed as a retry of {"id":"X","amount":1}.
// Such a body is refused; the recorded answer stays as it was.
func TestDuplicateFingerprintMemberIsRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "    fingerprint: {mode: fields, fields: [\"json:amount\", \"json:data\"]}\n", ""))
		first := send(t, g, "/hooks", `{"id":"evt_fp","amount":1,"data":{"a":1}}`)
		wantOutcome(t, first, http.StatusOK, "forwarded")
		for _, body := range []string{
			`{"id":"evt_fp","amount":1,"data":{"a":1},"amount":2}`,
			`{"id":"evt_fp","amount":1,"data":{"a":1,"a":2}}`,
			`{"id":"evt_new","amount":1,"amount":2}`,
			`{"id":"evt_fp","amount":1,"data":{"a":1},"Amount":2}`,
		} {
			p := wantProblem(t, send(t, g, "/hooks", body), http.StatusBadRequest, "invalid_key")
			if !strings.Contains(p.Detail, "more than once") || !strings.Contains(p.Detail, "json:") {
				t.Fatalf("detail %q does not name the fingerprint field", p.Detail)
			}
		}
		// Below the field's path a name in another case is a member of its
		// own, digested as such: the delivery differs from the first.
		wantProblem(t, send(t, g, "/hooks", `{"id":"evt_fp","amount":1,"data":{"a":1,"A":2}}`), http.StatusUnprocessableEntity, "mismatch")
		if n := up.total.Load(); n != 1 {
			t.Fatalf("the upstream got %d requests, want the first only", n)
		}
		wantNoRecord(t, g, "hooks", "evt_new")
		if rec := lookup(t, g, "hooks", "evt_fp"); rec.State != idempotency.StateDone || string(rec.Body) != string(first.body) {
			t.Fatalf("the record changed: %+v", rec)
		}
		// The retry, as sent the first time, is still a retry.
		sameReply(t, first, send(t, g, "/hooks", `{"id":"evt_fp","amount":1,"data":{"a":1}}`))
	})
}

// A key header given twice (X-Event-Id: A, then X-Event-Id: B) was keyed
// by the first line, while both lines went upstream, where PHP reads the
// last and Node.js both joined ("A, B"): a later delivery keyed B was
// forwarded again. Such a request is refused under either value, and the
// key is not looked for in the next source either.
func TestRepeatedKeyHeaderIsRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		for _, lines := range [][]string{{"evt_A", "evt_B"}, {"evt_A", "evt_A"}, {"", "evt_B"}} {
			req, err := http.NewRequest(http.MethodPost, g.URL()+"/hooks", strings.NewReader(`{"id":"evt_json"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header["X-Event-Id"] = lines
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			p := wantProblem(t, reply{status: resp.StatusCode, header: resp.Header, body: body}, http.StatusBadRequest, "invalid_key")
			if !strings.Contains(p.Detail, "more than once") {
				t.Fatalf("detail %q does not say the field is given twice", p.Detail)
			}
		}
		if n := up.total.Load(); n != 0 {
			t.Fatalf("the upstream got %d requests", n)
		}
		for _, key := range []string{"evt_A", "evt_B", "evt_json"} {
			wantNoRecord(t, g, "hooks", key)
		}
		// Given once, the header keys the delivery as before.
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_json"}`, "X-Event-Id", "evt_B"), http.StatusOK, "forwarded")
		if n := up.count("evt_B"); n != 1 {
			t.Fatalf("the upstream got evt_B %d times", n)
		}
	})
}

// A fingerprint field given twice was digested by its first value:
// amount=1&amount=999, which PHP reads as 999, was replayed as a retry of
// amount=1. Every value is digested now, so it is key reuse (422); the
// retry as first sent is still a retry.
func TestRepeatedFingerprintFieldIsDigested(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "    fingerprint: {mode: fields, fields: [\"form:amount\"]}\n", ""))
		formHdr := []string{"X-Event-Id", "evt_fp", "Content-Type", "application/x-www-form-urlencoded"}
		first := send(t, g, "/hooks", "amount=1&note=x", formHdr...)
		wantOutcome(t, first, http.StatusOK, "forwarded")
		for _, body := range []string{"amount=1&amount=999", "amount=999&amount=1", "amount=1&amount=1"} {
			wantOutcome(t, send(t, g, "/hooks", body, formHdr...), http.StatusUnprocessableEntity, "mismatch")
		}
		sameReply(t, first, send(t, g, "/hooks", "note=y&amount=1", formHdr...))
		if n := up.total.Load(); n != 1 {
			t.Fatalf("the upstream got %d requests, want the first only", n)
		}
		// Repeated values are not refused: a delivery of its own is forwarded.
		wantOutcome(t, send(t, g, "/hooks", "amount=1&amount=999", "X-Event-Id", "evt_fp2", "Content-Type", "application/x-www-form-urlencoded"),
			http.StatusOK, "forwarded")
	})
}
