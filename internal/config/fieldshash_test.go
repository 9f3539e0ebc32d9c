package config

import (
	"reflect"
	"strings"
	"testing"
)

const fieldsHashRoute = `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{fields_hash: %s}, {header: X-Event-Id}]}
`

func TestFieldsHashSourceLoads(t *testing.T) {
	c := mustLoad(t, strings.Replace(fieldsHashRoute, "%s", `"json:#.subscriptionId, json:#.eventId,header:X-Batch"`, 1))
	want := []KeySource{{SourceFieldsHash, "json:#.subscriptionId, json:#.eventId,header:X-Batch"}, {SourceHeader, "X-Event-Id"}}
	if got := c.Routes[0].Key.Sources; !reflect.DeepEqual(got, want) {
		t.Fatalf("sources = %#v, want %#v", got, want)
	}
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "fields_hash: json:#.subscriptionId, json:#.eventId,header:X-Batch") {
		t.Errorf("the configuration printed back lacks the fields_hash source:\n%s", out)
	}
}

// A bad entry of a fields_hash is refused at load, named by its position
// in the list.
func TestFieldsHashSourceRefused(t *testing.T) {
	tests := []struct{ arg, want string }{
		{`""`, "fields_hash[0]: empty entry"},
		{`"json:a,,json:b"`, "fields_hash[1]: empty entry"},
		{`"json:a,"`, "fields_hash[1]: empty entry"},
		{`"json:a, jsn:b"`, `fields_hash[1]: "jsn:b": want KIND:NAME with KIND json, form, header or query`},
		{`"header:X Id"`, `fields_hash[0]: "header:X Id": invalid header name`},
		{`"json:a,form:b,json:a"`, `fields_hash[2]: "json:a" is already fields_hash[0]`},
		{`[json:a, json:b]`, "want a text value"},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			errs := mustFail(t, strings.Replace(fieldsHashRoute, "%s", tt.arg, 1))
			path := "routes[0].key.sources[0]"
			if strings.HasPrefix(tt.arg, "[") {
				path += ".fields_hash"
			}
			assertProblem(t, errs, path, tt.want)
		})
	}
}
