package extract_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

const maxLen = 255

func newExtractor(tb testing.TB, route string, sources ...extract.Source) *extract.Extractor {
	tb.Helper()
	e, err := extract.NewExtractor(route, sources, maxLen)
	if err != nil {
		tb.Fatalf("NewExtractor(%q, %v): %v", route, sources, err)
	}
	return e
}

func header(name string) extract.Source   { return extract.Source{Kind: extract.KindHeader, Arg: name} }
func jsonPath(path string) extract.Source { return extract.Source{Kind: extract.KindJSON, Arg: path} }
func form(name string) extract.Source     { return extract.Source{Kind: extract.KindForm, Arg: name} }
func query(name string) extract.Source    { return extract.Source{Kind: extract.KindQuery, Arg: name} }
func tmpl(t string) extract.Source        { return extract.Source{Kind: extract.KindTemplate, Arg: t} }

var bodyHash = extract.Source{Kind: extract.KindBodyHash, Arg: "sha256"}

func jsonReq(body string) extract.MapRequest {
	return extract.MapRequest{
		HTTPMethod: "POST",
		Headers:    map[string]string{"Content-Type": "application/json"},
		RawBody:    []byte(body),
	}
}

func formReq(body string) extract.MapRequest {
	return extract.MapRequest{
		HTTPMethod: "POST",
		Headers:    map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
		RawBody:    []byte(body),
	}
}

