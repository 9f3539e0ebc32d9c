package extract_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
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

// A key read from a header, query parameter or form field the request
// gives more than once is refused, whatever the values: the application
// may read the last (PHP) or all of them joined (Node.js). The first value
// is still there, to be logged. Given once, each reads as it always did.
func TestKeyRepeatedField(t *testing.T) {
	tests := []struct {
		name    string
		sources []extract.Source
		req     extract.MapRequest
		want    string
		wantErr error
	}{
		// header
		{"header once", []extract.Source{header("X-Id")}, withHeaderList(jsonReq(`{}`), "X-Id", "A"), "A", nil},
		{"header twice", []extract.Source{header("X-Id")}, withHeaderList(jsonReq(`{}`), "X-Id", "A", "B"), "A", extract.ErrDuplicateField},
		{"header twice, the same value", []extract.Source{header("X-Id")}, withHeaderList(jsonReq(`{}`), "X-Id", "A", "A"), "A", extract.ErrDuplicateField},
		{"header twice, named in another case", []extract.Source{header("X-Id")}, withHeaderList(jsonReq(`{}`), "x-id", "A", "B"), "A", extract.ErrDuplicateField},
		{"header twice, the first empty: refused, not the next source", []extract.Source{header("X-Id"), jsonPath("id")},
			withHeaderList(jsonReq(`{"id":"j"}`), "X-Id", "", "B"), "", extract.ErrDuplicateField},
		{"header twice behind a key from an earlier source", []extract.Source{jsonPath("id"), header("X-Id")},
			withHeaderList(jsonReq(`{"id":"j"}`), "X-Id", "A", "B"), "j", nil},

		// query
		{"query once", []extract.Source{query("id")}, queryReq("id", "A"), "A", nil},
		{"query twice", []extract.Source{query("id")}, queryReq("id", "A", "id", "B"), "A", extract.ErrDuplicateField},
		{"query twice, the first empty", []extract.Source{query("id"), header("X-Id")},
			withHeaders(queryReq("id", "", "id", "B"), "X-Id", "h"), "", extract.ErrDuplicateField},
		{"query twice, another name once", []extract.Source{query("id")}, queryReq("id", "A", "other", "B"), "A", nil},

		// form
		{"form once", []extract.Source{form("k")}, formReq("k=A&x=1"), "A", nil},
		{"form twice", []extract.Source{form("k")}, formReq("k=A&x=1&k=B"), "A", extract.ErrDuplicateField},
		{"form twice, the same value", []extract.Source{form("k")}, formReq("k=A&k=A"), "A", extract.ErrDuplicateField},
		{"form twice, the name escaped", []extract.Source{form("k")}, formReq("k=A&%6B=B"), "A", extract.ErrDuplicateField},
		{"form twice, the first empty", []extract.Source{form("k"), header("X-Id")},
			withHeaders(formReq("k=&k=B"), "X-Id", "h"), "", extract.ErrDuplicateField},
		{"form twice, the first without '='", []extract.Source{form("k")}, formReq("k&k=B"), "", extract.ErrDuplicateField},
		{"form: a pair net/url rejects is no occurrence", []extract.Source{form("k")}, formReq("k=A&k=%zz&k=a;b"), "A", nil},
		{"form: a second occurrence past the pair limit is not looked at", []extract.Source{form("k")},
			formReq("k=A&" + strings.Repeat("a=1&", extract.MaxFormFields-1) + "k=B"), "A", nil},
		{"form: a second occurrence at the pair limit is", []extract.Source{form("k")},
			formReq("k=A&" + strings.Repeat("a=1&", extract.MaxFormFields-2) + "k=B"), "A", extract.ErrDuplicateField},
		{"form twice in a body that is not a form", []extract.Source{form("k"), header("X-Id")},
			withHeaders(jsonReq(`k=A&k=B`), "X-Id", "h"), "h", nil},

		// template
		{"template part twice", []extract.Source{tmpl("{json:a}-{header:X-Id}")},
			withHeaderList(jsonReq(`{"a":"x"}`), "X-Id", "A", "B"), "x-A", extract.ErrDuplicateField},
		{"template query part twice", []extract.Source{tmpl("{query:id}:{json:a}")},
			func() extract.MapRequest {
				r := queryReq("id", "A", "id", "B")
				r.RawBody = []byte(`{"a":"x"}`)
				return r
			}(),
			"A", extract.ErrDuplicateField},
		{"template form part twice", []extract.Source{tmpl("{form:k}")}, formReq("k=A&k=B"), "A", extract.ErrDuplicateField},
		{"template parts once", []extract.Source{tmpl("{query:id}:{form:k}")},
			func() extract.MapRequest { r := formReq("k=B"); r.QueryArgs = map[string]string{"id": "A"}; return r }(), "A:B", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "r", tt.sources...)
			got, err := e.Key(tt.req, nil)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Key() = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			if tt.wantErr != nil && !errors.Is(err, extract.ErrInvalidKey) {
				t.Fatalf("errors.Is(%v, ErrInvalidKey) = false", err)
			}
			if string(got) != tt.want {
				t.Errorf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A fields_hash key with a header, query or form field given more than
// once is refused as a source of that kind would be, its digest kept for
// the log line; given once, the key is the digest of the encoding as it
// always was.
func TestFieldsHashRepeatedField(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		req     extract.MapRequest
		wantErr error
	}{
		{"header twice", "json:id,header:X-Id", withHeaderList(jsonReq(`{"id":"j"}`), "X-Id", "A", "B"), extract.ErrDuplicateField},
		{"header twice, every value empty", "header:X-Id", withHeaderList(jsonReq(`{}`), "X-Id", "", ""), extract.ErrDuplicateField},
		{"query twice", "json:id,query:q", func() extract.MapRequest {
			r := queryReq("q", "A", "q", "B")
			r.RawBody = []byte(`{"id":"j"}`)
			return r
		}(), extract.ErrDuplicateField},
		{"form twice", "form:a,form:k", formReq("a=1&k=A&k=B"), extract.ErrDuplicateField},
		{"a JSON member named twice as well", "json:id,header:X-Id", withHeaderList(jsonReq(`{"id":"j","id":"i"}`), "X-Id", "A", "B"), extract.ErrDuplicateMember},
		{"each once", "json:id,header:X-Id,query:q,form:k", func() extract.MapRequest {
			r := withHeaders(formReq("k=A"), "X-Id", "h")
			r.QueryArgs = map[string]string{"q": "q1"}
			return r
		}(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "r", fieldsHash(tt.list))
			got, err := e.Key(tt.req, nil)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Key() = %q, %v; want %v", got, err, tt.wantErr)
			}
			if len(got) != 0 && !hexKey.MatchString(string(got)) {
				t.Errorf("Key() = %q, want 64 lowercase hex digits or nothing", got)
			}
		})
	}
	// Given once, the key is the digest of the encoding written out here.
	r := withHeaders(formReq("k=a%2Bb"), "X-Id", "h")
	r.QueryArgs = map[string]string{"q": ""}
	enc := []byte("hookstamp key fields_hash v1\n")
	enc = textField(enc, "header:X-Id", "h")
	enc = textField(enc, "query:q", "")
	enc = textField(enc, "form:k", "a+b")
	enc = chunk(enc, "form:z")
	enc = append(enc, 0) // absent
	sum := sha256.Sum256(enc)
	if got := key(t, newExtractor(t, "r", fieldsHash("header:X-Id,query:q,form:k,form:z")), r); got != sha256Hex(string(enc)) {
		t.Errorf("Key() = %s, want %x", got, sum)
	}
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

// Below a fingerprint field's path the sender's own names may differ only
// in case (Mailgun's user-variables, a map to every parser): the digest
// covers both, and the body is not refused. On the path it is.
func TestFingerprintCaseVariantsBelowThePath(t *testing.T) {
	f := newFingerprinter(t, extract.FingerprintFields, "json:event-data")
	below := jsonReq(`{"event-data":{"id":"ev1","user-variables":{"orderId":"1","OrderID":"2","kullanıcı":"a","kullanici":"b"}}}`)
	if spec := f.Duplicate(below); spec != "" {
		t.Errorf("names differing in case below the path refused (%s)", spec)
	}
	if spec := f.Duplicate(jsonReq(`{"event-data":{"id":"ev1"},"Event-Data":{"id":"ev2"}}`)); spec == "" {
		t.Errorf("a case variant of the path's own member accepted")
	}
}
