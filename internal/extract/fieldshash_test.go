package extract_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"regexp"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func fieldsHash(list string) extract.Source {
	return extract.Source{Kind: extract.KindFieldsHash, Arg: list}
}

// hubspotKey keys a HubSpot batch on the identity of every event in it.
var hubspotKey = fieldsHash("json:#.subscriptionId,json:#.eventId,json:#.portalId,json:#.occurredAt")

// HubSpot batches: a retry counts its attempt in every event and may be
// serialised anew; the others carry another set of events.
const (
	hubspotFirst = `[{"eventId":100,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000123,"attemptNumber":0,"propertyValue":"customer"},` +
		`{"eventId":101,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000456,"attemptNumber":0,"propertyValue":"lead"}]`
	hubspotRetry = "[ {\"attemptNumber\":3, \"occurredAt\":1718000000123, \"portalId\":62515, \"subscriptionId\":7, \"eventId\":100, \"propertyValue\":\"\\u0063ustomer\"},\n" +
		` {"propertyValue":"lead","attemptNumber":3,"occurredAt":1718000000456,"portalId":62515,"eventId":101,"subscriptionId":7} ]`
	hubspotRebatched = `[{"eventId":100,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000123,"attemptNumber":1,"propertyValue":"customer"},` +
		`{"eventId":101,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000456,"attemptNumber":1,"propertyValue":"lead"},` +
		`{"eventId":102,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000789,"attemptNumber":0,"propertyValue":"customer"}]`
	hubspotOtherSubscription = `[{"eventId":100,"subscriptionId":8,"portalId":62515,"occurredAt":1718000000123,"attemptNumber":0,"propertyValue":"customer"},` +
		`{"eventId":101,"subscriptionId":8,"portalId":62515,"occurredAt":1718000000456,"attemptNumber":0,"propertyValue":"lead"}]`
	hubspotReordered = `[{"eventId":101,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000456,"attemptNumber":0,"propertyValue":"lead"},` +
		`{"eventId":100,"subscriptionId":7,"portalId":62515,"occurredAt":1718000000123,"attemptNumber":0,"propertyValue":"customer"}]`
)

var hexKey = regexp.MustCompile(`^[0-9a-f]{64}$`)

func key(tb testing.TB, e *extract.Extractor, r extract.Request) string {
	tb.Helper()
	k, err := e.Key(r, nil)
	if err != nil {
		tb.Fatalf("Key() = %q, %v", k, err)
	}
	return string(k)
}

// Two deliveries share a fields_hash key exactly when every listed field
// has the same value in both, whatever else differs.
func TestFieldsHashKeys(t *testing.T) {
	tests := []struct {
		name   string
		source extract.Source
		a, b   extract.MapRequest
		same   bool
	}{
		{"hubspot retry: attempts counted, members reordered, re-serialised", hubspotKey, jsonReq(hubspotFirst), jsonReq(hubspotRetry), true},
		{"hubspot batch with one more event", hubspotKey, jsonReq(hubspotFirst), jsonReq(hubspotRebatched), false},
		{"hubspot events of another subscription with the same eventIds", hubspotKey, jsonReq(hubspotFirst), jsonReq(hubspotOtherSubscription), false},
		{"hubspot events in another order", hubspotKey, jsonReq(hubspotFirst), jsonReq(hubspotReordered), false},
		{"members not listed do not count", fieldsHash("json:a"), jsonReq(`{"a":1}`), jsonReq(`{"a":1,"b":2}`), true},
		{"absent vs empty field", fieldsHash("json:a,json:b"), jsonReq(`{"b":1}`), jsonReq(`{"a":"","b":1}`), false},
		{"value moved between fields", fieldsHash("json:a,json:b"), jsonReq(`{"a":1}`), jsonReq(`{"b":1}`), false},
		{"string vs number", fieldsHash("json:a"), jsonReq(`{"a":"1"}`), jsonReq(`{"a":1}`), false},
		{"same text from a header and a query parameter", fieldsHash("header:a,query:a"),
			extract.MapRequest{Headers: map[string]string{"a": "1"}}, extract.MapRequest{QueryArgs: map[string]string{"a": "1"}}, false},
		{"form encoding does not count", fieldsHash("form:a,form:b"), formReq("a=x+y&b=1"), formReq("b=1&a=x%20y"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "r", tt.source)
			ka, kb := key(t, e, tt.a), key(t, e, tt.b)
			if !hexKey.MatchString(ka) || !hexKey.MatchString(kb) {
				t.Fatalf("keys %q, %q: want 64 lowercase hex digits", ka, kb)
			}
			if (ka == kb) != tt.same {
				t.Errorf("keys %s and %s: equal = %v, want %v", ka, kb, ka == kb, tt.same)
			}
		})
	}
	spaced := newExtractor(t, "r", fieldsHash(" json:a , json:b "))
	plain := newExtractor(t, "r", fieldsHash("json:a,json:b"))
	if r := jsonReq(`{"a":1,"b":2}`); key(t, spaced, r) != key(t, plain, r) {
		t.Errorf("white space around the entries changes the key")
	}
}

