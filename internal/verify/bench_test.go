package verify_test

import (
	"bytes"
	"testing"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// preparedRequest serves header bytes prepared in advance, as a server that
// already holds the request in memory does, so that the benchmark measures
// Verify rather than the request adapter.
type preparedRequest struct {
	headers map[string][][]byte // keyed by the name exactly as Verify asks
	body    []byte
}

func (r *preparedRequest) HeaderValues(name string) [][]byte { return r.headers[name] }
func (r *preparedRequest) Body() []byte                      { return r.body }

func benchmarkVerify(b *testing.B, o verify.Options, header, value string, body []byte) {
	benchmarkRequest(b, newVerifier(b, o), &preparedRequest{headers: map[string][][]byte{header: {[]byte(value)}}, body: body})
}

func benchmarkRequest(b *testing.B, v verify.Verifier, r *preparedRequest) {
	body := r.body
	if err := v.Verify(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

var kib = bytes.Repeat([]byte("x"), 1024)

func BenchmarkVerifyStripe1KiB(b *testing.B) {
	benchmarkVerify(b, verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{secret("old")}, Now: clock},
		"Stripe-Signature", verifytest.Stripe(secret("old"), kib, now).Get("Stripe-Signature"), kib)
}

func BenchmarkVerifyGitHub1KiB(b *testing.B) {
	benchmarkVerify(b, verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{secret("old")}},
		"X-Hub-Signature-256", verifytest.GitHub(secret("old"), kib).Get("X-Hub-Signature-256"), kib)
}

// BenchmarkVerifyAdyen verifies Adyen's published vector: eight signed
// fields and the signature read from the body by their paths.
func BenchmarkVerifyAdyen(b *testing.B) {
	body := []byte(`{"live":"false","notificationItems":[` + adyenItem + `]}`)
	benchmarkRequest(b, newVerifier(b, adyenOptions()), &preparedRequest{body: body})
}
