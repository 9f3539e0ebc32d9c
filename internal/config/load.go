package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/maps"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"go.yaml.in/yaml/v3"

	"github.com/hookstamp/hookstamp/internal/verify"
)

// EnvPrefix starts every environment variable that overrides a file value.
const EnvPrefix = "HOOKSTAMP_"

// Load reads the YAML file at path and returns the effective, validated
// configuration; see LoadFromBytes for the layers. environ is the process
// environment in os.Environ form (passed in so tests need not touch the real
// one).
func Load(path string, environ []string) (*Config, error) {
	data, err := file.Provider(path).ReadBytes()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := LoadFromBytes(data, environ)
	var problems Errors
	if err != nil && !errors.As(err, &problems) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, err
}

// LoadFromBytes builds the configuration from YAML text, in layers:
//
//  1. the defaults (Default, and DefaultRoute under every route);
//  2. the YAML document;
//  3. HOOKSTAMP_* environment variables: HOOKSTAMP_STORE__DSN sets store.dsn
//     (double underscore = one level down, names are case-insensitive). Only
//     keys outside routes can be set this way: scalars, and the string lists
//     server.trusted_proxies and screen.redis.addrs as comma-separated text.
//     A HOOKSTAMP_ variable that names no such key is ignored, so
//     HOOKSTAMP_CONFIG or a ${HOOKSTAMP_ADMIN_TOKEN} can serve other
//     purposes, except one naming routes (HOOKSTAMP_ROUTES__0__PATH) or
//     plainly meant as an override (misnamed), an error;
//  4. ${NAME} and ${NAME:-default} in string values, from environ; an unset
//     NAME without default is an error (":-" also applies to an empty NAME);
//  5. each route's preset, under the keys the route sets itself;
//  6. type checks (unknown keys, bad durations and sizes), Validate, and
//     the OTLP protocol the OTEL_EXPORTER_OTLP_* variables name.
//
// A key written with no value (`lease:`) counts as unset. On any problem the
// error is an Errors listing all of them, each with its key path; the
// returned Config is then nil.
func LoadFromBytes(data []byte, environ []string) (*Config, error) {
	doc, err := parseYAML(data)
	if err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	maps.IntfaceKeysToStrings(doc)
	dropNulls(doc)
	// ${NAME} is substituted in the file's values only: a value set by an
	// environment override is taken literally (a password may hold "${").
	var phases [3]Errors
	lookup, referenced := lookupIn(environ), map[string]bool{}
	interpolate(doc, "", func(name string) (string, bool) {
		referenced[name] = true
		return lookup(name)
	}, &phases[0])

	k := koanf.New(".")
	defaults := toRaw(reflect.ValueOf(Default())).(map[string]any)
	if err := k.Load(confmap.Provider(defaults, ""), nil); err != nil {
		return nil, fmt.Errorf("load defaults: %w", err)
	}
	if err := k.Load(confmap.Provider(doc, ""), nil); err != nil {
		return nil, fmt.Errorf("load YAML: %w", err)
	}
	var envWarnings []string
	envProvider, fromEnv := overrides(environ, referenced, &phases[1], &envWarnings)
	if err := k.Load(envProvider, nil); err != nil {
		return nil, fmt.Errorf("load environment: %w", err)
	}

	// A file value that an environment variable replaced is never used:
	// a ${NAME} in it that could not be substituted is no problem.
	phases[0] = slices.DeleteFunc(phases[0], func(e *FieldError) bool { return envSource(fromEnv, e.Path) != "" })

	raw := k.Raw()
	applyRouteDefaults(raw)
	sc := schema{errs: &phases[1], routeDefault: toRaw(reflect.ValueOf(DefaultRoute()))}
	norm := sc.value("", reflect.TypeOf(Config{}), raw, defaults)

	var c Config
	if err := decode(norm, &c); err != nil {
		// The schema pass normalised every value, so this is a bug here.
		return nil, fmt.Errorf("decode configuration: %w", err)
	}
	c.tidy()
	slices.Sort(envWarnings)
	c.envWarnings = envWarnings
	if err := c.Validate(); err != nil && !errors.As(err, &phases[2]) {
		return nil, err
	}
	c.validateEnvironment(&phases[2], lookup)

	problems := mergePhases(phases[:])
	for _, p := range problems {
		if name := envSource(fromEnv, p.Path); name != "" {
			p.Msg += " (set by " + name + ")"
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return &c, nil
}

// tidy trims the values read from secret files, and fills what a route's
// verify scheme reads by default, so that check shows what is used.
func (c *Config) tidy() {
	// A bearer token has no spaces (RFC 6750), and the admin API trims the
	// presented one; a token read from a secret file often ends in a
	// newline, which would make it impossible to present.
	c.Admin.Token = strings.TrimSpace(c.Admin.Token)
	// The Redis password and the DSN come from secret files as well: a
	// password kept with its newline fails AUTH only once serve connects,
	// and a DSN with one names another SQLite file or reads as a bad URL.
	c.Screen.Redis.Password = strings.TrimSpace(c.Screen.Redis.Password)
	c.Store.DSN = strings.TrimSpace(c.Store.DSN)
	// Signing secrets come the same way (${STRIPE_WEBHOOK_SECRET} from a
	// Kubernetes Secret or a file) and no provider's secret begins or ends
	// in white space: kept, a trailing newline would make every genuine
	// delivery fail verification (401) under a configuration that checks.
	for i := range c.Routes {
		v := &c.Routes[i].Verify
		for j, s := range v.Secrets {
			v.Secrets[j] = strings.TrimSpace(s)
		}
		v.ChallengeToken = strings.TrimSpace(v.ChallengeToken)
		if verify.TakesTemplate(v.Scheme) && v.Header == "" && v.JSON == "" {
			v.Header = verify.DefaultHeader
		}
	}
}

// overrides is the provider of the HOOKSTAMP_* variables of environ, and
// the map it fills as it loads: key path → variable that set it. A
// variable naming a route's value, or meant as an override but naming no
// key (see misnamed), is a problem in errs, or in warnings when it may
// serve another purpose.
func overrides(environ []string, referenced map[string]bool, errs *Errors, warnings *[]string) (*env.Env, map[string]string) {
	keys := envKeys()
	fromEnv := map[string]string{}
	return env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "__", ".")
			t, ok := keys[key]
			if !ok {
				if key == "routes" || strings.HasPrefix(key, "routes.") {
					// No override sets a route's value: silently ignored,
					// the route would serve otherwise than its author
					// believes.
					errs.add(key, "set by %s: routes cannot be set from the environment; write ${NAME} in the route's value instead", name)
				} else if msg, sure := misnamed(name, key, keys); msg != "" && !referenced[name] {
					if sure {
						errs.add(key, "set by %s: %s", name, msg)
					} else {
						*warnings = append(*warnings, name+" "+msg)
					}
				}
				return "", nil // names no configuration key: not ours
			}
			fromEnv[key] = name
			if t.Kind() == reflect.Slice {
				return key, splitList(value)
			}
			return key, value
		},
	}), fromEnv
}

