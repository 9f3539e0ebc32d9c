package extract_test

import (
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func benchKey(b *testing.B, r extract.Request, sources ...extract.Source) {
	b.Helper()
	e := newExtractor(b, "bench", sources...)
	dst := make([]byte, 0, maxLen)
	if key, err := e.Key(r, dst); err != nil || len(key) == 0 {
		b.Fatalf("Key() = %q, %v; want a key", key, err)
	}
	b.SetBytes(int64(len(r.Body())))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dst, _ = e.Key(r, dst[:0])
	}
}

func BenchmarkKeyHeader(b *testing.B) {
	benchKey(b, withHeaders(jsonReq(stripeBody), "X-Event-Id", "evt_1NG8Du2eZvKYlo2CUI79vXWy"), header("X-Event-Id"))
}

func BenchmarkKeyJSON(b *testing.B) {
	benchKey(b, jsonReq(stripeBody), jsonPath("data.object.id"))
}

func BenchmarkKeyJSONTopLevel(b *testing.B) {
	benchKey(b, jsonReq(stripeBody), jsonPath("id"))
}

func BenchmarkKeyForm(b *testing.B) {
	benchKey(b, formReq(alipayFirst), form("notify_id"))
}

func BenchmarkKeyTemplate(b *testing.B) {
	benchKey(b, jsonReq(`{"order_id":"20260612001","event":"CREATE","seq":"01","amount":"88.00","items":[{"sku":"A1","n":2}]}`),
		tmpl("{json:order_id}-{json:event}-{json:seq}"))
}

func BenchmarkKeyBodyHash(b *testing.B) {
	benchKey(b, jsonReq(stripeBody), bodyHash)
}

func benchFingerprint(b *testing.B, f *extract.Fingerprinter, r extract.Request) {
	b.Helper()
	if len(f.Fingerprint(r)) != 32 {
		b.Fatal("Fingerprint() is not 32 bytes")
	}
	b.SetBytes(int64(len(r.Body())))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.Fingerprint(r)
	}
}

func BenchmarkFingerprintBody(b *testing.B) {
	body := strings.Repeat("x", 1024)
	benchFingerprint(b, newFingerprinter(b, extract.FingerprintBody), jsonReq(body))
}

func BenchmarkFingerprintFieldsForm(b *testing.B) {
	benchFingerprint(b, newFingerprinter(b, extract.FingerprintFields, alipayFields...), formReq(alipayFirst))
}

func BenchmarkFingerprintFieldsJSON(b *testing.B) {
	benchFingerprint(b, newFingerprinter(b, extract.FingerprintFields, "json:data.object.amount", "json:data.object.currency", "json:type"), jsonReq(stripeBody))
}
