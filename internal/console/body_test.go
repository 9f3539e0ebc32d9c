package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestViewBody(t *testing.T) {
	long := strings.Repeat("é", maxShown) // 2 bytes each: cut mid-character
	nested := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	tests := []struct {
		name   string
		body   string
		kind   string
		text   string
		capped bool
	}{
		{"empty", "", "", "", false},
		{"json is indented", `{"id":"evt_1","amount":42}`, "json", "{\n  \"id\": \"evt_1\",\n  \"amount\": 42\n}", false},
		{"form text as is", "notify_id=1&total=2", "text", "notify_id=1&total=2", false},
		{"binary as base64", "\xff\xfe\x00", "base64", "//4A", false},
		{"long text capped whole characters", long, "text", strings.Repeat("é", maxShown/2), true},
		{"deeply nested json as it is", nested, "text", nested, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := viewBody([]byte(tc.body))
			if v.Kind != tc.kind || v.Text != tc.text || v.Capped != tc.capped || v.Size != len(tc.body) {
				t.Errorf("viewBody = kind %q capped %v size %d text %.40q; want %q %v %d %.40q",
					v.Kind, v.Capped, v.Size, v.Text, tc.kind, tc.capped, len(tc.body), tc.text)
			}
		})
	}
}

// indentFits counts exactly what json.Indent writes for compact JSON.
func TestIndentFits(t *testing.T) {
	for _, body := range []string{
		`{}`, `[]`, `"s"`, `42`, `[[[]]]`, `{"a":{}}`,
		`{"a":[1,2,{"b":"x,\"y]"}],"c":{},"d":[]}`,
		`[{"k":"\\"},"{[,:"]`,
	} {
		var out bytes.Buffer
		if err := json.Indent(&out, []byte(body), "", "  "); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if !indentFits([]byte(body), out.Len()) || indentFits([]byte(body), out.Len()-1) {
			t.Errorf("%s indents to %d bytes: fits %d %v, fits %d %v", body, out.Len(),
				out.Len(), indentFits([]byte(body), out.Len()), out.Len()-1, indentFits([]byte(body), out.Len()-1))
		}
	}
}