// parseYAML reads the YAML document into a raw tree, as koanf's YAML
// parser does, except for unquoted scalars that YAML reads as numbers but
// whose number would not print back as written (0123 is octal 83, 0x10 is
// 16, a 23-digit secret becomes 1.2345678901234568e+22): those stay the
// text written. A string field (a token, a secret, a route name) then gets
// exactly what the user typed; a numeric field parses the text itself.
func parseYAML(data []byte) (map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); errors.Is(err, io.EOF) {
		return nil, nil // an empty file
	} else if err != nil {
		return nil, err
	}
	// A second document would be ignored whole, its errors with it.
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a second YAML document (after ---): the configuration is one document", next.Line)
	}
	if root.Kind == 0 {
		return nil, nil // an empty document
	}
	keepNumberText(&root)
	var out map[string]any
	if err := root.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// keepNumberText retags as text every plain scalar whose number reads back
// differently from what was written.
func keepNumberText(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Style == 0 && (n.Tag == "!!int" || n.Tag == "!!float") {
		var v any
		if err := n.Decode(&v); err != nil {
			return
		}
		var back string
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return // .nan and .inf stay numbers: sample_ratio's range check names them
			}
			back = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			back = fmt.Sprint(x)
		}
		if back != n.Value {
			n.Tag = "!!str"
		}
		return
	}
	for _, c := range n.Content {
		keepNumberText(c)
	}
}

