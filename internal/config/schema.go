package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// schema checks the raw tree against the Config struct before decoding: every
// key must be a field (by koanf tag), every value must have the field's type.
// It returns a normalised tree (durations as time.Duration, sizes as Size,
// key sources as {kind, arg}) that decodes without surprises. A bad value is
// reported and replaced by its default (or zero), so the later Validate pass
// sees a complete configuration and reports the remaining problems too.
type schema struct {
	errs         *Errors
	routeDefault any // raw DefaultRoute, the fallback inside routes[i]
}

var routeType = reflect.TypeOf(Route{})

func (s *schema) value(path string, t reflect.Type, v, def any) any {
	switch t {
	case durationType:
		return s.duration(path, v, def)
	case sizeType:
		return s.size(path, v, def)
	case keySourceType:
		return s.keySource(path, v, def)
	}

	switch t.Kind() {
	case reflect.Struct:
		return s.structure(path, t, v, def)
	case reflect.Slice:
		return s.list(path, t, v, def)
	case reflect.String:
		switch x := v.(type) {
		case string:
			return x
		case int, int64, uint64, float64, bool:
			return fmt.Sprint(x)
		}
		return s.bad(path, t, def, "want a text value, got %s", describeAt(path, v))
	case reflect.Bool:
		switch x := v.(type) {
		case bool:
			return x
		case string:
			if b, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
				return b
			}
		}
		return s.bad(path, t, def, "want true or false, got %s", showAt(path, v))
	case reflect.Int:
		return s.integer(path, t, v, def)
	case reflect.Float64:
		return s.float(path, t, v, def)
	}
	// Every field type of Config is handled above.
	panic(fmt.Sprintf("config: no schema rule for %s at %s", t, path))
}

func (s *schema) duration(path string, v, def any) any {
	switch x := v.(type) {
	case time.Duration:
		return x
	case int, int64, uint64:
		// YAML reads an unquoted 0 as a number; Go reads "0" as a
		// duration (as it does from HOOKSTAMP_…=0). Any other number
		// lacks a unit and stays an error.
		if d, err := time.ParseDuration(fmt.Sprint(x)); err == nil {
			return d
		}
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err == nil {
			return d
		}
	}
	return s.bad(path, durationType, def, "bad duration %s (want a Go duration such as \"10s\" or \"1m30s\")", showAt(path, v))
}

func (s *schema) size(path string, v, def any) any {
	switch x := v.(type) {
	case Size:
		return x
	case int:
		if x >= 0 {
			return Size(x)
		}
	case int64:
		if x >= 0 {
			return Size(x)
		}
	case uint64:
		if x <= math.MaxInt64 {
			return Size(x)
		}
	case string:
		n, err := ParseSize(x)
		if err != nil {
			if n, ok := yamlNumber(x).(int); ok && n >= 0 {
				return Size(n)
			}
			return s.bad(path, sizeType, def, "%v", err)
		}
		return n
	}
	return s.bad(path, sizeType, def, "bad size %s (want whole bytes or a unit such as 64KiB, 1MiB, 1GiB)", showAt(path, v))
}

func (s *schema) integer(path string, t reflect.Type, v, def any) any {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		if x >= math.MinInt && x <= math.MaxInt {
			return int(x)
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
			return n
		}
		if n, ok := yamlNumber(x).(int); ok {
			return n
		}
	}
	return s.bad(path, t, def, "want an integer, got %s", showAt(path, v))
}

func (s *schema) float(path string, t reflect.Type, v, def any) any {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f
		}
		switch n := yamlNumber(x).(type) {
		case float64:
			return n
		case int:
			return float64(n)
		}
	}
	return s.bad(path, t, def, "want a number, got %s", showAt(path, v))
}

// yamlNumber reads x as YAML reads an unquoted number: with digit
// separators ("1_048_576"), in hex ("0x10") or octal ("0o17"). parseYAML
// keeps such a number as the text written, for the string fields it may
// belong to; a numeric field must still get the number YAML meant, as it
// did before parseYAML kept the text.
// It returns an int or a float64, or nil when x is no such number.
func yamlNumber(x string) any {
	var v any
	if err := yaml.Unmarshal([]byte(x), &v); err != nil {
		return nil
	}
	switch v.(type) {
	case int, float64:
		return v
	}
	return nil
}

