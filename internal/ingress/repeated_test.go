package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// recordingEngine forwards every delivery and keeps each one it was
// handed.
type recordingEngine struct {
	mu         sync.Mutex
	deliveries []idempotency.Delivery
}

func (e *recordingEngine) Handle(ctx context.Context, _ *idempotency.Policy, d idempotency.Delivery, fwd idempotency.ForwardFunc) idempotency.Result {
	e.mu.Lock()
	e.deliveries = append(e.deliveries, d)
	e.mu.Unlock()
	return passEngine{}.Passthrough(ctx, fwd)
}

func (e *recordingEngine) Passthrough(ctx context.Context, fwd idempotency.ForwardFunc) idempotency.Result {
	return passEngine{}.Passthrough(ctx, fwd)
}

func (e *recordingEngine) handled() []idempotency.Delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]idempotency.Delivery(nil), e.deliveries...)
}

// countingForwarder answers 200 and counts the requests it was sent.
type countingForwarder struct {
	mu sync.Mutex
	n  int
}

func (f *countingForwarder) Do(context.Context, *forward.Request) (*forward.Response, error) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return &forward.Response{Status: 200}, nil
}

func (f *countingForwarder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// A key source whose header, query parameter or form field the request
// gives more than once is refused 400 invalid_key before anything is
// claimed or forwarded, as fasthttp reads the request: header names in any
// case, query names unescaped.
func TestRepeatedKeyFieldIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		source extract.Source
		req    func() *http.Request
	}{
		{"header twice", extract.Source{Kind: extract.KindHeader, Arg: "X-Event-Id"}, func() *http.Request {
			r := httptest.NewRequest("POST", "/r", strings.NewReader(`{}`))
			r.Header.Add("X-Event-Id", "evt_A")
			r.Header.Add("X-Event-Id", "evt_B")
			return r
		}},
		{"header twice, spelt in two cases", extract.Source{Kind: extract.KindHeader, Arg: "X-Event-Id"}, func() *http.Request {
			r := httptest.NewRequest("POST", "/r", strings.NewReader(`{}`))
			r.Header.Set("X-Event-Id", "evt_A")
			r.Header["x-event-id"] = []string{"evt_B"}
			return r
		}},
		{"header twice, the first empty", extract.Source{Kind: extract.KindHeader, Arg: "X-Event-Id"}, func() *http.Request {
			r := httptest.NewRequest("POST", "/r", strings.NewReader(`{}`))
			r.Header["X-Event-Id"] = []string{"", "evt_B"}
			return r
		}},
		{"User-Agent twice, which fasthttp keeps the last of", extract.Source{Kind: extract.KindHeader, Arg: "user-agent"}, func() *http.Request {
			r := httptest.NewRequest("POST", "/r", strings.NewReader(`{}`))
			r.Header["User-Agent"] = []string{"evt_A", "evt_B"}
			return r
		}},
		{"query twice, the second name escaped", extract.Source{Kind: extract.KindQuery, Arg: "event_id"}, func() *http.Request {
			return httptest.NewRequest("POST", "/r?event_id=evt_A&event%5Fid=evt_B", strings.NewReader(`{}`))
		}},
		{"form field twice", extract.Source{Kind: extract.KindForm, Arg: "notify_id"}, func() *http.Request {
			r := httptest.NewRequest("POST", "/r", strings.NewReader("notify_id=evt_A&x=1&notify_id=evt_B"))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, err := extract.NewExtractor("r", []extract.Source{tt.source}, 255)
			if err != nil {
				t.Fatal(err)
			}
			eng, fwd := &recordingEngine{}, &countingForwarder{}
			s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"POST"}, Extractor: ex, KeyRequired: true,
				Policy: &idempotency.Policy{Route: "r"}}}, Engine: eng, Forwarder: fwd})
			resp, err := s.App().Test(tt.req(), -1)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var p struct{ Detail string }
			_ = json.Unmarshal(body, &p)
			if resp.StatusCode != 400 || resp.Header.Get(HeaderOutcome) != "invalid_key" || !strings.Contains(p.Detail, "more than once") {
				t.Errorf("%d %s %s; want 400 invalid_key saying the field is given more than once", resp.StatusCode, resp.Header.Get(HeaderOutcome), body)
			}
			if n, d := fwd.count(), len(eng.handled()); n != 0 || d != 0 {
				t.Errorf("forwarded %d times, %d deliveries handled; want none", n, d)
			}
		})
	}
}