// decode turns the normalised tree into c through koanf and mapstructure.
func decode(tree any, c *Config) error {
	m, ok := tree.(map[string]any)
	if !ok {
		return fmt.Errorf("configuration is %T, not a mapping", tree)
	}
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
		return err
	}
	return k.UnmarshalWithConf("", c, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			ErrorUnused: true, // the schema pass already reported unknown keys
		},
	})
}

// mergePhases keeps every problem of the first phase, and problems of later
// phases only when no earlier problem covers their path: a bad value that
// was reported and replaced must not be reported again as, say, "required".
// An unknown key is a problem of its own beside any with its value (an
// unset ${NAME} there): fixing the one would not fix the other.
func mergePhases(phases []Errors) Errors {
	var out Errors
	for _, phase := range phases {
		seen := len(out)
		for _, e := range phase {
			covered := false
			for _, prev := range out[:seen] {
				if !e.ofKey && covers(prev.Path, e.Path) {
					covered = true
					break
				}
			}
			if !covered {
				out = append(out, e)
			}
		}
	}
	return out
}

func covers(parent, p string) bool {
	return parent == p || parent == "" ||
		strings.HasPrefix(p, parent+".") || strings.HasPrefix(p, parent+"[")
}

// envSource names the variable that set path (or the list containing it).
func envSource(fromEnv map[string]string, path string) string {
	for key, name := range fromEnv {
		if covers(key, path) {
			return name
		}
	}
	return ""
}

// envKeys maps every key that an environment variable may set to its type:
// the leaves outside routes.
func envKeys() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := koanfName(f)
			if name == "" || (prefix == "" && name == "routes") {
				continue
			}
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(join(prefix, name), f.Type)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() != reflect.String:
				// Lists of structures cannot be written as one variable.
			default:
				out[join(prefix, name)] = f.Type
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return out
}

// misnamed says why the variable name, naming key, sets nothing though it
// looks meant to set a key: the gateway would otherwise run, and check
// pass, on the value the operator meant to replace. sure: it can mean
// nothing else (a section's key misspelled, one item of a list), so it is
// refused; HOOKSTAMP_STORE_DRIVER, one level down by a single underscore,
// is only warned of, as a name of the same shape may be set for other
// tools (the Helm chart always sets HOOKSTAMP_ADMIN_TOKEN). "" when the
// name resembles no key.
func misnamed(name, key string, keys map[string]reflect.Type) (msg string, sure bool) {
	envName := func(k string) string { return EnvPrefix + strings.ToUpper(strings.ReplaceAll(k, ".", "__")) }
	section, _, nested := strings.Cut(key, ".")
	if !nested {
		for k := range keys {
			if strings.ReplaceAll(k, ".", "_") == key {
				return "sets nothing: one level down is a double underscore, " + envName(k), false
			}
		}
		return "", false
	}
	var known []string
	for k, t := range keys {
		if strings.HasPrefix(key, k+".") && t.Kind() == reflect.Slice {
			return "sets nothing: a list is set whole, as comma-separated text in " + envName(k), true
		}
		if strings.HasPrefix(k, section+".") {
			known = append(known, envName(k))
		}
	}
	if len(known) == 0 {
		return "", false // not a section of the configuration
	}
	return "names no configuration key" + suggest(name, known), true
}

// splitList reads a comma-separated environment value as a list.
func splitList(s string) []any {
	out := []any{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// dropNulls removes keys written without a value, so they count as unset.
func dropNulls(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if val == nil {
				delete(x, k)
				continue
			}
			dropNulls(val)
		}
	case []any:
		for _, e := range x {
			dropNulls(e)
		}
	}
}

