package extract_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func newFingerprinter(tb testing.TB, mode string, fields ...string) *extract.Fingerprinter {
	tb.Helper()
	f, err := extract.NewFingerprinter(mode, fields)
	if err != nil {
		tb.Fatalf("NewFingerprinter(%q, %q): %v", mode, fields, err)
	}
	return f
}

var alipayFields = []string{"form:out_trade_no", "form:trade_no", "form:trade_status", "form:total_amount"}

// Notifications of Alipay payments: a resend changes notify_time and sign
// only; the others change a business field.
const (
	alipayFirst  = "gmt_create=2026-06-12+10%3A00%3A00&charset=utf-8&notify_time=2026-06-12+10%3A00%3A05&notify_type=trade_status_sync&notify_id=ac05099524730693a8b330c5ecf72da9786&out_trade_no=20260612001&trade_no=2026061222001404&trade_status=TRADE_SUCCESS&total_amount=88.00&sign_type=RSA2&sign=Xk2f%2BqA%3D%3D"
	alipayResend = "gmt_create=2026-06-12+10%3A00%3A00&charset=utf-8&notify_time=2026-06-12+10%3A04%3A05&notify_type=trade_status_sync&notify_id=ac05099524730693a8b330c5ecf72da9786&out_trade_no=20260612001&trade_no=2026061222001404&trade_status=TRADE_SUCCESS&total_amount=88.00&sign_type=RSA2&sign=Pq9%2Fzz1%3D"
	alipayOther  = "gmt_create=2026-06-12+10%3A00%3A00&charset=utf-8&notify_time=2026-06-12+10%3A00%3A05&notify_type=trade_status_sync&notify_id=ac05099524730693a8b330c5ecf72da9786&out_trade_no=20260612001&trade_no=2026061222001404&trade_status=TRADE_SUCCESS&total_amount=880.00&sign_type=RSA2&sign=Xk2f%2BqA%3D%3D"
	alipayClosed = "notify_time=2026-06-12+10%3A00%3A05&out_trade_no=20260612001&trade_no=2026061222001404&trade_status=TRADE_CLOSED&total_amount=88.00&sign=Zz"
)

func TestFingerprintBody(t *testing.T) {
	f := newFingerprinter(t, extract.FingerprintBody)
	body := []byte(`{"id":"evt_1","amount":100}`)
	want := sha256.Sum256(body)
	if got := f.Fingerprint(extract.MapRequest{RawBody: body}); !bytes.Equal(got, want[:]) {
		t.Errorf("Fingerprint() = %x, want %x", got, want)
	}
	empty := sha256.Sum256(nil)
	if got := f.Fingerprint(extract.MapRequest{}); !bytes.Equal(got, empty[:]) {
		t.Errorf("Fingerprint(empty body) = %x, want %x", got, empty)
	}
}

func TestFingerprintNone(t *testing.T) {
	f := newFingerprinter(t, extract.FingerprintNone)
	if got := f.Fingerprint(jsonReq(`{"a":1}`)); got != nil {
		t.Errorf("Fingerprint() = %x, want nil", got)
	}
}