// A fields_hash source yields no key when none of its fields has a value,
// so the next source is tried; one valued field is enough.
func TestFieldsHashAbsent(t *testing.T) {
	const scalars, arrays = "json:a,json:b,json:c,json:d", "json:#.s,json:#.e"
	tests := []struct {
		name, list string
		req        extract.MapRequest
		want       string // "" = no key, "hash" = a fields_hash key
	}{
		{"every field absent", scalars, withHeaders(jsonReq(`{"x":1}`), "X-Id", "h"), "h"},
		{"empty string, null, [] and {}", scalars, withHeaders(jsonReq(`{"a":"","b":null,"c":[],"d":{}}`), "X-Id", "h"), "h"},
		{"a body that is not JSON", scalars, withHeaders(formReq("a=1"), "X-Id", "h"), "h"},
		{"nothing anywhere", scalars, jsonReq(`{}`), ""},
		{"one field valued", scalars, withHeaders(jsonReq(`{"b":0}`), "X-Id", "h"), "hash"},
		{"array paths over an object body", arrays, withHeaders(jsonReq(`{"s":1,"e":2}`), "X-Id", "h"), "h"},
		{"array paths over elements without the fields", arrays, withHeaders(jsonReq(`[{"x":1},2]`), "X-Id", "h"), "h"},
		{"array path with one element valued", arrays, withHeaders(jsonReq(`[{"x":1},{"e":false}]`), "X-Id", "h"), "hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "r", fieldsHash(tt.list), header("X-Id"))
			got, err := e.Key(tt.req, nil)
			if err != nil {
				t.Fatalf("Key() = %q, %v", got, err)
			}
			switch {
			case tt.want == "hash" && !hexKey.Match(got):
				t.Errorf("Key() = %q, want a fields_hash key", got)
			case tt.want != "hash" && string(got) != tt.want:
				t.Errorf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFieldsHashRefusals(t *testing.T) {
	e := newExtractor(t, "r", fieldsHash("json:a,json:#.id"))
	for _, body := range []string{`{"a":1,"a":2}`, `{"a":1,"b":{"c":1,"c":1}}`, `{"a":null,"a":2}`,
		`{"a":1,"A":2}`, `{"a":1,"b":{"c":1,"C":1}}`, `[{"id":1,"ID":2}]`, `[{"kind":1,"\u212aind":2}]`} {
		if k, err := e.Key(jsonReq(body), nil); !errors.Is(err, extract.ErrDuplicateMember) {
			t.Errorf("Key(%s) = %q, %v; want ErrDuplicateMember", body, k, err)
		}
	}
	if k, err := e.Key(jsonReq(`{"a":`), nil); k != nil || err != extract.ErrMalformedBody {
		t.Errorf("Key(malformed JSON) = %q, %v; want nil, ErrMalformedBody", k, err)
	}
	headers := newExtractor(t, "r", fieldsHash("header:X-A,query:q"))
	if k, err := headers.Key(jsonReq(`{"a":`), nil); k != nil || err != nil {
		t.Errorf("Key(malformed JSON) without json fields = %q, %v; want nil, nil", k, err)
	}
	short, err := extract.NewExtractor("r", []extract.Source{fieldsHash("json:a")}, 16)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := short.Key(jsonReq(`{"a":1}`), nil); err != extract.ErrKeyTooLong || len(k) != 16 {
		t.Errorf("Key() with max length 16 = %q, %v; want 16 bytes, ErrKeyTooLong", k, err)
	}
}

// The key is the hex SHA-256 of the fields encoding under its own domain
// (docs/SPEC.md, key.sources): spelled out here byte by byte.
func TestFieldsHashKnownAnswer(t *testing.T) {
	enc := []byte("hookstamp key fields_hash v1\n")
	enc = binary.BigEndian.AppendUint64(enc, uint64(len("header:X-A")))
	enc = append(enc, "header:X-A"...)
	enc = append(enc, 1) // text
	enc = binary.BigEndian.AppendUint64(enc, 1)
	enc = append(enc, '1')
	enc = binary.BigEndian.AppendUint64(enc, uint64(len("json:#.n")))
	enc = append(enc, "json:#.n"...)
	enc = append(enc, 3, 'a') // tree: an array
	enc = binary.BigEndian.AppendUint64(enc, 2)
	enc = append(enc, 'n')
	enc = binary.BigEndian.AppendUint64(enc, 1)
	enc = append(enc, '5')
	enc = append(enc, 's')
	enc = binary.BigEndian.AppendUint64(enc, 1)
	enc = append(enc, 'x')
	enc = binary.BigEndian.AppendUint64(enc, uint64(len("query:q")))
	enc = append(enc, "query:q"...)
	enc = append(enc, 0) // absent
	sum := sha256.Sum256(enc)
	want := hex.EncodeToString(sum[:])

	e := newExtractor(t, "r", fieldsHash("header:X-A, json:#.n, query:q"))
	if got := key(t, e, withHeaders(jsonReq(`[{"n":5},{"n":"\u0078"}]`), "X-A", "1")); got != want {
		t.Errorf("Key() = %s, want %s", got, want)
	}
}

// A fields_hash key never equals the fingerprint of the same fields, nor
// the body_hash of a body spelling out its encoding: the encoding starts
// with a domain of its own.
func TestFieldsHashDiffersFromFingerprint(t *testing.T) {
	const spec, value = "header:X-A", "1"
	var enc []byte
	enc = binary.BigEndian.AppendUint64(enc, uint64(len(spec)))
	enc = append(enc, spec...)
	enc = append(enc, 1)
	enc = binary.BigEndian.AppendUint64(enc, uint64(len(value)))
	enc = append(enc, value...)
	r := extract.MapRequest{HTTPMethod: "POST", Headers: map[string]string{"X-A": value}, RawBody: enc}
	k := key(t, newExtractor(t, "r", fieldsHash(spec)), r)
	fp := hex.EncodeToString(newFingerprinter(t, extract.FingerprintFields, spec).Fingerprint(r))
	if k == fp {
		t.Errorf("the fields_hash key is the fields fingerprint %s", fp)
	}
	if body := key(t, newExtractor(t, "r", bodyHash), r); k == body {
		t.Errorf("the fields_hash key is the body_hash of a body spelling out its encoding: %s", k)
	}
}

func TestFieldsHashErrors(t *testing.T) {
	tests := []struct{ arg, want string }{
		{"", `sources[0]: fields_hash[0]: empty entry (want KIND:NAME entries separated by commas)`},
		{"json:a,,json:b", `sources[0]: fields_hash[1]: empty entry (want KIND:NAME entries separated by commas)`},
		{"json:a,", `sources[0]: fields_hash[1]: empty entry (want KIND:NAME entries separated by commas)`},
		{"json:a, jsn:b", `sources[0]: fields_hash[1]: "jsn:b": want KIND:NAME with KIND json, form, header or query`},
		{"eventId", `sources[0]: fields_hash[0]: "eventId": want KIND:NAME with KIND json, form, header or query`},
		{"json:a,header:a b", `sources[0]: fields_hash[1]: "header:a b": invalid header name "a b"`},
		{"json:a, json:a", `sources[0]: fields_hash[1]: "json:a" is already fields_hash[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			_, err := extract.NewExtractor("r", []extract.Source{fieldsHash(tt.arg)}, maxLen)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("NewExtractor(fields_hash %q) error = %v, want %q", tt.arg, err, tt.want)
			}
		})
	}
}
