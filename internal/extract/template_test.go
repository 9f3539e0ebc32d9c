package extract_test

import (
	"errors"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func TestParseTemplate(t *testing.T) {
	valid := []string{
		"{json:order_id}-{json:event}-{json:seq}",
		"{json:type}:{json:data.object.id}",
		"{header:X-Event-Id}",
		"{route}:{method}:{query:id}",
		"pre {form:notify_id} post",
		"{json:items.#(type==\"a\").id}",
		"{json:a\\.b}",
		"{header:x-A_b.c~1}",
		"ünïcode {json:ключ}",
	}
	for _, s := range valid {
		t.Run(s, func(t *testing.T) {
			tpl, err := extract.ParseTemplate(s)
			if err != nil {
				t.Fatalf("ParseTemplate(%q): %v", s, err)
			}
			if got := tpl.String(); got != s {
				t.Errorf("String() = %q, want %q", got, s)
			}
		})
	}
}

func TestParseTemplateErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", `template "": empty template`},
		{"{json:a", `template "{json:a": unclosed '{' at offset 0`},
		{"a}{json:b}", `template "a}{json:b}": unexpected '}' at offset 1`},
		{"{json:a}}", `template "{json:a}}": unexpected '}' at offset 8`},
		{"{json:{a}}", `template "{json:{a}}": '{' inside the placeholder opened at offset 0`},
		{"{}", `template "{}": empty placeholder {}`},
		{"{:a}", `template "{:a}": unknown placeholder {:a} (want header, json, form, query, route or method)`},
		{"{jsn:a}", `template "{jsn:a}": unknown placeholder {jsn:a} (want header, json, form, query, route or method)`},
		{"{JSON:a}", `template "{JSON:a}": unknown placeholder {JSON:a} (want header, json, form, query, route or method)`},
		{"{json}", `template "{json}": placeholder {json} needs a name, as in {json:NAME}`},
		{"{json:}", `template "{json:}": placeholder {json:}: empty name`},
		{"{json: a}", `template "{json: a}": placeholder {json: a}: name has surrounding spaces`},
		{"{header:X Y}", `template "{header:X Y}": placeholder {header:X Y}: invalid header name "X Y"`},
		{"{route:x}-{json:a}", `template "{route:x}-{json:a}": placeholder {route:x} takes no name`},
		{"{method:}-{json:a}", `template "{method:}-{json:a}": placeholder {method:} takes no name`},
		{"fixed", `template "fixed": no {header:…}, {json:…}, {form:…} or {query:…} placeholder: every delivery would get the same key`},
		{"{route}-{method}", `template "{route}-{method}": no {header:…}, {json:…}, {form:…} or {query:…} placeholder: every delivery would get the same key`},
		{"{json:a}{json:b}", `template "{json:a}{json:b}": placeholder at offset 8 follows another with no text between them: their values could not be told apart`},
		{"{route}{json:a}", `template "{route}{json:a}": placeholder at offset 7 follows another with no text between them: their values could not be told apart`},
		{"{json:a}%{json:b}", `template "{json:a}%{json:b}": the text "%" after a placeholder must not start with '%': it could not be told from an escaped value`},
		{"{json:a}%2{json:b}", `template "{json:a}%2{json:b}": the text "%2" after a placeholder must not start with '%': it could not be told from an escaped value`},
		{"{json:a}→{json:b}", `template "{json:a}→{json:b}": the text "→" after a placeholder must start with an ASCII character: it separates values`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tpl, err := extract.ParseTemplate(tt.in)
			if err == nil {
				t.Fatalf("ParseTemplate(%q) = %q, want error %q", tt.in, tpl, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseTemplate(%q) error = %q, want %q", tt.in, err, tt.want)
			}
		})
	}
}