// TestFingerprintFields compares fingerprints of pairs of deliveries: same
// says whether they must be equal.
func TestFingerprintFields(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		a, b   extract.MapRequest
		same   bool
	}{
		{"alipay resend", alipayFields, formReq(alipayFirst), formReq(alipayResend), true},
		{"alipay other amount", alipayFields, formReq(alipayFirst), formReq(alipayOther), false},
		{"alipay other status", alipayFields, formReq(alipayFirst), formReq(alipayClosed), false},
		{"form field order in the body does not matter", []string{"form:a", "form:b"}, formReq("a=1&b=2"), formReq("b=2&a=1"), true},
		{"form encoding does not matter", []string{"form:a"}, formReq("a=x+y"), formReq("a=x%20y"), true},
		{"form absent vs empty", []string{"form:a", "form:b"}, formReq("b=1"), formReq("a=&b=1"), false},
		{"form value moved between fields", []string{"form:a", "form:b"}, formReq("a=1&b="), formReq("a=&b=1"), false},
		{"form boundary shift", []string{"form:a", "form:b"}, formReq("a=12&b=3"), formReq("a=1&b=23"), false},
		{"json field", []string{"json:amount", "json:currency"}, jsonReq(`{"amount":100,"currency":"usd","ts":1}`), jsonReq(`{"ts":2,"currency":"usd","amount":100}`), true},
		{"json whitespace does not matter", []string{"json:amount"}, jsonReq(`{"amount":100}`), jsonReq(`{ "amount" : 100 }`), true},
		{"json string escapes do not matter", []string{"json:s"}, jsonReq(`{"s":"é"}`), jsonReq(`{"s":"\u00e9"}`), true},
		{"json other amount", []string{"json:amount"}, jsonReq(`{"amount":100}`), jsonReq(`{"amount":101}`), false},
		{"json string vs number", []string{"json:amount"}, jsonReq(`{"amount":"100"}`), jsonReq(`{"amount":100}`), false},
		{"json null vs absent", []string{"json:amount"}, jsonReq(`{"amount":null}`), jsonReq(`{}`), false},
		{"json empty string vs absent", []string{"json:amount"}, jsonReq(`{"amount":""}`), jsonReq(`{}`), false},
		{"json objects are compared", []string{"json:data"}, jsonReq(`{"data":{"a":1}}`), jsonReq(`{"data":{"a":2}}`), false},
		{"json object layout does not matter", []string{"json:data"}, jsonReq(`{"data":{"a":1,"b":[1,{"c":"é"}]}}`), jsonReq("{\"data\": {\"b\": [ 1, {\"c\" : \"\\u00e9\"} ],\n \"a\": 1}}"), true},
		{"json object key escapes do not matter", []string{"json:data"}, jsonReq(`{"data":{"\u0061":1}}`), jsonReq(`{"data":{"a":1}}`), true},
		{"json array order matters", []string{"json:data"}, jsonReq(`{"data":[1,2]}`), jsonReq(`{"data":[2,1]}`), false},
		{"json nested string vs number", []string{"json:data"}, jsonReq(`{"data":{"a":"1"}}`), jsonReq(`{"data":{"a":1}}`), false},
		{"json object vs its text", []string{"json:data"}, jsonReq(`{"data":{"a":1}}`), jsonReq(`{"data":"{\"a\":1}"}`), false},
		{"json nested keys and values do not run together", []string{"json:data"}, jsonReq(`{"data":{"ab":"c"}}`), jsonReq(`{"data":{"a":"bc"}}`), false},
		{"json from a modifier is read as a tree", []string{"json:data|@fromstr"}, jsonReq(`{"data":"{\"a\":1,\"b\":[2]}"}`), jsonReq(`{"data":"{ \"b\":[2], \"a\":1 }"}`), true},
		{"json from a modifier that is not JSON is its text", []string{"json:data|@fromstr"}, jsonReq(`{"data":"{\"a\":"}`), jsonReq(`{"data":"{\"a\": "}`), false},
		{"json of a form body is absent", []string{"json:amount"}, formReq("amount=1"), jsonReq(`{}`), true},
		{"form of a json body is absent", []string{"form:amount"}, jsonReq(`{"amount":"1"}`), formReq(""), true},
		{"header", []string{"header:X-Amount"}, withHeaders(jsonReq(`{}`), "x-amount", "1"), withHeaders(jsonReq(`{"other":1}`), "X-Amount", "1"), true},
		{"header absent vs empty", []string{"header:X-Amount"}, jsonReq(`{}`), withHeaders(jsonReq(`{}`), "X-Amount", ""), false},
		{"query", []string{"query:amount"}, extract.MapRequest{QueryArgs: map[string]string{"amount": "1"}}, extract.MapRequest{QueryArgs: map[string]string{"amount": "2"}}, false},
		{"query absent vs empty", []string{"query:amount"}, extract.MapRequest{}, extract.MapRequest{QueryArgs: map[string]string{"amount": ""}}, false},
		{"same text from different kinds", []string{"header:a", "query:a"}, extract.MapRequest{Headers: map[string]string{"a": "1"}}, extract.MapRequest{QueryArgs: map[string]string{"a": "1"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFingerprinter(t, extract.FingerprintFields, tt.fields...)
			fa, fb := f.Fingerprint(tt.a), f.Fingerprint(tt.b)
			if len(fa) != sha256.Size || len(fb) != sha256.Size {
				t.Fatalf("Fingerprint() lengths %d, %d; want %d", len(fa), len(fb), sha256.Size)
			}
			if bytes.Equal(fa, fb) != tt.same {
				t.Errorf("fingerprints %x and %x: equal = %v, want %v", fa, fb, !tt.same, tt.same)
			}
		})
	}
}

// A fields fingerprint never equals the body fingerprint of the same request.
func TestFingerprintFieldsDifferFromBody(t *testing.T) {
	r := formReq("a=1")
	fields := newFingerprinter(t, extract.FingerprintFields, "form:a").Fingerprint(r)
	body := newFingerprinter(t, extract.FingerprintBody).Fingerprint(r)
	if bytes.Equal(fields, body) {
		t.Errorf("fields and body fingerprints are both %x", fields)
	}
}

