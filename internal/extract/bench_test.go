package extract_test

import (
	"fmt"
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

func BenchmarkKeyFieldsHash(b *testing.B) {
	benchKey(b, withHeaders(jsonReq(stripeBody), "X-Event-Id", "evt_1NG8Du2eZvKYlo2CUI79vXWy"),
		fieldsHash("json:id,json:data.object.amount,json:type,header:X-Event-Id"))
}

// BenchmarkKeyFieldsHashHubSpot keys a HubSpot batch of ten events on every
// event: each #.field path makes GJSON build an array, which allocates.
func BenchmarkKeyFieldsHashHubSpot(b *testing.B) {
	events := make([]string, 10)
	for i := range events {
		events[i] = fmt.Sprintf(`{"eventId":%d,"subscriptionId":2381011,"portalId":62515,"appId":1160452,"occurredAt":%d,`+
			`"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%d,"propertyName":"lifecyclestage",`+
			`"propertyValue":"customer","changeSource":"CRM"}`, 1912631245+i, 1718000000123+i, 123+i)
	}
	benchKey(b, jsonReq("["+strings.Join(events, ",")+"]"), hubspotKey)
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

// nestedOnes is a JSON array of about size bytes nested depth deep, all
// its ones in the innermost array: every level holds nearly the whole body.
func nestedOnes(depth, size int) string {
	n := (size - 2*depth - 16) / 2
	return strings.Repeat("[", depth) + strings.Repeat("1,", n) + "1" + strings.Repeat("]", depth)
}

// BenchmarkLargeJSON reads a 1 MiB body, flat or nested 998 deep under the
// member the key or fingerprint field names: a body any client may send,
// signed or not.
func BenchmarkLargeJSON(b *testing.B) {
	const size = 1 << 20
	for _, shape := range []struct {
		name  string
		depth int
	}{{"flat", 1}, {"deep", 998}} {
		obj := `{"id":` + nestedOnes(shape.depth, size) + `}`
		b.Run("key/"+shape.name, func(b *testing.B) {
			// json:id is an array, so the key is the header's; the body
			// is read all the same.
			benchKey(b, withHeaders(jsonReq(obj), "X-Id", "evt_1"), jsonPath("id"), header("X-Id"))
		})
		b.Run("duplicate+fingerprint/"+shape.name, func(b *testing.B) {
			f := newFingerprinter(b, extract.FingerprintFields, "json:id")
			r := extract.Request(jsonReq(obj))
			if f.Duplicate(r) != "" || len(f.Fingerprint(r)) != 32 {
				b.Fatal("want no duplicate and a fingerprint")
			}
			b.SetBytes(int64(len(obj)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f.Duplicate(r)
				f.Fingerprint(r)
			}
		})
		b.Run("fields_hash/"+shape.name, func(b *testing.B) {
			benchKey(b, jsonReq(`[`+obj+`]`), fieldsHash("json:#.id"))
		})
	}
}

// BenchmarkRepeatedFields digests a form field and a query parameter given
// n times (a key on them is refused at the second): each value is read
// once, so the cost per value does not grow with n.
func BenchmarkRepeatedFields(b *testing.B) {
	for _, n := range []int{1000, extract.MaxFormFields} {
		body := strings.TrimSuffix(strings.Repeat("k=v%41&", n), "&")
		q := map[string][]string{"k": strings.Split(strings.Repeat("v", n), "")}
		b.Run(fmt.Sprintf("form/fingerprint/%d", n), func(b *testing.B) {
			benchFingerprint(b, newFingerprinter(b, extract.FingerprintFields, "form:k"), formReq(body))
		})
		b.Run(fmt.Sprintf("query/fingerprint/%d", n), func(b *testing.B) {
			benchFingerprint(b, newFingerprinter(b, extract.FingerprintFields, "query:k"), extract.MapRequest{QueryLists: q})
		})
		b.Run(fmt.Sprintf("form/fields_hash/%d", n), func(b *testing.B) {
			e := newExtractor(b, "bench", fieldsHash("form:k"))
			r := extract.Request(formReq(body))
			dst := make([]byte, 0, maxLen)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = e.Key(r, dst[:0])
			}
		})
	}
}
