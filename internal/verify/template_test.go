package verify_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/verify"
)

func TestParseTemplateRefuses(t *testing.T) {
	for _, tc := range []struct{ name, tmpl, want string }{
		{"empty", "", "empty template"},
		{"unclosed", "v0:{body", "unclosed {"},
		{"unbalanced", "v0}{body}", "unbalanced }"},
		{"nested", "{json:{body}}", "unclosed {"},
		{"unknown", "{query:x}", "unknown placeholder"},
		{"argument on body", "{body:x}", "takes no argument"},
		{"header without name", "{header:}", "not a valid header name"},
		{"bad header name", "{header:X Y}", "not a valid header name"},
		{"json wildcard", "{json:items.#.id}", "plain path"},
		{"json modifier", "{json:@this}", "plain path"},
		{"json empty segment", "{json:a..b}", "plain path"},
		{"form without name", "{form:}", "needs a parameter name"},
		{"static", "{url}{secret}", "same signature"},
		{"literal only", "v0:", "same signature"},
		{"too long", "{body}" + strings.Repeat("x", 1024), "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.ParseTemplate(tc.tmpl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseTemplate(%q) = %v, want an error containing %q", tc.tmpl, err, tc.want)
			}
		})
	}
}

func TestTemplateRender(t *testing.T) {
	adyen := `{"notificationItems":[{"NotificationRequestItem":{"pspReference":"7914073381342284",` +
		`"amount":{"value":1130,"currency":"EUR"},"success":"true","originalReference":null,"note":"caf\u00e9"}}]}`
	for _, tc := range []struct {
		name, tmpl string
		headers    http.Header
		body       string
		in         verify.Inputs
		want       string
	}{
		{"zoom", "v0:{header:X-Zm-Request-Timestamp}:{body}",
			http.Header{"X-Zm-Request-Timestamp": {"1700000000"}}, `{"a":1}`, verify.Inputs{}, `v0:1700000000:{"a":1}`},
		{"twilio sorted form", "{url}{form:sorted}", nil, "To=%2B1800&CallSid=CA1&Digits=12+34",
			verify.Inputs{URL: "https://x.test/a?b=1"}, "https://x.test/a?b=1CallSidCA1Digits12 34To+1800"},
		{"form value", "{form:b}.{body}", nil, "a=1&b=%3D2", verify.Inputs{}, "=2.a=1&b=%3D2"},
		{"json scalars", "{json:notificationItems.0.NotificationRequestItem.pspReference}:" +
			"{json:notificationItems.0.NotificationRequestItem.originalReference}:" +
			"{json:notificationItems.0.NotificationRequestItem.amount.value}:" +
			"{json:notificationItems.0.NotificationRequestItem.missing}:" +
			"{json:notificationItems.0.NotificationRequestItem.note}",
			nil, adyen, verify.Inputs{}, "7914073381342284::1130::café"},
		{"secret inside", "{header:timestamp}\n{secret}", http.Header{"Timestamp": {"1577262236757"}}, "",
			verify.Inputs{Secret: []byte("s3cr3t")}, "1577262236757\ns3cr3t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, err := verify.ParseTemplate(tc.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tm.Render([]byte("prefix|"), verify.MapRequest{Headers: tc.headers, Payload: []byte(tc.body)}, tc.in)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if string(got) != "prefix|"+tc.want {
				t.Fatalf("Render = %q, want %q", got, "prefix|"+tc.want)
			}
		})
	}
}

func TestTemplateRenderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl string
		headers    http.Header
		body, want string
	}{
		{"missing header", "{header:X-Ts}{body}", nil, "", "missing X-Ts header"},
		{"repeated header", "{header:X-Ts}{body}", http.Header{"X-Ts": {"1", "2"}}, "", "duplicated X-Ts header"},
		{"invalid json", "{json:id}", nil, `{"id":`, "not valid JSON"},
		{"duplicate member", "{json:a.id}", nil, `{"a":{"id":"1","id":"2"}}`, "more than once"},
		{"duplicate parent", "{json:a.id}", nil, `{"a":{"id":"1"},"a":{"id":"2"}}`, "more than once"},
		{"object", "{json:a}", nil, `{"a":{"id":"1"}}`, "not a string, number or boolean"},
		{"array", "{json:a}", nil, `{"a":[1]}`, "not a string, number or boolean"},
		{"bad form", "{form:sorted}", nil, "a=%zz", "malformed form body"},
		{"repeated form parameter", "{form:sorted}", nil, "a=1&a=2", "malformed form body"},
		{"missing form parameter", "{form:b}", nil, "a=1", "missing form parameter b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, err := verify.ParseTemplate(tc.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tm.Render(nil, verify.MapRequest{Headers: tc.headers, Payload: []byte(tc.body)}, verify.Inputs{})
			if !errors.Is(err, verify.ErrUnverified) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v, want a rejection containing %q", err, tc.want)
			}
		})
	}
}

// FuzzParseTemplate's contract: parsing never panics; a template that
// parses renders against any body without panicking, and a failed render
// is a rejection (ErrUnverified), never another error.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{
		"v0:{header:X-Zm-Request-Timestamp}:{body}", "{url}{form:sorted}", "{json:a.0.b}:{json:c}",
		"{header:timestamp}\n{secret}", "{form:x}{url}", "{", "}{", "{json:}",
	} {
		f.Add(s, []byte(`{"a":[{"b":"x"}],"c":1}`))
	}
	f.Fuzz(func(t *testing.T, tmpl string, body []byte) {
		tm, err := verify.ParseTemplate(tmpl)
		if err != nil {
			return
		}
		if tm.String() != tmpl {
			t.Fatalf("String() = %q, want %q", tm.String(), tmpl)
		}
		r := verify.MapRequest{Headers: http.Header{"X-Zm-Request-Timestamp": {"1"}, "Timestamp": {"2"}}, Payload: body}
		if _, err := tm.Render(nil, r, verify.Inputs{URL: "https://x.test/"}); err != nil && !errors.Is(err, verify.ErrUnverified) {
			t.Fatalf("Render: %v is not a rejection", err)
		}
	})
}