func TestNewFingerprinterErrors(t *testing.T) {
	tests := []struct {
		name   string
		mode   string
		fields []string
		want   string
	}{
		{"unknown mode", "bdy", nil, `unknown fingerprint mode "bdy" (want body, fields or none)`},
		{"empty mode", "", nil, `unknown fingerprint mode "" (want body, fields or none)`},
		{"fields without mode fields", "body", []string{"json:a"}, `fields are only used with mode "fields", not "body"`},
		{"mode fields without fields", "fields", nil, `mode "fields" needs at least one field`},
		{"no kind", "fields", []string{"amount"}, `fields[0]: "amount": want KIND:NAME with KIND json, form, header or query`},
		{"unknown kind", "fields", []string{"json:a", "body:x"}, `fields[1]: "body:x": want KIND:NAME with KIND json, form, header or query`},
		{"empty name", "fields", []string{"form:"}, `fields[0]: "form:": empty name`},
		{"bad header", "fields", []string{"header:a b"}, `fields[0]: "header:a b": invalid header name "a b"`},
		{"duplicate", "fields", []string{"json:a", "form:a", "json:a"}, `fields[2]: "json:a" is already fields[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := extract.NewFingerprinter(tt.mode, tt.fields)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("NewFingerprinter() error = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestFingerprintFieldsNeverEqualABodyCraftedToMatch: the fields encoding
// starts with its own domain, so that a body spelling out the encoding of
// a request's fields byte for byte still gets another fingerprint (a route
// switched between modes must not take one delivery's fields for another's
// body). The body below is the fields encoding without its domain.
func TestFingerprintFieldsNeverEqualABodyCraftedToMatch(t *testing.T) {
	const spec, value = "header:X-A", "1"
	var enc []byte
	enc = binary.BigEndian.AppendUint64(enc, uint64(len(spec)))
	enc = append(enc, spec...)
	enc = append(enc, 1) // tagText
	enc = binary.BigEndian.AppendUint64(enc, uint64(len(value)))
	enc = append(enc, value...)
	r := extract.MapRequest{HTTPMethod: "POST", Headers: map[string]string{"X-A": value}, RawBody: enc}
	fields := newFingerprinter(t, extract.FingerprintFields, spec).Fingerprint(r)
	body := newFingerprinter(t, extract.FingerprintBody).Fingerprint(r)
	if bytes.Equal(fields, body) {
		t.Errorf("a body crafted as the fields encoding has the fields fingerprint %x", fields)
	}
}

// TestFingerprintAlso: in mode fields, a record made in mode body (the
// body's digest) is still recognised as the record of a retry; other modes
// need nothing.
func TestFingerprintAlso(t *testing.T) {
	r := jsonReq(`{"id":"e1","data": {"b":2, "a":1}}`)
	body := sha256.Sum256(r.RawBody)
	if also := newFingerprinter(t, extract.FingerprintFields, "json:data").Also(r); len(also) != 1 || !bytes.Equal(also[0], body[:]) {
		t.Errorf("Also() = %x, want [%x]", also, body)
	}
	for _, mode := range []string{extract.FingerprintBody, extract.FingerprintNone} {
		if also := newFingerprinter(t, mode).Also(r); also != nil {
			t.Errorf("Also() in mode %s = %x, want nil", mode, also)
		}
	}
}

// A GJSON modifier can make text that is not JSON (@fromstr of a string
// that is not, or of one nested deeper than MaxJSONDepth): it is digested
// as its text, tagged as a JSON literal, as spelled out here.
func TestFingerprintFieldsModifierText(t *testing.T) {
	const spec = "json:data|@fromstr"
	f := newFingerprinter(t, extract.FingerprintFields, spec)
	for _, text := range []string{`{"a":`, `[1] [2]`, strings.Repeat("[", 5000) + strings.Repeat("]", 5000)} {
		enc := []byte("hookstamp fingerprint fields v1\n")
		enc = binary.BigEndian.AppendUint64(enc, uint64(len(spec)))
		enc = append(enc, spec...)
		enc = append(enc, 2) // JSON literal
		enc = binary.BigEndian.AppendUint64(enc, uint64(len(text)))
		enc = append(enc, text...)
		want := sha256.Sum256(enc)
		quoted, _ := json.Marshal(text)
		if got := f.Fingerprint(jsonReq(`{"data":` + string(quoted) + `}`)); !bytes.Equal(got, want[:]) {
			t.Errorf("Fingerprint() of %.40q = %x, want %x", text, got, want)
		}
	}
}
