package config

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr bool
	}{
		{"0", 0, false},
		{"1024", 1024, false},
		{"1024B", 1024, false},
		{"64KiB", 64 << 10, false},
		{"64kib", 64 << 10, false},
		{"1MiB", 1 << 20, false},
		{"1 MiB", 1 << 20, false},
		{"1GiB", 1 << 30, false},
		{"2TiB", 2 << 40, false},
		{"512KB", 512000, false},
		{"1MB", 1000000, false},
		{"1GB", 1000000000, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"-1", 0, true},
		{"+1", 0, true},
		{"1.5MiB", 0, true},
		{"1PiB", 0, true},
		{"10 apples", 0, true},
		{"9999999999TiB", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestSizeStringRoundTrips(t *testing.T) {
	for _, s := range []Size{0, 1, 1000, KiB, 64 * KiB, MiB + 1, 3 * GiB, 1 << 40} {
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s.String(), back, err, s)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{10 * time.Second, "10s"},
		{time.Minute, "1m"},
		{90 * time.Second, "1m30s"},
		{24 * time.Hour, "24h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h0m1s"},
		{1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatDuration(tt.in); got != tt.want {
				t.Errorf("FormatDuration(%v) = %q, want %q", tt.in, got, tt.want)
			}
			if back, err := time.ParseDuration(FormatDuration(tt.in)); err != nil || back != tt.in {
				t.Errorf("does not parse back: %v, %v", back, err)
			}
		})
	}
}

func TestParseStatuses(t *testing.T) {
	final, err := ParseStatuses([]string{"2xx", "4XX", "301"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		status int
		want   bool
	}{
		{200, true}, {204, true}, {299, true},
		{301, true}, {302, false},
		{400, true}, {404, true}, {422, true},
		{408, false}, {425, false}, {429, false}, // never final, even inside 4xx
		{500, false}, {502, false}, {503, false}, {504, false},
		{100, false}, {0, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			if got := final(tt.status); got != tt.want {
				t.Errorf("final(%d) = %v, want %v", tt.status, got, tt.want)
			}
			rec := Record{Statuses: []string{"2xx", "4XX", "301"}}
			if got := rec.IsFinal(tt.status); got != tt.want {
				t.Errorf("Record.IsFinal(%d) = %v, want %v", tt.status, got, tt.want)
			}
		})
	}
}

func TestParseStatusesRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string
	}{
		{"empty", nil, "no final status"},
		{"5xx class", []string{"2xx", "5xx"}, "statuses[1]: \"5xx\" is never final"},
		{"503", []string{"503"}, "503 is never final"},
		{"408", []string{"408"}, "408 is never final"},
		{"425", []string{"425"}, "425 is never final"},
		{"429", []string{"429"}, "429 is never final"},
		{"out of range", []string{"600"}, "bad status"},
		{"garbage", []string{"ok"}, "bad status"},
		{"two digits", []string{"20"}, "bad status"},
		{"x class without digit", []string{"xxx"}, "bad status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseStatuses(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseStatuses(%q) error = %v, want one containing %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in   string
		want []TemplatePart
	}{
		{"{json:order_id}-{json:event}-{json:seq}", []TemplatePart{
			{Kind: "json", Arg: "order_id"}, {Literal: "-"}, {Kind: "json", Arg: "event"}, {Literal: "-"}, {Kind: "json", Arg: "seq"},
		}},
		{"{json:type}:{json:data.object.id}", []TemplatePart{{Kind: "json", Arg: "type"}, {Literal: ":"}, {Kind: "json", Arg: "data.object.id"}}},
		{"evt-{header:X-Id}", []TemplatePart{{Literal: "evt-"}, {Kind: "header", Arg: "X-Id"}}},
		{"{route}/{method}/{form:a}/{query:b}!", []TemplatePart{
			{Kind: "route"}, {Literal: "/"}, {Kind: "method"}, {Literal: "/"}, {Kind: "form", Arg: "a"}, {Literal: "/"}, {Kind: "query", Arg: "b"}, {Literal: "!"},
		}},
		{"{json:a:b}", []TemplatePart{{Kind: "json", Arg: "a:b"}}},
		{adyenKey, []TemplatePart{
			{Kind: "json", Arg: "notificationItems.0.NotificationRequestItem.pspReference"}, {Literal: ":"},
			{Kind: "json", Arg: "notificationItems.0.NotificationRequestItem.eventCode"}, {Literal: ":"},
			{Kind: "json", Arg: "notificationItems.0.NotificationRequestItem.success"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTemplate(tt.in)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseTemplate(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseTemplateRejects(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty template"},
		{"{json:id", "unclosed"},
		{"{json:{id}}", "unclosed"},
		{"json:id}", "unbalanced"},
		{"{}", "unknown placeholder {}"},
		{"{body:x}", "unknown placeholder {body:x}"},
		{"{json}", "needs an argument"},
		{"{json:}", "needs an argument"},
		{"{header:Bad Name}", "not a valid header name"},
		{"{route:x}-{json:a}", "takes no argument"},
		{"constant", "every delivery would share one key"},
		{"{route}-{method}", "every delivery would share one key"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseTemplate(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseTemplate(%q) error = %v, want one containing %q", tt.in, err, tt.want)
			}
		})
	}
}

// FuzzParseTemplate: ParseTemplate never panics, and a template it accepts
// is exactly the concatenation of its parts written back, with at least one
// placeholder that reads the request.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"{json:a}-{json:b}", "x{route}{header:H}y", "{", "}", "{json:}", adyenKey} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, err := ParseTemplate(s)
		if err != nil {
			return
		}
		var b strings.Builder
		dynamic := false
		for _, p := range parts {
			switch {
			case p.Kind == "":
				b.WriteString(p.Literal)
			case p.Arg == "":
				b.WriteString("{" + p.Kind + "}")
			default:
				dynamic = true
				b.WriteString("{" + p.Kind + ":" + p.Arg + "}")
			}
		}
		if b.String() != s || !dynamic {
			t.Fatalf("ParseTemplate(%q) = %+v: rebuilds %q, dynamic %v", s, parts, b.String(), dynamic)
		}
	})
}

// Types marshalled on their own (outside Config.YAML) keep the user's forms.
func TestTextForms(t *testing.T) {
	out, err := yaml.Marshal(KeySource{Kind: SourceHeader, Arg: "X-Event-Id"})
	if err != nil || string(out) != "header: X-Event-Id\n" {
		t.Errorf("yaml.Marshal(KeySource) = %q, %v", out, err)
	}
	b, err := json.Marshal(struct{ S Size }{64 * KiB})
	if err != nil || string(b) != `{"S":"64KiB"}` {
		t.Errorf("json.Marshal(Size) = %s, %v", b, err)
	}
	var back struct{ S Size }
	if err := json.Unmarshal(b, &back); err != nil || back.S != 64*KiB {
		t.Errorf("json.Unmarshal(Size) = %v, %v", back.S, err)
	}
	if err := json.Unmarshal([]byte(`{"S":"lots"}`), &back); err == nil {
		t.Error("json.Unmarshal accepted a bad size")
	}
}
