package extract_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

// withHeaderList returns r with the header name given once per value.
func withHeaderList(r extract.MapRequest, name string, values ...string) extract.MapRequest {
	r.HeaderLists = map[string][]string{name: values}
	return r
}

// queryReq is a request whose URL query gives each name its values.
func queryReq(kv ...string) extract.MapRequest {
	q := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		q[kv[i]] = append(q[kv[i]], kv[i+1])
	}
	return extract.MapRequest{HTTPMethod: "POST", QueryLists: q}
}

// chunk appends s length-prefixed, as the fields encoding writes strings.
func chunk(enc []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint64(enc, uint64(len(s))), s...)
}

// textField appends the encoding of a field given once, as every release
// has written it: the spec, tag 1, the value.
func textField(enc []byte, spec, value string) []byte {
	return chunk(append(chunk(enc, spec), 1), value)
}

// textsField appends the encoding of a field given more than once: the
// spec, tag 4, the number of values, each value.
func textsField(enc []byte, spec string, values ...string) []byte {
	enc = binary.BigEndian.AppendUint64(append(chunk(enc, spec), 4), uint64(len(values)))
	for _, v := range values {
		enc = chunk(enc, v)
	}
	return enc
}

func fieldsDigest(enc []byte) []byte {
	sum := sha256.Sum256(append([]byte("hookstamp fingerprint fields v1\n"), enc...))
	return sum[:]
}

// A fingerprint field given once is digested exactly as before repeated
// fields were digested whole (records made then must still match their
// retries); given more than once, every value is digested, in order, under
// a tag of its own. Repeated fields are not refused: a form may repeat a
// field on purpose (items[]=a&items[]=b).
func TestFingerprintRepeatedFieldEncoding(t *testing.T) {
	tests := []struct {
		name  string
		field string
		req   extract.MapRequest
		enc   []byte // without the domain
	}{
		{"header once", "header:X-Amount", withHeaders(jsonReq(`{}`), "X-Amount", "1"), textField(nil, "header:X-Amount", "1")},
		{"header once, from a list", "header:X-Amount", withHeaderList(jsonReq(`{}`), "x-amount", "1"), textField(nil, "header:X-Amount", "1")},
		{"header once, empty", "header:X-Amount", withHeaders(jsonReq(`{}`), "X-Amount", ""), textField(nil, "header:X-Amount", "")},
		{"header absent", "header:X-Amount", jsonReq(`{}`), append(chunk(nil, "header:X-Amount"), 0)},
		{"header twice", "header:X-Amount", withHeaderList(jsonReq(`{}`), "X-Amount", "1", "999"), textsField(nil, "header:X-Amount", "1", "999")},
		{"header three times, one empty", "header:X-Amount", withHeaderList(jsonReq(`{}`), "X-Amount", "1", "", "2"), textsField(nil, "header:X-Amount", "1", "", "2")},
		{"query once", "query:amount", queryReq("amount", "1"), textField(nil, "query:amount", "1")},
		{"query once, from the map", "query:amount", extract.MapRequest{QueryArgs: map[string]string{"amount": "1"}}, textField(nil, "query:amount", "1")},
		{"query twice", "query:amount", queryReq("amount", "1", "amount", "999"), textsField(nil, "query:amount", "1", "999")},
		{"form once", "form:amount", formReq("amount=1%2B1&x=2"), textField(nil, "form:amount", "1+1")},
		{"form once, empty", "form:amount", formReq("amount&x=2"), textField(nil, "form:amount", "")},
		{"form absent", "form:amount", formReq("x=2"), append(chunk(nil, "form:amount"), 0)},
		{"form twice", "form:amount", formReq("amount=1&x=2&amount=9%399"), textsField(nil, "form:amount", "1", "999")},
		{"form list", "form:items[]", formReq("items%5B%5D=a&items[]=b+c&items[]="), textsField(nil, "form:items[]", "a", "b c", "")},
		{"form: rejected pairs are no values", "form:amount", formReq("amount=1&amount=%zz&amount=2;3"), textField(nil, "form:amount", "1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFingerprinter(t, extract.FingerprintFields, tt.field)
			if got, want := f.Fingerprint(tt.req), fieldsDigest(tt.enc); !bytes.Equal(got, want) {
				t.Errorf("Fingerprint() = %x, want %x (encoding %q)", got, want, tt.enc)
			}
			if spec := f.Duplicate(tt.req); spec != "" {
				t.Errorf("Duplicate() = %q: a repeated field is not refused", spec)
			}
		})
	}
}

// Deliveries whose repeated fields differ in any value, their order or
// their number have different fingerprints; one whose values are spelt
// otherwise (form escapes) has the same.
func TestFingerprintRepeatedFields(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		a, b   extract.MapRequest
		same   bool
	}{
		{"form: another last value", []string{"form:amount"}, formReq("amount=1&amount=999"), formReq("amount=1&amount=2"), false},
		{"form: once vs twice", []string{"form:amount"}, formReq("amount=1"), formReq("amount=1&amount=999"), false},
		{"form: twice the same vs once", []string{"form:amount"}, formReq("amount=1&amount=1"), formReq("amount=1"), false},
		{"form: order", []string{"form:amount"}, formReq("amount=1&amount=2"), formReq("amount=2&amount=1"), false},
		{"form: boundary between values", []string{"form:a"}, formReq("a=ab&a=c"), formReq("a=a&a=bc"), false},
		{"form: an empty value", []string{"form:a"}, formReq("a=&a=x"), formReq("a=x&a="), false},
		{"form: a value moved to another field", []string{"form:a", "form:b"}, formReq("a=1&a=2&b=3"), formReq("a=1&b=2&b=3"), false},
		{"form: escapes do not count", []string{"form:a"}, formReq("a=x+y&a=%41"), formReq("a=x%20y&a=A"), true},
		{"form: other fields do not count", []string{"form:a"}, formReq("a=1&b=2&a=3"), formReq("a=1&a=3&c=4"), true},
		{"header: twice vs joined", []string{"header:X-A"}, withHeaderList(jsonReq(`{}`), "X-A", "A", "B"), withHeaders(jsonReq(`{}`), "X-A", "A, B"), false},
		{"header: another last value", []string{"header:X-A"}, withHeaderList(jsonReq(`{}`), "X-A", "A", "B"), withHeaderList(jsonReq(`{}`), "X-A", "A", "C"), false},
		{"header: the same lines", []string{"header:X-A"}, withHeaderList(jsonReq(`{}`), "X-A", "A", "B"), withHeaderList(jsonReq(`{"x":1}`), "x-a", "A", "B"), true},
		{"query: another last value", []string{"query:a"}, queryReq("a", "1", "a", "999"), queryReq("a", "1", "a", "2"), false},
		{"query: once vs twice", []string{"query:a"}, queryReq("a", "1"), queryReq("a", "1", "a", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFingerprinter(t, extract.FingerprintFields, tt.fields...)
			fa, fb := f.Fingerprint(tt.a), f.Fingerprint(tt.b)
			if bytes.Equal(fa, fb) != tt.same {
				t.Errorf("fingerprints %x and %x: equal = %v, want %v", fa, fb, !tt.same, tt.same)
			}
		})
	}
}