// applyRouteDefaults replaces every route with DefaultRoute, overlaid with
// its preset's fragment, overlaid with what the route itself says. Lists are
// replaced, never merged: sources [header: X] means exactly that.
func applyRouteDefaults(raw map[string]any) {
	routes, ok := raw["routes"].([]any)
	if !ok {
		return // the schema pass reports it
	}
	for i, r := range routes {
		own, ok := r.(map[string]any)
		if !ok {
			continue
		}
		merged := toRaw(reflect.ValueOf(DefaultRoute())).(map[string]any)
		if name, ok := own["preset"].(string); ok {
			if p, ok := LookupPreset(name); ok {
				maps.Merge(p.rawFragment(own), merged)
			}
		}
		maps.Merge(maps.Copy(own), merged)
		twitchTolerance(own, merged)
		routes[i] = merged
	}
}

// twitchTolerance gives a route verifying scheme twitch Twitch's own
// 10-minute limit (verify.DefaultTwitchTolerance) when the route sets no
// verify.tolerance, with or without the twitch preset: the 5-minute
// default of the other schemes would refuse messages Twitch still counts
// as fresh (docs/presets.md).
func twitchTolerance(own, merged map[string]any) {
	v, _ := merged["verify"].(map[string]any)
	if v == nil || v["scheme"] != SchemeTwitch {
		return
	}
	if ov, _ := own["verify"].(map[string]any); ov["tolerance"] != nil {
		return
	}
	v["tolerance"] = verify.DefaultTwitchTolerance
}

// lookupIn makes a variable lookup over an os.Environ-style list; the last
// definition wins, as in a shell.
func lookupIn(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// interpolate replaces ${NAME} and ${NAME:-default} in every string of the
// tree, in place.
func interpolate(v any, path string, lookup func(string) (string, bool), errs *Errors) any {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			x[k] = interpolate(x[k], join(path, k), lookup, errs)
		}
	case []any:
		for i := range x {
			x[i] = interpolate(x[i], index(path, i), lookup, errs)
		}
	case string:
		s, err := expand(x, lookup)
		switch {
		case err == nil:
			return s
		case errors.Is(err, errMalformedRef) && secretPath.MatchString(path):
			// The text after "${" may be the rest of a password pasted
			// as is: name the problem, not the text.
			how := "its HOOKSTAMP_… environment override"
			if strings.HasPrefix(path, "routes[") {
				how = "a ${NAME} whose variable holds it (substituted text is not read again)"
			}
			errs.add(path, "malformed ${…} reference (not shown: it may be a secret; want ${NAME} or ${NAME:-default}, "+
				"or set a value holding \"${\" through %s)", how)
		default:
			errs.add(path, "%v", err)
		}
		return x
	}
	return v
}

// errMalformedRef marks an unterminated or malformed ${…} reference.
var errMalformedRef = errors.New("malformed variable reference")

// expand substitutes the variable references of one string. Substituted
// text is not scanned again.
func expand(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		start := strings.Index(s, "${")
		if start < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:start])
		end := closingBrace(s[start+2:])
		if end < 0 {
			return "", fmt.Errorf("%w: unterminated %q (want ${NAME} or ${NAME:-default})", errMalformedRef, s[start:])
		}
		ref := s[start : start+2+end+1]
		name, def, hasDef := strings.Cut(ref[2:len(ref)-1], ":-")
		if !validEnvName(name) {
			return "", fmt.Errorf("%w: bad variable reference %q (want ${NAME} or ${NAME:-default})", errMalformedRef, ref)
		}
		if strings.Contains(def, "${") {
			// Taken as text, the inner reference would be a secret's
			// value, passing check and failing every signature.
			return "", fmt.Errorf("%w: a reference in a default, %q: not supported", errMalformedRef, ref)
		}
		val, ok := lookup(name)
		switch {
		case hasDef && (!ok || val == ""):
			val = def
		case !ok:
			return "", fmt.Errorf("environment variable %s is not set (write ${%s:-} to default to empty)", name, name)
		}
		b.WriteString(val)
		s = s[start+2+end+1:]
	}
}

// closingBrace is the index in s of the "}" that ends a reference whose
// "${" precedes s: braces in a default pair up (`${ACK:-{"ok":true}}`),
// -1 without one.
func closingBrace(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
