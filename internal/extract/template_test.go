package extract_test

import (
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
		"{json:a}{json:b}",
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
