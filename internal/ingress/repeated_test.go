package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
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