func (s *schema) structure(path string, t reflect.Type, v, def any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return s.bad(path, t, def, "want a mapping of keys, got %s", describeAt(path, v))
	}
	defs, _ := def.(map[string]any)
	fields := make(map[string]reflect.StructField, t.NumField())
	names := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if name := koanfName(t.Field(i)); name != "" {
			fields[name] = t.Field(i)
			names = append(names, name)
		}
	}
	out := make(map[string]any, len(m))
	for _, k := range sortedKeys(m) {
		f, ok := fields[k]
		if !ok {
			*s.errs = append(*s.errs, &FieldError{Path: join(path, k), Msg: "unknown key" + suggest(k, names), ofKey: true})
			continue
		}
		out[k] = s.value(join(path, k), f.Type, m[k], defs[k])
	}
	return out
}

func (s *schema) list(path string, t reflect.Type, v, def any) any {
	l, ok := v.([]any)
	if !ok {
		return s.bad(path, t, def, "want a list, got %s", describeAt(path, v))
	}
	var elemDef any
	if t.Elem() == routeType {
		elemDef = s.routeDefault
	}
	out := make([]any, len(l))
	for i, e := range l {
		p := index(path, i)
		if e == nil {
			// Keep the index so later messages name the right entry.
			out[i] = s.bad(p, t.Elem(), elemDef, "empty entry")
			continue
		}
		out[i] = s.value(p, t.Elem(), e, elemDef)
	}
	return out
}

// keySource reads `header: X-Event-Id` into {kind: header, arg: X-Event-Id}.
// The kind itself is checked by Validate, which also sees programmatic
// configurations.
func (s *schema) keySource(path string, v, def any) any {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return s.bad(path, keySourceType, def, "want a one-entry mapping such as \"header: X-Event-Id\" or \"json: id\", got %s", describeAt(path, v))
	}
	for kind, arg := range m {
		switch a := arg.(type) {
		case string:
			return map[string]any{"kind": kind, "arg": a}
		case int, int64, uint64, float64, bool:
			return map[string]any{"kind": kind, "arg": fmt.Sprint(a)}
		}
		s.errs.add(join(path, kind), "want a text value, got %s", describe(arg))
		return map[string]any{"kind": kind, "arg": ""}
	}
	panic("unreachable")
}

// bad reports a problem and returns the fallback: the default at this path
// if there is one, else the zero value, both normalised.
func (s *schema) bad(path string, t reflect.Type, def any, format string, args ...any) any {
	s.errs.add(path, format, args...)
	if def == nil {
		def = toRaw(reflect.Zero(t))
	}
	if def == nil { // a nil slice
		return []any{}
	}
	quiet := schema{errs: new(Errors), routeDefault: s.routeDefault}
	return quiet.value(path, t, def, nil)
}

// secretPath matches the paths whose values are secrets (or may hold one,
// as a URL's userinfo does): error messages name their kind, never their
// text — the error list goes to a terminal or a log (SPEC §9, §7).
var secretPath = regexp.MustCompile(`^(admin\.token|screen\.redis\.(password|addrs(\[\d+\])?)|store\.dsn|routes\[\d+\]\.(verify\.secrets(\[\d+\])?|verify\.challenge_token|upstream\.url))$`)

// notShown stands for the text of a secret in an error message.
const notShown = "a text value (not shown: it may be a secret)"

// describeAt is describe(v) for the value at path, without a secret's text.
func describeAt(path string, v any) string {
	if secretText(path, v) {
		return notShown
	}
	return describe(v)
}

// showAt is show(v) for the value at path, without a secret's text.
func showAt(path string, v any) string {
	if secretText(path, v) {
		return notShown
	}
	return show(v)
}

// secretText reports whether v is text at a secret path.
func secretText(path string, v any) bool {
	_, text := v.(string)
	return text && secretPath.MatchString(path)
}

// describe names the YAML kind of a value, for "want X, got Y".
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case map[string]any, map[any]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the text %q", x)
	case bool:
		return fmt.Sprintf("%t", x)
	default:
		return fmt.Sprintf("the number %v", x)
	}
}

// show prints a scalar value for an error message.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case map[string]any, []any, nil:
		return describe(v)
	default:
		return fmt.Sprint(x)
	}
}

// suggest proposes the known key closest to an unknown one.
func suggest(key string, names []string) string {
	flat := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", 3
	for _, n := range names {
		d := levenshtein(key, n)
		if flat(key) == flat(n) {
			d = 0
		}
		if d < bestDist && d < len(n) {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	return " (want one of " + strings.Join(sorted, ", ") + ")"
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