// Distinct events never share a template key: values are escaped where
// they hold a separator's first character or '%'; plain values are joined
// as they are.
func TestTemplateKeysDoNotCollide(t *testing.T) {
	e := newExtractor(t, "pay-in", tmpl("{json:order_id}-{json:event}-{json:seq}"))
	key := func(body string) string {
		t.Helper()
		k, err := e.Key(jsonReq(body), nil)
		if err != nil {
			t.Fatalf("Key(%s): %v", body, err)
		}
		return string(k)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"order_id":"20260612001","event":"CREATE","seq":"01"}`, "20260612001-CREATE-01"},
		{`{"order_id":"A-1","event":"PAY","seq":"01"}`, "A%2D1-PAY-01"},
		{`{"order_id":"A","event":"1-PAY","seq":"01"}`, "A-1%2DPAY-01"},
		{`{"order_id":"A%2D1","event":"PAY","seq":"01"}`, "A%252D1-PAY-01"},
		{`{"order_id":"ü-x","event":"PAY","seq":1}`, "ü%2Dx-PAY-1"},
	} {
		if got := key(tc.body); got != tc.want {
			t.Errorf("Key(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}

	// {route} is a value like any other; a single placeholder is never
	// escaped (the fixed text around it delimits it).
	r := newExtractor(t, "pay-in", tmpl("{route}:{json:id}"))
	if k, err := r.Key(jsonReq(`{"id":"a:b"}`), nil); err != nil || string(k) != "pay-in:a%3Ab" {
		t.Errorf("{route}:{json:id} = %q, %v; want %q", k, err, "pay-in:a%3Ab")
	}
	one := newExtractor(t, "r", tmpl("evt-{json:id}-x"))
	if k, err := one.Key(jsonReq(`{"id":"a-b%"}`), nil); err != nil || string(k) != "evt-a-b%-x" {
		t.Errorf("evt-{json:id}-x = %q, %v; want %q", k, err, "evt-a-b%-x")
	}
}

// A key refused as too long is logged and put on the span (SPEC §7), cut
// at key.max_length: the operator must see the start of the real, escaped
// key, not the raw values joined (which the escaping exists to tell
// apart, and which may even fit the limit).
func TestTemplateTooLongKeyIsTheEscapedKeyCut(t *testing.T) {
	e, err := extract.NewExtractor("r", []extract.Source{tmpl("{json:a}-{json:b}")}, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, want string }{
		// The escaped value outgrows the limit ("1%2D2%2D3-4" in full).
		{`{"a":"1-2-3","b":"4"}`, "1%2D2%2D"},
		// The raw value alone outgrows it ("1%2D2%2D3%2D4%2D5-4").
		{`{"a":"1-2-3-4-5","b":"4"}`, "1%2D2%2D"},
		// Only the second value outgrows it ("a-1%2D2%2D3").
		{`{"a":"a","b":"1-2-3"}`, "a-1%2D2%"},
	} {
		k, err := e.Key(jsonReq(tc.body), nil)
		if !errors.Is(err, extract.ErrKeyTooLong) || string(k) != tc.want {
			t.Errorf("Key(%s) = %q, %v; want %q, ErrKeyTooLong", tc.body, k, err, tc.want)
		}
	}
}

// An escaped value that outgrows key.max_length is too long, like any
// other.
func TestTemplateEscapesCountTowardsMaxLength(t *testing.T) {
	e, err := extract.NewExtractor("r", []extract.Source{tmpl("{json:a}-{json:b}")}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := e.Key(jsonReq(`{"a":"1-2","b":"3"}`), nil); err != nil || string(k) != "1%2D2-3" {
		t.Fatalf("Key = %q, %v; want 1%%2D2-3", k, err)
	}
	if k, err := e.Key(jsonReq(`{"a":"1-2-","b":"3"}`), nil); !errors.Is(err, extract.ErrKeyTooLong) || len(k) > 8 {
		t.Fatalf("Key = %q, %v; want at most 8 bytes, ErrKeyTooLong", k, err)
	}
}