func withHeaders(r extract.MapRequest, kv ...string) extract.MapRequest {
	h := map[string]string{}
	for k, v := range r.Headers {
		h[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	r.Headers = h
	return r
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// nested returns a JSON body {"id":"deep-ok","n":[[…]]} nesting depth deep.
func nested(depth int) string {
	return `{"id":"deep-ok","n":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

func TestKey(t *testing.T) {
	alipay := "notify_time=2026-06-12+10%3A00%3A00&notify_id=ac05099524730693a8b330c5ecf72da9786&out_trade_no=20260612001&total_amount=88.00&sign=abc%2Bdef%3D"
	tests := []struct {
		name    string
		sources []extract.Source
		req     extract.MapRequest
		want    string // "" = no key
		wantErr error
	}{
		// header
		{"header", []extract.Source{header("X-Event-Id")}, withHeaders(jsonReq(`{}`), "X-Event-Id", "evt_1"), "evt_1", nil},
		{"header name is case-insensitive", []extract.Source{header("X-Event-Id")}, withHeaders(jsonReq(`{}`), "x-event-id", "evt_1"), "evt_1", nil},
		{"header absent", []extract.Source{header("X-Event-Id")}, jsonReq(`{}`), "", nil},
		{"header empty", []extract.Source{header("X-Event-Id")}, withHeaders(jsonReq(`{}`), "X-Event-Id", ""), "", nil},
		{"header value is kept byte for byte", []extract.Source{header("X-Event-Id")}, withHeaders(jsonReq(`{}`), "X-Event-Id", "Evt  1"), "Evt  1", nil},
		// key_header could not carry them: two records, one Idempotency-Key.
		{"a key ending in a space is refused", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"evt_1 "}`), "evt_1 ", extract.ErrKeySpace},
		{"a key beginning with a space is refused", []extract.Source{jsonPath("id")}, jsonReq(`{"id":" evt_1"}`), " evt_1", extract.ErrKeySpace},

		// json
		{"json string", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"evt_1"}`), "evt_1", nil},
		{"json nested path", []extract.Source{jsonPath("data.object.id")}, jsonReq(`{"data":{"object":{"id":"pi_3"}}}`), "pi_3", nil},
		{"json integer keeps its text", []extract.Source{jsonPath("n")}, jsonReq(`{"n":12}`), "12", nil},
		{"json decimal keeps its text", []extract.Source{jsonPath("n")}, jsonReq(`{"n":1.50}`), "1.50", nil},
		{"json exponent keeps its text", []extract.Source{jsonPath("n")}, jsonReq(`{"n":-3E2}`), "-3E2", nil},
		{"json big integer is not rounded", []extract.Source{jsonPath("n")}, jsonReq(`{"n":12345678901234567890123}`), "12345678901234567890123", nil},
		{"json true", []extract.Source{jsonPath("b")}, jsonReq(`{"b":true}`), "true", nil},
		{"json false", []extract.Source{jsonPath("b")}, jsonReq(`{"b":false}`), "false", nil},
		{"json null is absent", []extract.Source{jsonPath("id")}, jsonReq(`{"id":null}`), "", nil},
		{"json object is absent", []extract.Source{jsonPath("id")}, jsonReq(`{"id":{"a":1}}`), "", nil},
		{"json array is absent", []extract.Source{jsonPath("id")}, jsonReq(`{"id":[1,2]}`), "", nil},
		{"json empty string is absent", []extract.Source{jsonPath("id")}, jsonReq(`{"id":""}`), "", nil},
		{"json missing path", []extract.Source{jsonPath("data.id")}, jsonReq(`{"data":{}}`), "", nil},
		{"json escaped string is unescaped", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"a\"b\\c\/d\u005fe"}`), `a"b\c/d_e`, nil},
		{"json unicode escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"caf\u00e9-\ud83d\ude00"}`), "café-😀", nil},
		{"json raw utf-8", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"订单-1"}`), "订单-1", nil},
		{"json array index", []extract.Source{jsonPath("items.1.id")}, jsonReq(`{"items":[{"id":"a"},{"id":"b"}]}`), "b", nil},
		{"json array count", []extract.Source{jsonPath("items.#")}, jsonReq(`{"items":[1,2,3]}`), "3", nil},
		{"json top-level array", []extract.Source{jsonPath("0.id")}, jsonReq(`[{"id":"x"}]`), "x", nil},
		// A member named twice on the path is refused, whichever value
		// the key would have had: the application reads the last.
		{"json duplicate", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","id":"second"}`), "first", extract.ErrDuplicateMember},
		{"json duplicate, escaped", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","\u0069d":"second"}`), "first", extract.ErrDuplicateMember},
		{"json duplicate of an absent value", []extract.Source{jsonPath("id"), query("id")}, func() extract.MapRequest {
			r := jsonReq(`{"id":null,"id":"second"}`)
			r.QueryArgs = map[string]string{"id": "q"}
			return r
		}(), "", extract.ErrDuplicateMember},
		{"json duplicate at every level", []extract.Source{jsonPath("a.b")}, jsonReq(`{"a":0,"a":{"b":"second"}}`), "", extract.ErrDuplicateMember},
		{"json duplicate object", []extract.Source{jsonPath("a.b")}, jsonReq(`{"a":{"c":1},"a":{"b":"second"}}`), "", extract.ErrDuplicateMember},
		{"json nested duplicate", []extract.Source{jsonPath("a.b")}, jsonReq(`{"a":{"b":"first","b":"second"}}`), "first", extract.ErrDuplicateMember},
		{"json duplicate in a template", []extract.Source{tmpl("{json:a}-{json:b}")}, jsonReq(`{"a":"x","b":"y","b":"z"}`), "x-y", extract.ErrDuplicateMember},
		// Go's encoding/json and Json.NET read a member spelled in another
		// case as the same, the last one winning.
		{"json duplicate in another case", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","ID":"second"}`), "first", extract.ErrDuplicateMember},
		{"json duplicate in another case, before", []extract.Source{jsonPath("id")}, jsonReq(`{"Id":"first","id":"second"}`), "second", extract.ErrDuplicateMember},
		{"json duplicate with a long s", []extract.Source{jsonPath("status")}, jsonReq(`{"status":"paid","ſtatus":"failed"}`), "paid", extract.ErrDuplicateMember},
		{"json duplicate with a Kelvin sign, escaped", []extract.Source{jsonPath("key")}, jsonReq(`{"key":"first","Key":"second"}`), "first", extract.ErrDuplicateMember},
		{"json duplicate in another case on the path", []extract.Source{jsonPath("data.id")}, jsonReq(`{"data":{"id":"first"},"DATA":{"id":"second"}}`), "first", extract.ErrDuplicateMember},
		{"json member only in another case", []extract.Source{jsonPath("id"), header("X-Id")}, withHeaders(jsonReq(`{"ID":"second"}`), "X-Id", "h"), "", extract.ErrDuplicateMember},
		{"json names sharing a prefix", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","idx":1,"Id2":2,"i":3,"ids":[4]}`), "first", nil},
		{"json duplicate in another case off the path", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","x":1,"X":2}`), "first", nil},
		{"json duplicate off the path", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"first","x":1,"x":2}`), "first", nil},
		{"json duplicate behind a key from a header", []extract.Source{header("X-Id"), jsonPath("id")}, withHeaders(jsonReq(`{"id":"a","id":"b"}`), "X-Id", "h"), "h", nil},
		{"json path into an array element", []extract.Source{jsonPath("data.items.1.id")}, jsonReq(`{"data":{"items":[{"id":"a"},{"id":"b"}]}}`), "b", nil},
		{"json gjson syntax is gjson's", []extract.Source{jsonPath(`items.#(kind=="x").id`)}, jsonReq(`{"items":[{"kind":"y","id":"1"},{"kind":"x","id":"2"}]}`), "2", nil},
		{"json whitespace", []extract.Source{jsonPath("a.id")}, jsonReq(" {\n \"a\" : { \"id\" :\t\"w\" } } \n"), "w", nil},
		{"json body under text/plain is read", []extract.Source{jsonPath("id")}, withHeaders(jsonReq(`{"id":"x"}`), "Content-Type", "text/plain"), "x", nil},
		{"json body without content type is read", []extract.Source{jsonPath("id")}, extract.MapRequest{RawBody: []byte(`{"id":"x"}`)}, "x", nil},
		{"json source on a form body", []extract.Source{jsonPath("notify_id")}, formReq(alipay), "", nil},
		{"json source on plain text", []extract.Source{jsonPath("id")}, withHeaders(jsonReq(`id=1`), "Content-Type", "text/plain"), "", nil},
		{"json source on empty body", []extract.Source{jsonPath("id")}, jsonReq(``), "", nil},
		{"malformed json body", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"x"`), "", extract.ErrMalformedBody},
		{"malformed json with trailing garbage", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"x"} x`), "", extract.ErrMalformedBody},
		{"malformed +json body", []extract.Source{jsonPath("id")}, withHeaders(jsonReq(`{id:1}`), "Content-Type", "Application/CloudEvents+JSON; charset=utf-8"), "", extract.ErrMalformedBody},
		{"malformed json but a later source yields", []extract.Source{jsonPath("id"), header("X-Id")}, withHeaders(jsonReq(`{"id":`), "X-Id", "h1"), "h1", nil},
		{"malformed json in a template", []extract.Source{tmpl("{json:a}-{json:b}")}, jsonReq(`{"a":"1","b":`), "", extract.ErrMalformedBody},
		{"nested within the depth limit", []extract.Source{jsonPath("id")}, jsonReq(nested(extract.MaxJSONDepth)), "deep-ok", nil},
		{"nested beyond the depth limit", []extract.Source{jsonPath("id")}, jsonReq(nested(10000)), "", extract.ErrMalformedBody},
		{"nested beyond the depth limit, not claiming json", []extract.Source{jsonPath("id")}, withHeaders(jsonReq(nested(10000)), "Content-Type", "text/plain"), "", nil},
		{"brackets inside strings do not count as depth", []extract.Source{jsonPath("id")}, jsonReq(`{"s":"` + strings.Repeat("[{", 5000) + `\"","id":"x"}`), "x", nil},

		// form
		{"form field", []extract.Source{form("notify_id")}, formReq(alipay), "ac05099524730693a8b330c5ecf72da9786", nil},
		{"form percent-encoding", []extract.Source{form("k")}, formReq("k=a%20b%2Bc"), "a b+c", nil},
		{"form plus is a space", []extract.Source{form("k")}, formReq("k=a+b"), "a b", nil},
		{"form repeated field is refused", []extract.Source{form("k")}, formReq("k=first&k=second"), "first", extract.ErrDuplicateField},
		{"form escaped field name", []extract.Source{form("notify_id")}, formReq("notify%5Fid=n1"), "n1", nil},
		{"form name is exact", []extract.Source{form("k")}, formReq("K=x&kk=y&k2=z"), "", nil},
		{"form value with '='", []extract.Source{form("k")}, formReq("k=a=b"), "a=b", nil},
		{"form field absent", []extract.Source{form("k")}, formReq("a=1&b=2"), "", nil},
		{"form first value empty", []extract.Source{form("k")}, formReq("k=&x=1"), "", nil},
		{"form field without '=' is empty", []extract.Source{form("k")}, formReq("k&x=1"), "", nil},
		{"form pair with bad escape is skipped", []extract.Source{form("k")}, formReq("k=%zz&k=ok"), "ok", nil},
		{"form pair with ';' is skipped", []extract.Source{form("k")}, formReq("k=a;b&k=c"), "c", nil},
		{"form empty pairs are skipped", []extract.Source{form("k")}, formReq("&&k=v&"), "v", nil},
		{"form source on a json body", []extract.Source{form("k")}, jsonReq(`{"k":"v"}`), "", nil},
		{"form source without content type", []extract.Source{form("k")}, extract.MapRequest{RawBody: []byte("k=v")}, "", nil},
		{"form field past the pair limit", []extract.Source{form("k")}, formReq(strings.Repeat("a=1&", extract.MaxFormFields) + "k=v"), "", nil},
		{"form field at the pair limit", []extract.Source{form("k")}, formReq(strings.Repeat("a=1&", extract.MaxFormFields-1) + "k=v"), "v", nil},

		// query
		{"query", []extract.Source{query("event_id")}, extract.MapRequest{QueryArgs: map[string]string{"event_id": "q1"}}, "q1", nil},
		{"query absent", []extract.Source{query("event_id")}, extract.MapRequest{QueryArgs: map[string]string{"other": "q1"}}, "", nil},

		// template
		{"template classic", []extract.Source{tmpl("{json:order_id}-{json:event}-{json:seq}")}, jsonReq(`{"order_id":"20260612001","event":"CREATE","seq":"01"}`), "20260612001-CREATE-01", nil},
		{"template with a number", []extract.Source{tmpl("{json:order_id}-{json:seq}")}, jsonReq(`{"order_id":20260612001,"seq":1}`), "20260612001-1", nil},
		{"template missing part", []extract.Source{tmpl("{json:order_id}-{json:event}-{json:seq}")}, jsonReq(`{"order_id":"20260612001","event":"CREATE"}`), "", nil},
		{"template empty part", []extract.Source{tmpl("{json:order_id}-{json:event}")}, jsonReq(`{"order_id":"20260612001","event":""}`), "", nil},
		{"template null part", []extract.Source{tmpl("{json:order_id}-{json:event}")}, jsonReq(`{"order_id":"20260612001","event":null}`), "", nil},
		{"template route and method", []extract.Source{tmpl("{route}/{method}/{header:X-Id}")}, withHeaders(jsonReq(`{}`), "X-Id", "h"), "stripe/POST/h", nil},
		{"template form and query", []extract.Source{tmpl("{form:a}.{query:b}")}, func() extract.MapRequest {
			r := formReq("a=x+y")
			r.QueryArgs = map[string]string{"b": "z"}
			return r
		}(), "x y.z", nil},
		{"template missing part falls through", []extract.Source{tmpl("{json:a}:{json:b}"), header("X-Id")}, withHeaders(jsonReq(`{"a":"1"}`), "X-Id", "h"), "h", nil},

		// body_hash
		{"body hash", []extract.Source{bodyHash}, jsonReq(`{"a":1}`), sha256Hex(`{"a":1}`), nil},
		{"body hash of any body", []extract.Source{bodyHash}, formReq("x"), sha256Hex("x"), nil},
		{"body hash of empty body", []extract.Source{bodyHash}, jsonReq(``), "", nil},

		// order
		{"first non-empty wins", []extract.Source{header("X-Id"), jsonPath("id"), query("id")}, func() extract.MapRequest {
			r := jsonReq(`{"id":"from-json"}`)
			r.QueryArgs = map[string]string{"id": "from-query"}
			return r
		}(), "from-json", nil},
		{"empty values are skipped", []extract.Source{header("X-Id"), jsonPath("id"), query("id")}, func() extract.MapRequest {
			r := withHeaders(jsonReq(`{"id":""}`), "X-Id", "")
			r.QueryArgs = map[string]string{"id": "from-query"}
			return r
		}(), "from-query", nil},
		{"earlier source wins over later", []extract.Source{query("id"), jsonPath("id")}, func() extract.MapRequest {
			r := jsonReq(`{"id":"from-json"}`)
			r.QueryArgs = map[string]string{"id": "from-query"}
			return r
		}(), "from-query", nil},
		{"body hash as last resort", []extract.Source{header("X-Id"), bodyHash}, jsonReq(`{"a":1}`), sha256Hex(`{"a":1}`), nil},
		{"nothing found", []extract.Source{header("X-Id"), jsonPath("id"), form("id"), query("id")}, jsonReq(`{}`), "", nil},

		// validation of the winning value
		{"too long", []extract.Source{header("X-Id")}, withHeaders(jsonReq(`{}`), "X-Id", strings.Repeat("k", maxLen+1)), strings.Repeat("k", maxLen), extract.ErrKeyTooLong},
		{"exactly max length", []extract.Source{header("X-Id")}, withHeaders(jsonReq(`{}`), "X-Id", strings.Repeat("k", maxLen)), strings.Repeat("k", maxLen), nil},
		{"template too long", []extract.Source{tmpl("{json:a}-{json:b}")}, jsonReq(`{"a":"` + strings.Repeat("a", 200) + `","b":"` + strings.Repeat("b", 100) + `"}`), strings.Repeat("a", 200) + "-" + strings.Repeat("b", 54), extract.ErrKeyTooLong},
		{"template too long with a part absent is no key: the next source is tried", []extract.Source{tmpl("{json:a}-{json:b}"), header("X-Id")},
			withHeaders(jsonReq(`{"a":"`+strings.Repeat("a", 300)+`"}`), "X-Id", "evt_h"), "evt_h", nil},
		{"template too long with a later part absent is no key", []extract.Source{tmpl("{json:a}-{json:b}")},
			jsonReq(`{"a":"` + strings.Repeat("a", 300) + `"}`), "", nil},
		{"template too long and not UTF-8: too long", []extract.Source{tmpl("{json:a}-{json:b}")},
			jsonReq(`{"a":"\ud800","b":"` + strings.Repeat("b", 300) + `"}`), "\ufffd-" + strings.Repeat("b", maxLen-4), extract.ErrKeyTooLong},
		{"form value too long", []extract.Source{form("k")}, formReq("k=" + strings.Repeat("%41", 300)), strings.Repeat("A", maxLen), extract.ErrKeyTooLong},
		{"too long does not fall through", []extract.Source{header("X-Id"), query("id")}, extract.MapRequest{Headers: map[string]string{"X-Id": strings.Repeat("k", 1000)}, QueryArgs: map[string]string{"id": "q"}}, strings.Repeat("k", maxLen), extract.ErrKeyTooLong},
		{"CRLF", []extract.Source{header("X-Id")}, withHeaders(jsonReq(`{}`), "X-Id", "a\r\nSet-Cookie: x"), "a\r\nSet-Cookie: x", extract.ErrKeyControl},
		{"NUL from a JSON escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"a\u0000b"}`), "a\x00b", extract.ErrKeyControl},
		{"line separator", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"a\u2028b"}`), "a\u2028b", extract.ErrKeyControl},
		{"not UTF-8", []extract.Source{query("id")}, extract.MapRequest{QueryArgs: map[string]string{"id": "a\xffb"}}, "a\xffb", extract.ErrKeyNotUTF8},
		{"not UTF-8 from a form escape", []extract.Source{form("k")}, formReq("k=%C3%28"), "\xc3(", extract.ErrKeyNotUTF8},
		{"lone high surrogate escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"evt\ud800"}`), "evt\ufffd", extract.ErrKeyNotUTF8},
		{"lone low surrogate escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"\udfffevt"}`), "\ufffdevt", extract.ErrKeyNotUTF8},
		{"surrogates in the wrong order", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"\ude00\ud83d"}`), "\ufffd\ufffd", extract.ErrKeyNotUTF8},
		{"high surrogate before another escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"\ud83d\n"}`), "\ufffd\n", extract.ErrKeyNotUTF8},
		{"lone surrogate in a template", []extract.Source{tmpl("{json:a}-{json:b}")}, jsonReq(`{"a":"\ud800","b":"x"}`), "\ufffd-x", extract.ErrKeyNotUTF8},
		{"escaped backslash before u is no escape", []extract.Source{jsonPath("id")}, jsonReq(`{"id":"a\\ud800"}`), `a\ud800`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "stripe", tt.sources...)
			got, err := e.Key(tt.req, nil)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Key() error = %v, want %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("Key() = %q (%d bytes), want %q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

func TestKeyAbsentIsNil(t *testing.T) {
	e := newExtractor(t, "r", header("X-Id"))
	got, err := e.Key(jsonReq(`{}`), make([]byte, 0, 64))
	if got != nil || err != nil {
		t.Fatalf("Key() = %q, %v; want nil, nil", got, err)
	}
}

func TestKeyAppendsToDst(t *testing.T) {
	e := newExtractor(t, "r", tmpl("{json:a}-{json:missing}"), header("X-Id"))
	dst := append(make([]byte, 0, 64), "prefix:"...)
	got, err := e.Key(withHeaders(jsonReq(`{"a":"partial"}`), "X-Id", "evt"), dst)
	if err != nil {
		t.Fatal(err)
	}
	// The abandoned template must leave nothing behind.
	if string(got) != "prefix:evt" {
		t.Fatalf("Key() = %q, want %q", got, "prefix:evt")
	}
	// The length limit applies to the key, not to what dst held before.
	e = newExtractor(t, "r", header("X-Id"))
	got, err = e.Key(withHeaders(jsonReq(`{}`), "X-Id", strings.Repeat("k", maxLen)), dst)
	if err != nil || len(got) != len("prefix:")+maxLen {
		t.Fatalf("Key() = %d bytes, %v; want %d bytes, nil", len(got), err, len("prefix:")+maxLen)
	}
}

func TestKeyIsAnErrInvalidKey(t *testing.T) {
	for _, err := range []error{extract.ErrKeyEmpty, extract.ErrKeyTooLong, extract.ErrKeyNotUTF8, extract.ErrKeyControl} {
		if !errors.Is(err, extract.ErrInvalidKey) {
			t.Errorf("errors.Is(%v, ErrInvalidKey) = false", err)
		}
	}
	if errors.Is(extract.ErrMalformedBody, extract.ErrInvalidKey) {
		t.Error("ErrMalformedBody matches ErrInvalidKey")
	}
}

// A huge body must cost the key no more than max length, whatever the source.
func TestKeyHugeValueIsCapped(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	e := newExtractor(t, "r", tmpl("{json:a}-{json:a}-{json:a}-{json:a}"))
	var r extract.Request = jsonReq(`{"a":"` + big + `"}`)
	var got []byte
	var err error
	allocs := testing.AllocsPerRun(5, func() {
		got, err = e.Key(r, make([]byte, 0, maxLen))
	})
	if !errors.Is(err, extract.ErrKeyTooLong) || len(got) != maxLen {
		t.Fatalf("Key() = %d bytes, %v; want %d bytes, ErrKeyTooLong", len(got), err, maxLen)
	}
	if allocs > 1 {
		t.Errorf("Key() allocated %v times for a 1 MiB value, want at most the dst buffer", allocs)
	}
}

func TestNewExtractorErrors(t *testing.T) {
	tests := []struct {
		name    string
		sources []extract.Source
		maxLen  int
		want    string
	}{
		{"no sources", nil, 255, "no key sources"},
		{"max length", []extract.Source{header("X")}, 0, "max length 0: must be positive"},
		{"unknown kind", []extract.Source{header("X"), {Kind: "jsn", Arg: "id"}}, 255, `sources[1]: unknown source "jsn" (want header, json, form, query, template, body_hash or fields_hash)`},
		{"body hash algorithm", []extract.Source{{Kind: "body_hash", Arg: "md5"}}, 255, `sources[0]: body_hash: unsupported algorithm "md5" (want sha256)`},
		{"empty header", []extract.Source{header("")}, 255, "sources[0]: header: empty name"},
		{"bad header", []extract.Source{header("X Id")}, 255, `sources[0]: header: invalid header name "X Id"`},
		{"empty json path", []extract.Source{jsonPath("")}, 255, "sources[0]: json: empty name"},
		{"spaced form name", []extract.Source{form(" k")}, 255, "sources[0]: form: name has surrounding spaces"},
		{"empty query", []extract.Source{query("")}, 255, "sources[0]: query: empty name"},
		{"bad template", []extract.Source{tmpl("{jsn:a}")}, 255, `sources[0]: template "{jsn:a}": unknown placeholder {jsn:a} (want header, json, form, query, route or method)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := extract.NewExtractor("r", tt.sources, tt.maxLen)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("NewExtractor() error = %v, want %q", err, tt.want)
			}
		})
	}
}

// Key must not allocate for the common sources when dst has room: it runs on
// every delivery.
func TestKeyDoesNotAllocate(t *testing.T) {
	tests := []struct {
		name   string
		source extract.Source
		req    extract.MapRequest
	}{
		{"header", header("X-Event-Id"), withHeaders(jsonReq(`{}`), "X-Event-Id", "evt_1NXWPnLkdIwHu7ix")},
		{"json", jsonPath("data.object.id"), jsonReq(stripeBody)},
		{"json number", jsonPath("created"), jsonReq(stripeBody)},
		{"form", form("notify_id"), formReq("notify_time=2026-06-12+10%3A00%3A00&notify_id=ac05099524730693a8b330c5ecf72da9786")},
		{"query", query("id"), extract.MapRequest{QueryArgs: map[string]string{"id": "q1"}}},
		{"template", tmpl("{json:type}:{json:data.object.id}"), jsonReq(stripeBody)},
		{"body hash", bodyHash, jsonReq(stripeBody)},
		{"fields hash", fieldsHash("json:id,json:data.object.amount,header:X-Event-Id,form:a,query:q"), withHeaders(jsonReq(stripeBody), "X-Event-Id", "evt_1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExtractor(t, "r", tt.source)
			var r extract.Request = tt.req // boxed once, as a server would
			dst := make([]byte, 0, maxLen)
			var key []byte
			var err error
			allocs := testing.AllocsPerRun(100, func() {
				key, err = e.Key(r, dst[:0])
			})
			if err != nil || len(key) == 0 {
				t.Fatalf("Key() = %q, %v; want a key", key, err)
			}
			if allocs != 0 {
				t.Errorf("Key() allocates %v times per call, want 0", allocs)
			}
		})
	}
}

// stripeBody is a Stripe-shaped event of about 1 KiB.
var stripeBody = `{
  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1686089970,
  "data": {
    "object": {
      "id": "pi_3NG8Dt2eZvKYlo2C1rdVtu3G",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_received": 2000,
      "capture_method": "automatic",
      "client_secret": "pi_3NG8Dt2eZvKYlo2C1rdVtu3G_secret_w9HEuvcoqJdBQzVMt8wUTZbpF",
      "confirmation_method": "automatic",
      "created": 1686089969,
      "currency": "usd",
      "customer": "cus_O1Xhn6jS2Xk3ZW",
      "description": "Subscription creation",
      "latest_charge": "ch_3NG8Dt2eZvKYlo2C1Bw4zQAN",
      "livemode": false,
      "metadata": {"order_id": "20260612001", "note": "caf\u00e9"},
      "payment_method": "pm_1NG8Dr2eZvKYlo2CzMUrL0Yi",
      "payment_method_types": ["card", "link"],
      "status": "succeeded"
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": "req_3T5Kx1pQ2nD0aZ", "idempotency_key": "8a1c0f3e-6a9d-4ef1-9f2b-6f3c2b1a0d9e"},
  "type": "payment_intent.succeeded"
}`