// A fingerprint field given more than once is not refused: every value is
// digested, in the order received, as fasthttp reads them (header lines in
// any case, spaces around them trimmed; query names unescaped).
func TestRepeatedFingerprintFieldIsDigested(t *testing.T) {
	fp, err := extract.NewFingerprinter(extract.FingerprintFields, []string{"header:X-Amount", "query:amount"})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := extract.NewExtractor("r", []extract.Source{{Kind: extract.KindHeader, Arg: "X-Event-Id"}}, 255)
	if err != nil {
		t.Fatal(err)
	}
	eng, fwd := &recordingEngine{}, &countingForwarder{}
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"POST"}, Extractor: ex, Fingerprinter: fp,
		KeyRequired: true, Policy: &idempotency.Policy{Route: "r"}}}, Engine: eng, Forwarder: fwd})
	send := func(target string, amounts ...string) []byte {
		t.Helper()
		r := httptest.NewRequest("POST", target, strings.NewReader(`{}`))
		r.Header.Set("X-Event-Id", "evt_1")
		for i, a := range amounts {
			name := "X-Amount"
			if i%2 == 1 {
				name = "x-amount"
			}
			r.Header[name] = append(r.Header[name], a)
		}
		resp, err := s.App().Test(r, -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		ds := eng.handled()
		return ds[len(ds)-1].Fingerprint
	}
	// The encoding of SPEC §3: each field's spec, then tag 1 and the value
	// of a field given once, or tag 4, the number of values and each one.
	chunk := func(enc []byte, v string) []byte {
		return append(binary.BigEndian.AppendUint64(enc, uint64(len(v))), v...)
	}
	digest := func(fields ...[]string) []byte {
		enc := []byte("hookstamp fingerprint fields v1\n")
		for _, f := range fields {
			enc = chunk(enc, f[0])
			if vs := f[1:]; len(vs) == 1 {
				enc = chunk(append(enc, 1), vs[0])
			} else {
				enc = binary.BigEndian.AppendUint64(append(enc, 4), uint64(len(vs)))
				for _, v := range vs {
					enc = chunk(enc, v)
				}
			}
		}
		sum := sha256.Sum256(enc)
		return sum[:]
	}
	want := digest([]string{"header:X-Amount", "1", "999"}, []string{"query:amount", "5", "6"})
	if got := send("/r?amount=5&amoun%74=6", "1", " 999\t"); !bytes.Equal(got, want) {
		t.Errorf("fingerprint %x, want %x (every value, in order)", got, want)
	}
	once := digest([]string{"header:X-Amount", "1"}, []string{"query:amount", "5"})
	if got := send("/r?amount=5", "1"); !bytes.Equal(got, once) {
		t.Errorf("fingerprint of fields given once %x, want %x", got, once)
	}
	if n := fwd.count(); n != 2 {
		t.Errorf("forwarded %d times, want 2", n)
	}
}

// fasthttp keeps only the last User-Agent line; a fingerprint field naming
// it digests every line, so a change in the first is a change.
func TestRepeatedUserAgentIsDigestedWhole(t *testing.T) {
	fp, err := extract.NewFingerprinter(extract.FingerprintFields, []string{"header:User-Agent"})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := extract.NewExtractor("r", []extract.Source{{Kind: extract.KindHeader, Arg: "X-Event-Id"}}, 255)
	if err != nil {
		t.Fatal(err)
	}
	eng := &recordingEngine{}
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"POST"}, Extractor: ex, Fingerprinter: fp,
		KeyRequired: true, Policy: &idempotency.Policy{Route: "r"}}}, Engine: eng, Forwarder: &countingForwarder{}})
	send := func(agents ...string) []byte {
		t.Helper()
		r := httptest.NewRequest("POST", "/r", strings.NewReader(`{}`))
		r.Header.Set("X-Event-Id", "evt_1")
		r.Header["User-Agent"] = agents
		resp, err := s.App().Test(r, -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ds := eng.handled()
		return ds[len(ds)-1].Fingerprint
	}
	if a, b := send("A", "Z"), send("B", "Z"); bytes.Equal(a, b) {
		t.Errorf("User-Agent A, Z and B, Z give one fingerprint %x; the first line was not digested", a)
	}
	if a, b := send("A", "Z"), send("A", "Z"); !bytes.Equal(a, b) {
		t.Errorf("one request's fingerprint changed between sends: %x then %x", a, b)
	}
}
