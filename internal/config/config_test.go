package config

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// minimal is the smallest valid file: one route, everything else default.
const minimal = `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key:
      sources: [{header: X-Event-Id}]
`

func mustLoad(tb testing.TB, doc string, environ ...string) *Config {
	tb.Helper()
	c, err := LoadFromBytes([]byte(doc), environ)
	if err != nil {
		tb.Fatalf("LoadFromBytes: unexpected error:\n%v", err)
	}
	return c
}

func mustFail(tb testing.TB, doc string, environ ...string) Errors {
	tb.Helper()
	c, err := LoadFromBytes([]byte(doc), environ)
	if err == nil {
		tb.Fatalf("LoadFromBytes accepted a bad file:\n%s", doc)
	}
	if c != nil {
		tb.Errorf("LoadFromBytes returned a Config along with errors")
	}
	var problems Errors
	if !errors.As(err, &problems) {
		tb.Fatalf("error is %T, want config.Errors: %v", err, err)
	}
	return problems
}

// demoRoute is the route of minimal with every default applied.
func demoRoute() Route {
	r := DefaultRoute()
	r.Name, r.Path = "a", "/a"
	r.Upstream.URL = "http://127.0.0.1:9000/a"
	r.Key.Sources = []KeySource{{Kind: SourceHeader, Arg: "X-Event-Id"}}
	return r
}

func TestDefaultsApplied(t *testing.T) {
	got := mustLoad(t, minimal)
	want := Default()
	want.Routes = []Route{demoRoute()}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("defaults not applied:\n got %+v\nwant %+v", *got, want)
	}
}

// The SPEC §3 values, spelled out once more so a changed default is noticed.
func TestDefaultValuesMatchSpec(t *testing.T) {
	c := mustLoad(t, minimal)
	r := c.Routes[0]
	tests := []struct {
		key       string
		got, want any
	}{
		{"server.listen", c.Server.Listen, ":8080"},
		{"server.body_limit", c.Server.BodyLimit, Size(1 << 20)},
		{"server.read_timeout", c.Server.ReadTimeout, 10 * time.Second},
		{"server.write_timeout", c.Server.WriteTimeout, 60 * time.Second},
		{"server.shutdown_timeout", c.Server.ShutdownTimeout, 15 * time.Second},
		{"server.max_conns", c.Server.MaxConns, 4096},
		{"admin.listen", c.Admin.Listen, "127.0.0.1:9090"},
		{"admin.console", c.Admin.Console, true},
		{"admin.trace_url", c.Admin.TraceURL, ""},
		{"admin.secure_cookies", c.Admin.SecureCookies, false},
		{"admin.console_hosts", c.Admin.ConsoleHosts, []string(nil)},
		{"admin.token", c.Admin.Token, ""},
		{"store.driver", c.Store.Driver, "sqlite"},
		{"store.dsn", c.Store.DSN, "data/hookstamp.db"},
		{"store.max_open_conns", c.Store.MaxOpenConns, 16},
		{"store.auto_migrate", c.Store.AutoMigrate, true},
		{"store.sweep_interval", c.Store.SweepInterval, time.Minute},
		{"store.on_unavailable", c.Store.OnUnavailable, "reject"},
		{"screen.driver", c.Screen.Driver, "memory"},
		{"screen.redis.addrs", c.Screen.Redis.Addrs, []string{"127.0.0.1:6379"}},
		{"screen.prefix", c.Screen.Prefix, "hookstamp:"},
		{"screen.lease", c.Screen.Lease, 30 * time.Second},
		{"screen.ttl", c.Screen.TTL, 24 * time.Hour},
		{"screen.max_cached_body", c.Screen.MaxCachedBody, Size(64 << 10)},
		{"screen.local_cache", c.Screen.LocalCache, Size(32 << 20)},
		{"screen.on_unavailable", c.Screen.OnUnavailable, "store"},
		{"telemetry.service_name", c.Telemetry.ServiceName, "hookstamp"},
		{"telemetry.traces.exporter", c.Telemetry.Traces.Exporter, "none"},
		{"telemetry.traces.sample_ratio", c.Telemetry.Traces.SampleRatio, 1.0},
		{"telemetry.metrics.prometheus", c.Telemetry.Metrics.Prometheus, true},
		{"telemetry.log.level", c.Telemetry.Log.Level, "info"},
		{"telemetry.log.format", c.Telemetry.Log.Format, "json"},
		{"methods", r.Methods, []string{"POST"}},
		{"mode", r.Mode, "enforce"},
		{"upstream.timeout", r.Upstream.Timeout, 10 * time.Second},
		{"upstream.key_header", r.Upstream.KeyHeader, "Idempotency-Key"},
		{"key.required", r.Key.Required, true},
		{"key.max_length", r.Key.MaxLength, 255},
		{"fingerprint.mode", r.Fingerprint.Mode, "body"},
		{"fingerprint.on_mismatch", r.Fingerprint.OnMismatch, "reject"},
		{"verify.scheme", r.Verify.Scheme, ""},
		{"verify.tolerance", r.Verify.Tolerance, 5 * time.Minute},
		{"inflight", r.Inflight, "wait"},
		{"wait_timeout", r.WaitTimeout, 10 * time.Second},
		{"record.statuses", r.Record.Statuses, []string{"2xx", "4xx"}},
		{"record.headers", r.Record.Headers, []string{"Content-Type"}},
		{"record.max_body", r.Record.MaxBody, Size(1 << 20)},
		{"record.ambiguous", r.Record.Ambiguous, "release"},
		{"retention", r.Retention, 720 * time.Hour},
		{"source", r.Source, "ip"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("%s = %#v, want %#v", tt.key, tt.got, tt.want)
			}
		})
	}
}

func TestFileValues(t *testing.T) {
	c := mustLoad(t, `
server:
  listen: "0.0.0.0:8443"
  body_limit: 512KiB
  trusted_proxies: [10.0.0.0/8, 192.168.1.1]
store:
  driver: postgres
  dsn: postgres://u:p@db:5432/hs
  max_open_conns: 4
screen:
  driver: redis
  redis: {addrs: ["r1:6379", "r2:6379"], tls: true}
  lease: 1m
  max_cached_body: 2048
telemetry:
  traces: {exporter: otlp, sample_ratio: 0.25}
routes:
  - name: shop_1
    path: /hooks/*
    methods: [POST, PUT]
    mode: shadow
    upstream: {url: "https://app.internal/hooks", timeout: 45s, key_header: ""}
    key:
      sources:
        - header: X-Event-Id
        - json: data.object.id
        - form: notify_id
        - query: event_id
        - template: "{json:order_id}-{json:event}-{json:seq}"
        - body_hash: sha256
      required: false
      max_length: 128
    fingerprint: {mode: fields, fields: ["json:amount", "form:total_amount"], on_mismatch: replay}
    verify: {scheme: hmac, secrets: [s1, s2], header: X-Signature, algorithm: sha512, encoding: base64, prefix: "sha512="}
    inflight: reject
    wait_timeout: 3s
    record: {statuses: [200, "201", 4xx], headers: [Content-Type, X-Request-Id], max_body: 1GiB, ambiguous: hold}
    retention: 48h
    source: header:X-Tenant
`)
	r := c.Routes[0]
	tests := []struct {
		key       string
		got, want any
	}{
		{"server.listen", c.Server.Listen, "0.0.0.0:8443"},
		{"server.body_limit", c.Server.BodyLimit, 512 * KiB},
		{"server.trusted_proxies", c.Server.TrustedProxies, []string{"10.0.0.0/8", "192.168.1.1"}},
		{"server.read_timeout (default kept)", c.Server.ReadTimeout, 10 * time.Second},
		{"store.driver", c.Store.Driver, "postgres"},
		{"store.max_open_conns", c.Store.MaxOpenConns, 4},
		{"screen.redis.addrs", c.Screen.Redis.Addrs, []string{"r1:6379", "r2:6379"}},
		{"screen.redis.tls", c.Screen.Redis.TLS, true},
		{"screen.lease", c.Screen.Lease, time.Minute},
		{"screen.max_cached_body", c.Screen.MaxCachedBody, Size(2048)},
		{"telemetry.traces.exporter", c.Telemetry.Traces.Exporter, "otlp"},
		{"telemetry.traces.sample_ratio", c.Telemetry.Traces.SampleRatio, 0.25},
		{"name", r.Name, "shop_1"},
		{"IsPrefix", r.IsPrefix(), true},
		{"PathPrefix", r.PathPrefix(), "/hooks/"},
		{"methods", r.Methods, []string{"POST", "PUT"}},
		{"mode", r.Mode, "shadow"},
		{"upstream.timeout", r.Upstream.Timeout, 45 * time.Second},
		{"upstream.key_header explicit empty", r.Upstream.KeyHeader, ""},
		{"key.sources", r.Key.Sources, []KeySource{
			{SourceHeader, "X-Event-Id"}, {SourceJSON, "data.object.id"}, {SourceForm, "notify_id"},
			{SourceQuery, "event_id"}, {SourceTemplate, "{json:order_id}-{json:event}-{json:seq}"}, {SourceBodyHash, "sha256"},
		}},
		{"key.required", r.Key.Required, false},
		{"key.max_length", r.Key.MaxLength, 128},
		{"fingerprint", r.Fingerprint, Fingerprint{Mode: "fields", Fields: []string{"json:amount", "form:total_amount"}, OnMismatch: "replay"}},
		{"verify", r.Verify, Verify{Scheme: "hmac", Secrets: []string{"s1", "s2"}, Tolerance: 5 * time.Minute, Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512="}},
		{"inflight", r.Inflight, "reject"},
		{"wait_timeout", r.WaitTimeout, 3 * time.Second},
		{"record.statuses normalised to text", r.Record.Statuses, []string{"200", "201", "4xx"}},
		{"record.headers", r.Record.Headers, []string{"Content-Type", "X-Request-Id"}},
		{"record.max_body", r.Record.MaxBody, GiB},
		{"record.ambiguous", r.Record.Ambiguous, "hold"},
		{"retention", r.Retention, 48 * time.Hour},
		{"SourceHeader", r.SourceHeader(), "X-Tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("%s = %#v, want %#v", tt.key, tt.got, tt.want)
			}
		})
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		get     func(*Config) any
		want    any
	}{
		{"store dsn", []string{"HOOKSTAMP_STORE__DSN=/tmp/x.db"}, func(c *Config) any { return c.Store.DSN }, "/tmp/x.db"},
		{"body limit size", []string{"HOOKSTAMP_SERVER__BODY_LIMIT=2MiB"}, func(c *Config) any { return c.Server.BodyLimit }, 2 * MiB},
		{"nested three levels", []string{"HOOKSTAMP_SCREEN__REDIS__PASSWORD=pw"}, func(c *Config) any { return c.Screen.Redis.Password }, "pw"},
		{"integer", []string{"HOOKSTAMP_STORE__MAX_OPEN_CONNS=3"}, func(c *Config) any { return c.Store.MaxOpenConns }, 3},
		{"boolean", []string{"HOOKSTAMP_STORE__AUTO_MIGRATE=false"}, func(c *Config) any { return c.Store.AutoMigrate }, false},
		{"float", []string{"HOOKSTAMP_TELEMETRY__TRACES__SAMPLE_RATIO=0.5"}, func(c *Config) any { return c.Telemetry.Traces.SampleRatio }, 0.5},
		{"duration", []string{"HOOKSTAMP_SCREEN__LEASE=2m"}, func(c *Config) any { return c.Screen.Lease }, 2 * time.Minute},
		{"comma list", []string{"HOOKSTAMP_SCREEN__REDIS__ADDRS=a:1, b:2"}, func(c *Config) any { return c.Screen.Redis.Addrs }, []string{"a:1", "b:2"}},
		{"empty turns admin off", []string{"HOOKSTAMP_ADMIN__LISTEN="}, func(c *Config) any { return c.Admin.Listen }, ""},
		{"env beats file", []string{"HOOKSTAMP_TELEMETRY__LOG__LEVEL=debug"}, func(c *Config) any { return c.Telemetry.Log.Level }, "debug"},
		{"ADMIN_TOKEN names no key: ignored", []string{"HOOKSTAMP_ADMIN_TOKEN=secret"}, func(c *Config) any { return c.Admin.Token }, ""},
		{"CONFIG names no key: ignored", []string{"HOOKSTAMP_CONFIG=/etc/x.yaml"}, func(c *Config) any { return c.Store.DSN }, "data/hookstamp.db"},
		{"other prefixes ignored", []string{"STORE__DSN=/nope"}, func(c *Config) any { return c.Store.DSN }, "data/hookstamp.db"},
	}
	doc := minimal + "telemetry: {log: {level: warn}}\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, doc, tt.environ...)
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

// A route's values cannot be set from the environment: a variable naming
// one is an error rather than silently ignored, and names itself.
func TestRouteOverridesAreRefused(t *testing.T) {
	for _, v := range []string{"HOOKSTAMP_ROUTES__0__PATH=/z", "HOOKSTAMP_ROUTES=x"} {
		assertProblem(t, mustFail(t, minimal, v), strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(strings.Split(v, "=")[0], "HOOKSTAMP_"), "__", ".")),
			"set by "+strings.Split(v, "=")[0]+": routes cannot be set from the environment")
	}
}

// SPEC §3: an environment variable overrides the file's value. A file
// value that the environment replaces is never used, so a ${NAME} in it
// that cannot be resolved is no error — SPEC §3's own example writes
// token: "${HOOKSTAMP_ADMIN_TOKEN}", which HOOKSTAMP_ADMIN__TOKEN
// overrides — and an error is never blamed on a variable that did not
// cause it.
func TestEnvironmentOverridesAFileReference(t *testing.T) {
	doc := minimal + "admin: {token: \"${HOOKSTAMP_ADMIN_TOKEN}\"}\nscreen: {lease: \"${LEASE}\", redis: {addrs: [\"${REDIS_ADDR}\"]}}\n"
	c, err := LoadFromBytes([]byte(doc), []string{
		"HOOKSTAMP_ADMIN__TOKEN=from-override",
		"HOOKSTAMP_SCREEN__LEASE=40s",
		"HOOKSTAMP_SCREEN__REDIS__ADDRS=cache:6379",
	})
	if err != nil {
		t.Fatalf("overridden file values refused:\n%v", err)
	}
	if c.Admin.Token != "from-override" || c.Screen.Lease != 40*time.Second || !reflect.DeepEqual(c.Screen.Redis.Addrs, []string{"cache:6379"}) {
		t.Errorf("admin.token %q, screen.lease %s, screen.redis.addrs %v; want the overrides", c.Admin.Token, c.Screen.Lease, c.Screen.Redis.Addrs)
	}
	// A reference the environment does not override is still an error,
	// and it is not blamed on an override of another key.
	errs := mustFail(t, doc, "HOOKSTAMP_SCREEN__LEASE=40s", "HOOKSTAMP_SCREEN__REDIS__ADDRS=cache:6379")
	assertProblem(t, errs, "admin.token", "HOOKSTAMP_ADMIN_TOKEN is not set")
	if len(errs) != 1 || strings.Contains(errs.Error(), "set by") {
		t.Errorf("want only the admin.token problem, not blamed on a variable; got:\n%v", errs)
	}
}

// A misspelt key whose ${NAME} is unset is reported as unknown too: told
// only of the variable, the operator would set it and learn of the typo on
// the next run, the value never used.
func TestUnknownKeyBesideAnUnsetVariable(t *testing.T) {
	errs := mustFail(t, minimal+`admin: {tokn: "${HOOKSTAMP_ADMIN_TOKEN}"}`+"\n")
	want := "admin.tokn: environment variable HOOKSTAMP_ADMIN_TOKEN is not set (write ${HOOKSTAMP_ADMIN_TOKEN:-} to default to empty)\n" +
		`admin.tokn: unknown key (did you mean "token"?)`
	if got := errs.Error(); got != want {
		t.Errorf("errors:\n%s\nwant:\n%s", got, want)
	}
}

// admin.console_hosts takes host names (a container's with "_", a final
// dot, an IP address), from the file or, comma-separated, the environment.
func TestConsoleHosts(t *testing.T) {
	c := mustLoad(t, minimal+"admin: {console_hosts: [console.example.com, hookstamp_admin, 'ops.example.', 10.0.0.7, '::1']}\n")
	if want := []string{"console.example.com", "hookstamp_admin", "ops.example.", "10.0.0.7", "::1"}; !reflect.DeepEqual(c.Admin.ConsoleHosts, want) {
		t.Errorf("admin.console_hosts = %q, want %q", c.Admin.ConsoleHosts, want)
	}
	c, err := LoadFromBytes([]byte(minimal), []string{"HOOKSTAMP_ADMIN__CONSOLE_HOSTS=a.example, b.example"})
	if err != nil || !reflect.DeepEqual(c.Admin.ConsoleHosts, []string{"a.example", "b.example"}) {
		t.Fatalf("from the environment: %v, %v", c, err)
	}
}

func TestEnvironmentBadValueNamesVariable(t *testing.T) {
	errs := mustFail(t, minimal, "HOOKSTAMP_SERVER__BODY_LIMIT=lots")
	assertProblem(t, errs, "server.body_limit", "HOOKSTAMP_SERVER__BODY_LIMIT")
}

func TestInterpolation(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		environ []string
		want    string
	}{
		{"set", "${TOKEN}", []string{"TOKEN=abc"}, "abc"},
		{"set to empty", "${TOKEN}", []string{"TOKEN="}, ""},
		{"default when unset", "${TOKEN:-fallback}", nil, "fallback"},
		{"empty default", "${HOOKSTAMP_ADMIN_TOKEN:-}", nil, ""},
		{"default when empty", "${TOKEN:-fallback}", []string{"TOKEN="}, "fallback"},
		{"set beats default", "${TOKEN:-fallback}", []string{"TOKEN=abc"}, "abc"},
		{"embedded twice", "a-${X}-${Y:-y}-b", []string{"X=x"}, "a-x-y-b"},
		{"not rescanned", "${X}", []string{"X=${Y}"}, "${Y}"},
		{"last definition wins", "${X}", []string{"X=1", "X=2"}, "2"},
		{"plain dollar kept", "$X and $", nil, "$X and $"},
		{"braces in a default", `${ACK:-{"ok":{"a":1}}}`, nil, `{"ok":{"a":1}}`},
		{"braces in a default, set", `${ACK:-{"ok":true}}!`, []string{"ACK=x"}, "x!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, minimal+"admin: {token: '"+tt.value+"'}\n", tt.environ...)
			if c.Admin.Token != tt.want {
				t.Errorf("admin.token = %q, want %q", c.Admin.Token, tt.want)
			}
		})
	}
}

func TestInterpolationTypedValues(t *testing.T) {
	c := mustLoad(t, minimal+"screen: {lease: '${LEASE:-45s}', max_cached_body: '${MCB}'}\n", "MCB=1KiB")
	if c.Screen.Lease != 45*time.Second || c.Screen.MaxCachedBody != KiB {
		t.Errorf("lease %s, max_cached_body %s; want 45s, 1KiB", c.Screen.Lease, c.Screen.MaxCachedBody)
	}
}

func TestInterpolationErrors(t *testing.T) {
	tests := []struct {
		name, doc, path, want string
	}{
		{"unset", minimal + "admin: {token: '${NOPE}'}\n", "admin.token", "environment variable NOPE is not set"},
		{"unset in a list", strings.Replace(minimal, "sources: [{header: X-Event-Id}]", "sources: [{header: X-Event-Id}]\n    verify: {scheme: github, secrets: [ok, '${GH_SECRET}']}", 1),
			"routes[0].verify.secrets[1]", "GH_SECRET is not set"},
		{"unterminated", minimal + "server: {listen: 'x${NOPE'}\n", "server.listen", `unterminated "${NOPE"`},
		{"bad name", minimal + "server: {listen: '${1X}'}\n", "server.listen", `bad variable reference "${1X}"`},
		{"a reference in a default", minimal + "server: {listen: '${A:-${B}}'}\n", "server.listen", `a reference in a default, "${A:-${B}}": not supported`},
		// At a secret's path the text after "${" may be the rest of a
		// password: the problem is named, the text is not.
		{"unterminated secret", minimal + "admin: {token: 'x${NOPE'}\n", "admin.token", "malformed ${…} reference (not shown"},
		{"bad name in a secret", minimal + "admin: {token: '${1X}'}\n", "admin.token", "malformed ${…} reference (not shown"},
		// No override sets a route's value: the way to a "${" in it is a
		// variable's text.
		{"unterminated route secret", strings.Replace(minimal, "sources: [{header: X-Event-Id}]", "sources: [{header: X-Event-Id}]\n    verify: {scheme: github, secrets: ['pa${ss']}", 1),
			"routes[0].verify.secrets[0]", "through a ${NAME} whose variable holds it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertProblem(t, mustFail(t, tt.doc), tt.path, tt.want)
		})
	}
}

func TestPresets(t *testing.T) {
	const adyenSecret = "    verify: {secrets: [DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00]}\n"
	const head = `
routes:
  - name: p
    path: /p
    upstream: {url: "http://127.0.0.1:9000/p"}
`
	tests := []struct {
		name string
		doc  string
		get  func(Route) any
		want any
	}{
		{"stripe fills key", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Key.Sources }, []KeySource{{SourceJSON, "id"}}},
		{"stripe fills scheme", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Verify.Scheme }, SchemeStripe},
		{"stripe fills retention", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Retention }, 96 * time.Hour},
		{"stripe keeps the default key header", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Upstream.KeyHeader }, "Idempotency-Key"},
		{"explicit key sources win", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n    key: {sources: [{header: X-Mine}]}\n",
			func(r Route) any { return r.Key.Sources }, []KeySource{{SourceHeader, "X-Mine"}}},
		{"explicit retention wins", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n    retention: 10h\n",
			func(r Route) any { return r.Retention }, 10 * time.Hour},
		{"explicit empty scheme wins", "    preset: stripe\n    verify: {scheme: ''}\n",
			func(r Route) any { return r.Verify.Scheme }, ""},
		{"alipay fingerprint fields", "    preset: alipay\n    verify: {public_key: '" + testPublicKey(t) + "'}\n",
			func(r Route) any { return r.Fingerprint },
			Fingerprint{Mode: FingerprintFields, Fields: []string{"form:out_trade_no", "form:trade_no", "form:trade_status", "form:total_amount"}, OnMismatch: "reject"}},
		{"alipay key", "    preset: alipay\n    verify: {public_key: '" + testPublicKey(t) + "'}\n",
			func(r Route) any { return r.Key.Sources }, []KeySource{{SourceForm, "notify_id"}}},
		{"explicit fingerprint mode drops preset fields", "    preset: alipay\n    verify: {public_key: '" + testPublicKey(t) + "'}\n    fingerprint: {mode: body}\n",
			func(r Route) any { return r.Fingerprint }, Fingerprint{Mode: FingerprintBody, OnMismatch: "reject"}},
		{"explicit on_mismatch keeps preset fields", "    preset: alipay\n    verify: {public_key: '" + testPublicKey(t) + "'}\n    fingerprint: {on_mismatch: replay}\n",
			func(r Route) any { return r.Fingerprint.Fields }, []string{"form:out_trade_no", "form:trade_no", "form:trade_status", "form:total_amount"}},
		{"slack lets key-less requests through", "    preset: slack\n    verify: {secrets: [s3cret]}\n",
			func(r Route) any { return r.Key.Required }, false},
		{"explicit key.required wins over slack's", "    preset: slack\n    verify: {secrets: [s3cret]}\n    key: {required: true}\n",
			func(r Route) any { return []any{r.Key.Required, r.Key.Sources} }, []any{true, []KeySource{{SourceJSON, "event_id"}}}},
		{"stripe requires a key", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Key.Required }, true},
		{"twitch keeps Twitch's 10 minute limit", "    preset: twitch\n    verify: {secrets: [s3cret]}\n",
			func(r Route) any { return r.Verify.Tolerance }, 10 * time.Minute},
		{"explicit tolerance wins over twitch's", "    preset: twitch\n    verify: {secrets: [s3cret], tolerance: 2m}\n",
			func(r Route) any { return r.Verify.Tolerance }, 2 * time.Minute},
		// docs/presets.md: "verify.tolerance (default 5 minutes; 10 for
		// Twitch)" — the scheme's default, with or without the preset.
		{"scheme twitch without the preset keeps Twitch's 10 minute limit", "    key: {sources: [{header: Twitch-Eventsub-Message-Id}]}\n    verify: {scheme: twitch, secrets: [s3cret]}\n",
			func(r Route) any { return r.Verify.Tolerance }, 10 * time.Minute},
		{"explicit tolerance wins over scheme twitch's", "    key: {sources: [{header: Twitch-Eventsub-Message-Id}]}\n    verify: {scheme: twitch, secrets: [s3cret], tolerance: 2m}\n",
			func(r Route) any { return r.Verify.Tolerance }, 2 * time.Minute},
		{"stripe keeps the default tolerance", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n",
			func(r Route) any { return r.Verify.Tolerance }, 5 * time.Minute},
		{"paypal has no scheme", "    preset: paypal\n",
			func(r Route) any { return r.Verify.Scheme }, ""},
		{"adyen template", "    preset: adyen\n" + adyenSecret,
			func(r Route) any { return r.Key.Sources[0].Kind }, SourceTemplate},
		{"adyen verifies inside the body", "    preset: adyen\n" + adyenSecret,
			func(r Route) any {
				return []any{r.Verify.Scheme, r.Verify.JSON, r.Verify.SecretEncoding, r.Verify.Single}
			},
			[]any{SchemeHMAC, "notificationItems.0.NotificationRequestItem.additionalData.hmacSignature", "hex", []string{"notificationItems"}}},
		{"a route naming another scheme gets none of the preset's verify settings", "    preset: zoom\n    verify: {scheme: github, secrets: [s]}\n",
			func(r Route) any {
				return []any{r.Verify.Template, r.Verify.Header, r.Verify.Challenge, r.Verify.Timestamp}
			},
			[]any{"", "", "", VerifyTimestamp{}}},
		{"a route naming another scheme keeps that scheme's tolerance, not the preset's", "    preset: dingtalk\n    verify: {scheme: stripe, secrets: [s]}\n",
			func(r Route) any { return r.Verify.Tolerance }, 5 * time.Minute},
		{"a route's own verify settings win over the preset's", "    preset: zoom\n    verify: {secrets: [s], header: X-Mine}\n",
			func(r Route) any { return []any{r.Verify.Header, r.Verify.Prefix, r.Verify.Challenge} },
			[]any{"X-Mine", "v0=", ChallengeZoom}},
		{"dingtalk keeps its hour", "    preset: dingtalk\n    verify: {secrets: [s]}\n",
			func(r Route) any { return []any{r.Verify.Tolerance, r.Verify.Template, r.Verify.Timestamp} },
			[]any{time.Hour, "{header:timestamp}\n{secret}", VerifyTimestamp{Header: "timestamp", Unit: "ms"}}},
		{"adyen retention covers 30 days", "    preset: adyen\n" + adyenSecret,
			func(r Route) any { return r.Retention >= 31*24*time.Hour }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, head+tt.doc)
			if got := tt.get(c.Routes[0]); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

// Every preset must give a route that validates once its secrets are given,
// use only known schemes and parseable sources, and keep rows at least as
// long as the provider retries.
func TestEveryPresetLoads(t *testing.T) {
	key := testPublicKey(t)
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			doc := "routes:\n  - name: p\n    path: /p\n    preset: " + p.Name +
				"\n    upstream: {url: 'http://127.0.0.1:9000/p'}" +
				"\n" + presetVerify(p, key)
			c := mustLoad(t, doc)
			r := c.Routes[0]
			if !reflect.DeepEqual(r.Key.Sources, p.Key) || r.Key.Required == p.KeyOptional || r.Verify.Scheme != p.Scheme || r.Retention != p.Retention {
				t.Errorf("route %+v does not carry preset %+v", r, p)
			}
			if p.Retention < 72*time.Hour {
				t.Errorf("retention %s is under 72h", p.Retention)
			}
		})
	}
}

func presetSecret(scheme string) string {
	switch scheme {
	case "":
		return "" // no scheme: setting a secret would be an error
	case SchemeStandardWebhooks:
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	default:
		return "s3cret"
	}
}

func TestPresetsIsACopy(t *testing.T) {
	ps := Presets()
	ps[0].Key[0].Arg = "changed"
	if p, _ := LookupPreset(ps[0].Name); p.Key[0].Arg == "changed" {
		t.Fatal("changing the result of Presets changed the table")
	}
}

// assertProblem fails unless one problem is at path and mentions want.
func assertProblem(tb testing.TB, errs Errors, path, want string) {
	tb.Helper()
	for _, e := range errs {
		if e.Path == path && strings.Contains(e.Error(), want) {
			return
		}
	}
	tb.Errorf("no problem at %q mentioning %q; got:\n%v", path, want, errs)
}

func TestBrokenFiles(t *testing.T) {
	// three routes so that routes[2] exists; each case edits one thing.
	const base = `
screen: {lease: 30s}
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
  - name: b
    path: /b
    upstream: {url: "http://127.0.0.1:9000/b"}
    key: {sources: [{header: X-Event-Id}]}
  - name: c
    path: /c
    upstream: {url: "http://127.0.0.1:9000/c"}
    key: {sources: [{header: X-Event-Id}]}
`
	edit := func(old, new string) string {
		if !strings.Contains(base, old) {
			panic("test edit does not apply: " + old)
		}
		return strings.Replace(base, old, new, 1)
	}
	route2 := func(extra string) string { return base + extra }
	tests := []struct {
		name, doc, path, want string
	}{
		{"unknown top-level key", base + "serverr: {listen: ':1'}\n", "serverr", `unknown key (did you mean "server"?)`},
		{"unknown nested key", edit("screen: {lease: 30s}", "screen: {lease: 30s, redis: {adrs: [x]}}"), "screen.redis.adrs", `unknown key (did you mean "addrs"?)`},
		{"unknown route key", edit(`path: /b`, "path: /b\n    retries: 3"), "routes[1].retries", "unknown key"},
		{"unknown source", edit(`path: /c
    upstream: {url: "http://127.0.0.1:9000/c"}
    key: {sources: [{header: X-Event-Id}]}`, `path: /c
    upstream: {url: "http://127.0.0.1:9000/c"}
    key: {sources: [{jsn: id}]}`), "routes[2].key.sources[0]", `unknown source "jsn" (want header, json, form, query, template, body_hash or fields_hash)`},
		{"bad duration", edit("lease: 30s", "lease: 30 seconds"), "screen.lease", "bad duration"},
		{"duration without unit", edit("lease: 30s", "lease: 30"), "screen.lease", "bad duration 30"},
		{"bad size", base + "server: {body_limit: 1MB2}\n", "server.body_limit", "bad size"},
		{"negative size", base + "server: {body_limit: -5}\n", "server.body_limit", "bad size"},
		{"no connections", base + "server: {max_conns: 0}\n", "server.max_conns", "must be at least 1, got 0"},
		{"duplicate route names", edit("name: c", "name: a"), "routes[2].name", `"a" is already the name of routes[0]`},
		{"bad route name", edit("name: b", "name: Billing!"), "routes[1].name", "not a valid route name"},
		{"route name too long", edit("name: b", "name: "+strings.Repeat("x", 65)), "routes[1].name", "not a valid route name"},
		{"missing route name", edit("  - name: b\n", "  - methods: [POST]\n"), "routes[1].name", "required"},
		{"retention not above lease", route2("    retention: 20s\n"), "routes[2].retention", "not longer than screen.lease"},
		{"retention equal to lease", route2("    retention: 30s\n"), "routes[2].retention", "not longer than screen.lease"},
		{"lease not above timeout", edit(`url: "http://127.0.0.1:9000/b"}`, `url: "http://127.0.0.1:9000/b", timeout: 30s}`), "routes[1].upstream.timeout", "not shorter than screen.lease"},
		{"Set-Cookie recorded", route2("    record: {headers: [Content-Type, set-cookie]}\n"), "routes[2].record.headers[1]", "must not be recorded"},
		{"outcome header recorded", route2("    record: {headers: [Content-Type, hookstamp-outcome]}\n"), "routes[2].record.headers[1]", "the replay sets it itself"},
		{"Date recorded", route2("    record: {headers: [Content-Type, date]}\n"), "routes[2].record.headers[1]", "the replay sets it itself"},
		{"Idempotent-Replayed recorded", route2("    record: {headers: [Idempotent-Replayed]}\n"), "routes[2].record.headers[0]", "the replay sets it itself"},
		{"503 listed", route2("    record: {statuses: [2xx, 503]}\n"), "routes[2].record.statuses[1]", "503 is never final"},
		{"5xx listed", route2("    record: {statuses: [5xx]}\n"), "routes[2].record.statuses[0]", "never final"},
		{"429 listed", route2("    record: {statuses: [\"429\"]}\n"), "routes[2].record.statuses[0]", "429 is never final"},
		{"bad status", route2("    record: {statuses: [2xx, 999]}\n"), "routes[2].record.statuses[1]", "bad status"},
		{"no statuses", route2("    record: {statuses: []}\n"), "routes[2].record.statuses", "at least one final status"},
		{"unknown scheme", route2("    verify: {scheme: strip, secrets: [x]}\n"), "routes[2].verify.scheme", `unknown scheme "strip"`},
		{"hmac bad algorithm", route2("    verify: {scheme: hmac, secrets: [x], header: X-Sig, algorithm: md5}\n"), "routes[2].verify.algorithm", `unknown value "md5"`},
		{"hmac bad encoding", route2("    verify: {scheme: hmac, secrets: [x], header: X-Sig, encoding: base32}\n"), "routes[2].verify.encoding", `unknown value "base32"`},
		{"stripe without secret", route2("    verify: {scheme: stripe, secrets: ['${S:-}']}\n"), "routes[2].verify.secrets", "at least one non-empty secret"},
		{"secrets without scheme", route2("    verify: {secrets: [x]}\n"), "routes[2].verify.scheme", "no scheme"},
		{"alipay without key", route2("    verify: {scheme: alipay}\n"), "routes[2].verify.public_key", "required with scheme alipay"},
		{"wechatpay bad key", route2("    verify: {scheme: wechatpay, public_key: 'not a key!'}\n"), "routes[2].verify.public_key", "neither PEM nor base64"},
		{"square without url", route2("    verify: {scheme: square, secrets: [x]}\n"), "routes[2].verify.url", "scheme square"},
		{"standard-webhooks secret not base64", route2("    verify: {scheme: standard-webhooks, secrets: ['whsec_***']}\n"), "routes[2].verify.secrets[0]", "not a Standard Webhooks secret"},
		{"bad template", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{template: '{json:id'}]}\n  - name: b"), "routes[0].key.sources[0]", "unclosed"},
		{"unknown placeholder", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{template: '{body:id}'}]}\n  - name: b"), "routes[0].key.sources[0]", "unknown placeholder {body:id}"},
		{"constant template", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{template: '{route}-x'}]}\n  - name: b"), "routes[0].key.sources[0]", "every delivery would share one key"},
		{"body_hash md5", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{body_hash: md5}]}\n  - name: b"), "routes[0].key.sources[0]", "want sha256"},
		{"source not one entry", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{header: A, json: b}]}\n  - name: b"), "routes[0].key.sources[0]", "one-entry mapping"},
		{"required without sources", edit("key: {sources: [{header: X-Event-Id}]}\n  - name: b", "key: {required: true}\n  - name: b"), "routes[0].key.sources", "at least one source"},
		{"missing upstream url", edit(`upstream: {url: "http://127.0.0.1:9000/b"}`, `upstream: {timeout: 5s}`), "routes[1].upstream.url", "required"},
		{"relative upstream url", edit(`url: "http://127.0.0.1:9000/b"`, `url: "/b"`), "routes[1].upstream.url", "not an absolute http"},
		{"ftp upstream url", edit(`url: "http://127.0.0.1:9000/b"`, `url: "ftp://h/b"`), "routes[1].upstream.url", "not an absolute http"},
		{"upstream host not ASCII", edit(`url: "http://127.0.0.1:9000/b"`, `url: "https://bücher.example/b"`), "routes[1].upstream.url", `host "bücher.example" is not ASCII: write its A-label`},
		{"path without slash", edit("path: /b", "path: b"), "routes[1].path", `must start with "/"`},
		{"dot-dot segment", edit("path: /b", "path: /b/../c"), "routes[1].path", `".." segment`},
		{"empty segment", edit("path: /b", "path: /b//c"), "routes[1].path", `empty segment`},
		{"query in path", edit("path: /b", "path: /b?x=1"), "routes[1].path", `no query`},
		{"star in the middle", edit("path: /b", "path: /b/*/x"), "routes[1].path", `only allowed as a final "/*"`},
		{"same path and method", edit("path: /c", "path: /a"), "routes[2].path", `POST /a is already routed by routes[0]`},
		{"lower-case method", route2("    methods: [post]\n"), "routes[2].methods[0]", "upper case"},
		{"bad method", route2("    methods: [\"PO ST\"]\n"), "routes[2].methods[0]", "not a valid HTTP method"},
		{"method listed twice", route2("    methods: [POST, PUT, POST]\n"), "routes[2].methods[2]", `"POST" is listed twice`},
		{"bad mode", route2("    mode: enforced\n"), "routes[2].mode", `unknown value "enforced" (want enforce or shadow)`},
		{"bad fingerprint mode", route2("    fingerprint: {mode: hash}\n"), "routes[2].fingerprint.mode", `unknown value "hash"`},
		{"fields mode without fields", route2("    fingerprint: {mode: fields}\n"), "routes[2].fingerprint.fields", "at least one field"},
		{"fields without fields mode", route2("    fingerprint: {fields: ['json:amount']}\n"), "routes[2].fingerprint.fields", "only used with mode fields"},
		{"bad field", route2("    fingerprint: {mode: fields, fields: ['amount']}\n"), "routes[2].fingerprint.fields[0]", "bad field"},
		{"bad on_mismatch", route2("    fingerprint: {on_mismatch: ignore}\n"), "routes[2].fingerprint.on_mismatch", "unknown value"},
		{"bad inflight", route2("    inflight: queue\n"), "routes[2].inflight", "unknown value"},
		{"zero wait timeout", route2("    wait_timeout: 0s\n"), "routes[2].wait_timeout", "greater than 0"},
		{"bad ambiguous", route2("    record: {ambiguous: retry}\n"), "routes[2].record.ambiguous", "unknown value"},
		{"bad source", route2("    source: cookie\n"), "routes[2].source", `bad source "cookie"`},
		{"unknown preset", route2("    preset: strip\n"), "routes[2].preset", `unknown preset "strip"`},
		{"bad key_header", edit(`url: "http://127.0.0.1:9000/b"`, `url: "http://127.0.0.1:9000/b", key_header: "Idem Key"`), "routes[1].upstream.key_header", "not a valid header name"},
		{"zero max_length", edit("key: {sources: [{header: X-Event-Id}]}\n  - name: b", "key: {sources: [{header: X-Event-Id}], max_length: 0}\n  - name: b"), "routes[0].key.max_length", "between 1 and 2048"},
		// PostgreSQL cannot index a key much over 2.7 KB: it could never be recorded.
		{"max_length beyond the ledger", edit("key: {sources: [{header: X-Event-Id}]}\n  - name: b", "key: {sources: [{header: X-Event-Id}], max_length: 4096}\n  - name: b"), "routes[0].key.max_length", "between 1 and 2048"},
		// What `gateway serve` refuses, `gateway check` refuses too.
		{"optional key without sources", edit("key: {sources: [{header: X-Event-Id}]}\n  - name: b", "key: {required: false}\n  - name: b"), "routes[0].key.sources", "at least one source"},
		{"json source with spaces", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{json: ' id'}]}\n  - name: b"), "routes[0].key.sources[0]", "surrounding spaces"},
		{"placeholder with spaces", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{template: '{json: order_id}-{json:seq}'}]}\n  - name: b"), "routes[0].key.sources[0]", "surrounding spaces"},
		{"adjacent placeholders", edit("sources: [{header: X-Event-Id}]}\n  - name: b", "sources: [{template: '{json:a}{json:b}'}]}\n  - name: b"), "routes[0].key.sources[0]", "no text between them"},
		{"fingerprint field twice", route2("    fingerprint: {mode: fields, fields: ['json:amount', 'json:amount']}\n"), "routes[2].fingerprint.fields[1]", "already fields[0]"},
		{"fingerprint field with a space", route2("    fingerprint: {mode: fields, fields: ['json: amount']}\n"), "routes[2].fingerprint.fields[0]", "surrounding spaces"},
		// A key or URL without a scheme would verify nothing, silently.
		{"public_key without scheme", route2("    verify: {public_key: 'MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA'}\n"), "routes[2].verify.scheme", "public_key set but no scheme"},
		{"url without scheme", route2("    verify: {url: 'https://example.com/hook'}\n"), "routes[2].verify.scheme", "url set but no scheme"},
		{"bad store driver", base + "store: {driver: mysql}\n", "store.driver", `unknown value "mysql" (want sqlite or postgres)`},
		{"empty dsn", base + "store: {dsn: ''}\n", "store.dsn", "required"},
		{"bad store on_unavailable", base + "store: {on_unavailable: store}\n", "store.on_unavailable", "unknown value"},
		{"bad screen driver", edit("screen: {lease: 30s}", "screen: {lease: 30s, driver: memcached}"), "screen.driver", "unknown value"},
		{"bad screen on_unavailable", edit("screen: {lease: 30s}", "screen: {lease: 30s, on_unavailable: ignore}"), "screen.on_unavailable", "unknown value"},
		{"redis without addrs", edit("screen: {lease: 30s}", "screen: {lease: 30s, driver: redis, redis: {addrs: []}}"), "screen.redis.addrs", "at least one"},
		{"cluster with db", edit("screen: {lease: 30s}", "screen: {lease: 30s, redis: {addrs: ['a:1', 'b:2'], db: 2}}"), "screen.redis.db", "must be 0"},
		{"bad log level", base + "telemetry: {log: {level: verbose}}\n", "telemetry.log.level", "unknown value"},
		{"bad log format", base + "telemetry: {log: {format: xml}}\n", "telemetry.log.format", "unknown value"},
		{"bad exporter", base + "telemetry: {traces: {exporter: jaeger}}\n", "telemetry.traces.exporter", "unknown value"},
		{"sample ratio above 1", base + "telemetry: {traces: {sample_ratio: 1.5}}\n", "telemetry.traces.sample_ratio", "between 0 and 1"},
		{"sample ratio not a number", base + "telemetry: {traces: {sample_ratio: .nan}}\n", "telemetry.traces.sample_ratio", "between 0 and 1"},
		{"zero body limit", base + "server: {body_limit: 0}\n", "server.body_limit", "greater than 0"},
		{"bad admin listen", base + "admin: {listen: localhost}\n", "admin.listen", "not host:port"},
		{"admin on the server port", base + "admin: {listen: ':8080'}\n", "admin.listen", "both take port 8080"},
		{"trace url without placeholder", base + "admin: {trace_url: 'http://grafana:3000/explore'}\n", "admin.trace_url", "does not contain {trace_id}"},
		{"trace url not absolute", base + "admin: {trace_url: '/explore?traceId={trace_id}'}\n", "admin.trace_url", "not an absolute"},
		{"trace url not http", base + "admin: {trace_url: 'javascript:alert({trace_id})'}\n", "admin.trace_url", "not an absolute"},
		{"console not a bool", base + "admin: {console: sometimes}\n", "admin.console", "want true or false"},
		{"console host with a port", base + "admin: {console_hosts: [console.example.com:443]}\n", "admin.console_hosts[0]", "not a host name"},
		{"console host as a URL", base + "admin: {console_hosts: [ok.example, 'https://console.example.com']}\n", "admin.console_hosts[1]", "not a host name"},
		{"console host wildcard", base + "admin: {console_hosts: ['*.example.com']}\n", "admin.console_hosts[0]", "not a host name"},
		{"console host empty", base + "admin: {console_hosts: ['']}\n", "admin.console_hosts[0]", "not a host name"},
		{"bad trusted proxy", base + "server: {trusted_proxies: [10.0.0.0/33]}\n", "server.trusted_proxies[0]", "neither a CIDR"},
		{"bool as text", base + "store: {auto_migrate: maybe}\n", "store.auto_migrate", "want true or false"},
		{"int as text", base + "store: {max_open_conns: many}\n", "store.max_open_conns", "want an integer"},
		{"list as scalar", route2("    methods: POST\n"), "routes[2].methods", "want a list"},
		{"section as scalar", base + "server: yes\n", "server", "want a mapping"},
		{"route as scalar", base + "  - just a string\n", "routes[3]", "want a mapping"},
		{"no routes", "server: {listen: ':8080'}\n", "routes", "at least one route"},
	}
	if len(tests) < 10 {
		t.Fatal("keep at least ten broken files")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertProblem(t, mustFail(t, tt.doc), tt.path, tt.want)
		})
	}
}

// A duration over ten years is refused, where the gateway's arithmetic on
// it would overflow: twice a lease of 1 500 000 h let a second owner take
// a live claim, and a backoff near time.Duration's maximum broke its
// jitter. Ten years itself is taken.
func TestDurationsOverTenYearsAreRefused(t *testing.T) {
	route := func(upstream, extra string) string {
		return "routes:\n  - name: a\n    path: /a\n    upstream: {url: \"http://127.0.0.1:9000/a\"" + upstream + "}\n" +
			"    key: {sources: [{header: X-Event-Id}]}\n" + extra
	}
	async := func(extra string) string { return route("", "    delivery: async\n    async: {"+extra+"}\n") }
	for _, tc := range []struct{ doc, path string }{
		{"screen: {lease: 1500000h}\n" + minimal, "screen.lease"},
		{"screen: {ttl: 87601h}\n" + minimal, "screen.ttl"},
		{"server: {read_timeout: 87601h}\n" + minimal, "server.read_timeout"},
		{"server: {write_timeout: 87601h}\n" + minimal, "server.write_timeout"},
		{"server: {shutdown_timeout: 87601h}\n" + minimal, "server.shutdown_timeout"},
		{"store: {sweep_interval: 87601h}\n" + minimal, "store.sweep_interval"},
		{route("", "    retention: 87601h\n"), "routes[0].retention"},
		{route("", "    wait_timeout: 87601h\n"), "routes[0].wait_timeout"},
		{route("", "    verify: {scheme: stripe, secrets: [x], tolerance: 87601h}\n"), "routes[0].verify.tolerance"},
		{route(", timeout: 87601h", "    delivery: async\n"), "routes[0].upstream.timeout"},
		{async("max_age: 87601h"), "routes[0].async.max_age"},
		{async("backoff: {initial: 1s, max: 2562047h}"), "routes[0].async.backoff.max"},
		{async("backoff: {initial: 87601h, max: 87601h}"), "routes[0].async.backoff.initial"},
		{async("poll_interval: 87601h"), "routes[0].async.poll_interval"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			assertProblem(t, mustFail(t, tc.doc), tc.path, "must be at most 87600h (ten years)")
		})
	}
	c := mustLoad(t, "screen: {ttl: 87600h}\n"+route(", timeout: 87600h",
		"    retention: 87600h\n    delivery: async\n    async: {max_age: 87600h, backoff: {initial: 87600h, max: 87600h}, poll_interval: 87600h}\n"))
	if a := c.Routes[0].Async; c.Routes[0].Retention != MaxDuration || a.MaxAge != MaxDuration || a.Backoff.Max != MaxDuration {
		t.Errorf("ten years: retention %s, async %+v", c.Routes[0].Retention, a)
	}
}

// Two listeners that cannot both bind are refused by check, not found by
// serve when the second bind fails: a wildcard host takes the port on
// every address, and the loopback address has several names.
func TestListenersOnOnePort(t *testing.T) {
	tests := []struct{ name, server, admin, redirect, path, want string }{
		{"wildcard and loopback", ":19090", "127.0.0.1:19090", "", "admin.listen",
			`"127.0.0.1:19090" and server.listen ":19090" both take port 19090`},
		{"loopback names", "127.0.0.1:8080", "localhost:8080", "", "admin.listen", "both take port 8080"},
		{"IPv6 loopback and localhost", "[::1]:8080", "LOCALHOST:8080", "", "admin.listen", "both take port 8080"},
		{"IPv4 wildcard", "0.0.0.0:8080", "10.0.0.5:8080", "", "admin.listen", "both take port 8080"},
		{"IPv6 wildcard", "[::]:8443", "", "127.0.0.1:8443", "server.redirect_listen", `server.listen "[::]:8443" both take port 8443`},
		{"admin and redirect", ":8443", "127.0.0.1:80", ":80", "server.redirect_listen", `admin.listen "127.0.0.1:80" both take port 80`},
		{"ports written differently", ":8080", "127.0.0.1:08080", "", "admin.listen", "both take port 8080"},
		{"different hosts", "10.0.0.5:8080", "127.0.0.1:8080", "", "", ""},
		{"loopback beside another loopback address", "127.0.0.2:8080", "127.0.0.1:8080", "", "", ""},
		{"port 0", ":0", "127.0.0.1:0", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := `listen: "` + tt.server + `"`
			if tt.redirect != "" {
				server += `, redirect_listen: "` + tt.redirect + `", tls: {acme: {domains: [a.example]}}`
			}
			doc := minimal + "server: {" + server + "}\nadmin: {listen: \"" + tt.admin + "\"}\n"
			if tt.path == "" {
				mustLoad(t, doc)
				return
			}
			assertProblem(t, mustFail(t, doc), tt.path, tt.want)
		})
	}
}

// The OTLP protocol serve's exporter would refuse is refused by check, by
// the variable that names it; with another exporter it is not read.
func TestOTLPProtocolFromEnvironment(t *testing.T) {
	otlp := minimal + "telemetry: {traces: {exporter: otlp}}\n"
	errs := mustFail(t, otlp, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json")
	assertProblem(t, errs, "telemetry.traces.exporter",
		`OTLP protocol "http/json" is not supported (want http/protobuf or grpc; from OTEL_EXPORTER_OTLP_PROTOCOL)`)
	errs = mustFail(t, otlp, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift")
	assertProblem(t, errs, "telemetry.traces.exporter", `"thrift" is not supported (want http/protobuf or grpc; from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)`)
	mustLoad(t, otlp, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc")
	mustLoad(t, minimal, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json")
}

func TestSeveralErrorsAreAllListed(t *testing.T) {
	errs := mustFail(t, `
serverr: {}
screen: {lease: 5s, ttl: forever}
store: {driver: mysql}
routes:
  - name: Bad Name
    path: nope
    upstream: {url: "http://127.0.0.1:9000/x", timeout: 10s}
    key: {sources: [{jsn: id}]}
    record: {statuses: [503], headers: [Set-Cookie]}
  - name: ok
    path: /ok
    upstream: {}
    key: {sources: [{header: X}]}
    verify: {scheme: token, secrets: [x]}
`)
	want := []string{
		"screen.ttl", // type problems first, keys in sorted order
		"serverr",
		"store.driver",
		"routes[0].name",
		"routes[0].path",
		"routes[0].upstream.timeout",
		"routes[0].key.sources[0]",
		"routes[0].record.statuses[0]",
		"routes[0].record.headers[0]",
		"routes[1].upstream.url",
		"routes[1].upstream.timeout", // the default 10s is not under the 5s lease
		"routes[1].verify.header",
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Path)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problem paths:\n got %q\nwant %q\nerror:\n%v", got, want, errs)
	}
	if n := strings.Count(errs.Error(), "\n") + 1; n != len(want) {
		t.Errorf("Error() has %d lines, want one per problem (%d)", n, len(want))
	}
}

// A bad value is reported once: its fallback must not cause follow-on errors.
func TestBadValueReportedOnce(t *testing.T) {
	errs := mustFail(t, minimal+"screen: {lease: soon}\n")
	if len(errs) != 1 || errs[0].Path != "screen.lease" {
		t.Errorf("want exactly one problem at screen.lease, got:\n%v", errs)
	}
}

func TestValidateProgrammaticConfig(t *testing.T) {
	c := Default()
	c.Routes = []Route{demoRoute()}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults plus a demo route do not validate: %v", err)
	}
	c.Routes[0].Key.Sources[0].Kind = "jsn"
	c.Screen.Lease = 0
	err := c.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Validate error %v does not unwrap to *FieldError", err)
	}
	assertProblem(t, err.(Errors), "routes[0].key.sources[0]", `unknown source "jsn"`)
	assertProblem(t, err.(Errors), "screen.lease", "greater than 0")
}

func TestRedacted(t *testing.T) {
	c := mustLoad(t, `
admin: {token: t0ken, trace_url: "https://viewer:tr4ce@grafana:3000/explore?traceId={trace_id}"}
store: {driver: postgres, dsn: "postgres://hook:pa55word@db:5432/hs?sslmode=disable"}
screen: {redis: {password: r3dis, addrs: ["redis://:addrpw@r1:6379", "r2:6379"]}}
routes:
  - name: a
    path: /a
    upstream: {url: "http://user:upw@127.0.0.1:9000/a"}
    key: {sources: [{header: X}]}
    verify: {scheme: github, secrets: [gh1, ""]}
`)
	r := c.Redacted()
	tests := []struct {
		name      string
		got, want any
	}{
		{"admin.token", r.Admin.Token, RedactedValue},
		{"admin.trace_url", r.Admin.TraceURL, "https://[redacted]@grafana:3000/explore?traceId=[redacted]"},
		{"store.dsn", r.Store.DSN, "postgres://hook:[redacted]@db:5432/hs?sslmode=disable"},
		{"screen.redis.password", r.Screen.Redis.Password, RedactedValue},
		{"screen.redis.addrs", r.Screen.Redis.Addrs, []string{"redis://:[redacted]@r1:6379", "r2:6379"}},
		{"verify.secrets (empty stays empty)", r.Routes[0].Verify.Secrets, []string{RedactedValue, ""}},
		{"upstream.url", r.Routes[0].Upstream.URL, "http://[redacted]@127.0.0.1:9000/a"},
		{"original untouched", c.Routes[0].Verify.Secrets[0], "gh1"},
		{"original token untouched", c.Admin.Token, "t0ken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"t0ken", "tr4ce", "pa55word", "r3dis", "gh1", "upw", "addrpw"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("YAML output leaks %q:\n%s", secret, out)
		}
	}
	if empty := mustLoad(t, minimal).Redacted(); empty.Admin.Token != "" || empty.Screen.Redis.Password != "" {
		t.Errorf("unset secrets must stay empty, got token %q password %q", empty.Admin.Token, empty.Screen.Redis.Password)
	}
}

func TestRedactDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"data/hookstamp.db", "data/hookstamp.db"},
		{"file:x.db?_pragma=busy_timeout(5000)", "file:x.db?_pragma=busy_timeout(5000)"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:p%40ss@h:5432/db", "postgres://u:[redacted]@h:5432/db"},
		{"postgres://u@h/db?password=x&sslmode=disable", "postgres://u@h/db?password=[redacted]&sslmode=disable"},
		{"host=db user=u password='a b' dbname=x", "host=db user=u password=[redacted] dbname=x"},
		{"host=db password=secret sslpassword=k", "host=db password=[redacted] sslpassword=[redacted]"},
		{"host=db password='' dbname=x", "host=db password='' dbname=x"},
		{"host=db PASSWORD=secret", "host=db PASSWORD=[redacted]"},
		// Passwords pasted unescaped, with "/", "?" or "#" in them.
		{"postgres://app:pa/ss@db:5432/hooks", "postgres://app:[redacted]@db:5432/hooks"},
		{"postgres://app:p?s#s@db/hooks", "postgres://app:[redacted]@db/hooks"},
		{"http://h:8080/a", "http://h:8080/a"},
		// libpq's backslash escape inside an unquoted value (pgx takes it).
		{`host=db password=pa\ TOPSECRET dbname=x`, "host=db password=[redacted] dbname=x"},
		{"redis://:r3dis@h:6379", "redis://:[redacted]@h:6379"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := RedactDSN(tt.in); got != tt.want {
				t.Errorf("RedactDSN(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// An upstream URL's credential may be its user name alone or a query
// parameter: both are hidden, the parameters' names kept.
func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"https://TOPSECRET9@hooks.example.com/in?token=TOPSECRET9", "https://[redacted]@hooks.example.com/in?token=[redacted]"},
		{"http://user:upw@127.0.0.1:9000/a", "http://[redacted]@127.0.0.1:9000/a"},
		{"https://h/in?api_key=k3y&x=1&debug&empty=", "https://h/in?api_key=[redacted]&x=[redacted]&debug&empty="},
		{"https://h:8443/in?sig=a%20b#frag", "https://h:8443/in?sig=[redacted]"},
		{"https://h/in#frag", "https://h/in#frag"},
		{"https://app:pa/ss@h/in", "https://[redacted]@h/in"},
		// A forgotten scheme is quoted by an error.
		{"TOK@hooks.example.com/in?token=TOK", "[redacted]@hooks.example.com/in?token=[redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := RedactURL(tt.in); got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// The printed configuration is itself a valid configuration that prints the
// same once loaded back (no secrets here, so nothing is redacted).
func TestYAMLRoundTrip(t *testing.T) {
	c := mustLoad(t, minimal+`
server: {trusted_proxies: [10.0.0.0/8], body_limit: 1000}
  `+"\n")
	c.Routes = append(c.Routes, mustLoad(t, "routes:\n  - {name: g, path: /g/*, preset: alipay, upstream: {url: 'http://h/g', key_header: ''}, verify: {public_key: '"+testPublicKey(t)+"'}}\n").Routes...)
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	again, err := mustLoad(t, string(out)).YAML()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("round trip changed the configuration:\n%s\nthen\n%s", out, again)
	}
	for _, want := range []string{"body_limit: 1000B", "- header: X-Event-Id", "lease: 30s", "ttl: 24h\n", "retention: 720h\n",
		"max_cached_body: 64KiB", "key_header: \"\"", "methods: [POST]", "sample_ratio: 1.0", "preset: alipay"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML output lacks %q:\n%s", want, out)
		}
	}
}

func TestRepositoryConfigLoads(t *testing.T) {
	path := filepath.Join("..", "..", "config.yaml")
	c, err := Load(path, nil)
	if err != nil {
		t.Fatalf("the shipped config.yaml does not load: %v", err)
	}
	if c.Admin.Token != "" || c.Store.DSN != "data/hookstamp.db" || c.Screen.Driver != ScreenMemory || c.Admin.Listen != "127.0.0.1:9090" {
		t.Errorf("unexpected shipped defaults: %+v", c)
	}
	want := []KeySource{{SourceHeader, "X-Event-Id"}, {SourceJSON, "id"}}
	if len(c.Routes) != 1 || c.Routes[0].Name != "demo" || c.Routes[0].Path != "/webhooks/demo" ||
		c.Routes[0].Upstream.URL != "http://127.0.0.1:9000/demo" || !reflect.DeepEqual(c.Routes[0].Key.Sources, want) || !c.Routes[0].Key.Required {
		t.Errorf("unexpected demo route: %+v", c.Routes)
	}
	c, err = Load(path, []string{"HOOKSTAMP_ADMIN_TOKEN=tok"})
	if err != nil || c.Admin.Token != "tok" {
		t.Errorf("HOOKSTAMP_ADMIN_TOKEN does not reach admin.token through ${...}: %v, %+v", err, c)
	}
	// Read from a secret file, a token often ends in a newline; kept, it
	// could never be presented (the admin API trims the bearer token).
	c, err = Load(path, []string{"HOOKSTAMP_ADMIN_TOKEN=tok\n"})
	if err != nil || c.Admin.Token != "tok" {
		t.Errorf("admin.token from %q: %q, %v; want %q", "tok\n", c.Admin.Token, err, "tok")
	}
}

// The Redis password and the DSN are read from secret files too, whose
// last line ends in a newline: kept, AUTH would fail once serve connects,
// and the DSN would not parse (or name another SQLite file).
func TestRedisPasswordAndDSNAreTrimmed(t *testing.T) {
	c := mustLoad(t, minimal+`screen: {redis: {password: "${REDIS_PASSWORD}"}}
store: {driver: postgres, dsn: "${DB_DSN}"}
`, "REDIS_PASSWORD=r3dis\n", "DB_DSN=postgres://app:pw@db:5432/hooks\n")
	if c.Screen.Redis.Password != "r3dis" || c.Store.DSN != "postgres://app:pw@db:5432/hooks" {
		t.Errorf("screen.redis.password %q, store.dsn %q; want them without the newline", c.Screen.Redis.Password, c.Store.DSN)
	}
	c = mustLoad(t, minimal, "HOOKSTAMP_SCREEN__REDIS__PASSWORD=r3dis\r\n", "HOOKSTAMP_STORE__DSN=data/hooks.db\n")
	if c.Screen.Redis.Password != "r3dis" || c.Store.DSN != "data/hooks.db" {
		t.Errorf("from the environment: screen.redis.password %q, store.dsn %q; want them without the newline", c.Screen.Redis.Password, c.Store.DSN)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "absent.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an os.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad, nil); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("YAML syntax error should name the file, got %v", err)
	}
	dup := filepath.Join(dir, "dup.yaml")
	if err := os.WriteFile(dup, []byte(minimal+"server: {}\nserver: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dup, nil); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("duplicate key should be an error, got %v", err)
	}
	// A second document would be ignored whole, with its mistakes.
	two := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(two, []byte(minimal+"---\nstore: {driver: postgress}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(two, nil); err == nil || !strings.Contains(err.Error(), "a second YAML document") {
		t.Errorf("a second document should be an error, got %v", err)
	}
	for name, doc := range map[string]string{"empty": "", "comments only": "# nothing yet\n", "one document marked": "---\n" + minimal} {
		f := filepath.Join(dir, "ok.yaml")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(f, nil); err != nil && strings.Contains(err.Error(), "YAML") {
			t.Errorf("%s file: %v", name, err)
		}
	}
}

func TestNullCountsAsUnset(t *testing.T) {
	c := mustLoad(t, minimal+"screen:\n  lease:\n")
	if c.Screen.Lease != 30*time.Second {
		t.Errorf("lease: with no value = %s, want the default 30s", c.Screen.Lease)
	}
}

// Request paths are matched by the ingress router
// (internal/ingress/route_test.go).
func TestRouteHelpers(t *testing.T) {
	r := Route{Methods: []string{"POST"}, Source: "ip"}
	if !r.HasMethod("POST") || r.HasMethod("GET") || r.SourceHeader() != "" {
		t.Errorf("HasMethod/SourceHeader wrong for %+v", r)
	}
}

// Every field carries the same name for koanf (loading) and yaml (printing).
func TestTagsAgree(t *testing.T) {
	var walk func(t reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(typ reflect.Type) {
		if seen[typ] || typ == keySourceType {
			return
		}
		seen[typ] = true
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			y, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if k := koanfName(f); k == "" || k != y {
				t.Errorf("%s.%s: koanf %q, yaml %q", typ.Name(), f.Name, k, y)
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft)
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
}

// testPublicKey is a fresh RSA public key as bare base64 DER (the form the
// Alipay console shows), which fits on one YAML line.
func testPublicKey(tb testing.TB) string {
	tb.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	body := strings.TrimSuffix(strings.TrimPrefix(pemText, "-----BEGIN PUBLIC KEY-----\n"), "-----END PUBLIC KEY-----\n")
	return strings.ReplaceAll(body, "\n", "")
}

// Public keys as Discord's portal (hex Ed25519) and SendGrid's settings
// (base64 DER P-256, sendgrid-go's test key) show them.
const (
	testDiscordKey  = "7d1f0c3b9b2e4a5d6c8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
	testSendGridKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="
)

// presetVerify is the verify block a route with this scheme needs: the
// options of its kind only (the verifier refuses the others).
func presetVerify(p Preset, publicKey string) string {
	secret := presetSecret(p.Scheme)
	if p.Verify.SecretEncoding == "hex" {
		secret = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
	}
	switch {
	case p.Scheme == "":
		return ""
	case p.Scheme == SchemeAlipay || p.Scheme == SchemeWeChatPay:
		return "    verify: {public_key: '" + publicKey + "'}\n"
	case p.Scheme == SchemeDiscord:
		return "    verify: {public_key: '" + testDiscordKey + "'}\n"
	case p.Scheme == SchemeSendGrid:
		return "    verify: {public_key: '" + testSendGridKey + "'}\n"
	case p.Verify.Challenge == ChallengeMeta:
		return "    verify: {challenge_token: verify-me, secrets: ['" + secret + "']}\n"
	case p.Scheme == SchemeSquare || strings.Contains(p.Verify.Template, "{url}"):
		return "    verify: {url: 'https://example.com/hook', secrets: ['" + secret + "']}\n"
	}
	return "    verify: {secrets: ['" + secret + "']}\n"
}

// SPEC §9 "secrets redacted", §7 "secrets never"; README: errors about a
// secret's value name its kind, never its text. A secret that holds "${"
// in the file (a password pasted as is) is reported by the interpolation
// pass, which must not quote the text after "${": it is the secret.
func TestInterpolationErrorsNeverQuoteSecrets(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"admin token", minimal + "admin: {token: 'Ab${TOPSECRET'}\n"},
		{"redis password", minimal + "screen: {redis: {password: 'p${TOPSECRET:x}'}}\n"},
		{"postgres dsn password", minimal + "store: {driver: postgres, dsn: 'postgres://app:p${TOPSECRET@db:5432/hooks'}\n"},
		{"verify secret", strings.Replace(minimal, "sources: [{header: X-Event-Id}]",
			"sources: [{header: X-Event-Id}]\n    verify: {scheme: github, secrets: ['gh${TOPSECRET']}", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := mustFail(t, tt.doc).Error()
			if strings.Contains(msg, "TOPSECRET") {
				t.Errorf("the configuration error quotes (part of) the secret:\n%s", msg)
			}
		})
	}
}

// SPEC §3 Presets: "A preset fills key, fingerprint and
// verify.scheme with the provider's conventions; anything the route sets
// explicitly wins." A route on the alipay preset that narrows only
// fingerprint.fields sets no fingerprint.mode: the preset's mode (fields)
// must fill it (dropping the preset's whole fingerprint let the default
// mode "body" meet the route's fields, and the file was refused).
func TestPresetFillsFingerprintModeUnderRouteFields(t *testing.T) {
	doc := `
routes:
  - name: p
    path: /p
    upstream: {url: "http://127.0.0.1:9000/p"}
    preset: alipay
    verify: {public_key: '` + testPublicKey(t) + `'}
    fingerprint: {fields: ["form:out_trade_no", "form:total_amount"]}
`
	c, err := LoadFromBytes([]byte(doc), nil)
	if err != nil {
		t.Fatalf("alipay preset with explicit fingerprint.fields refused: %v", err)
	}
	want := Fingerprint{Mode: FingerprintFields, Fields: []string{"form:out_trade_no", "form:total_amount"}, OnMismatch: OnMismatchReject}
	if got := c.Routes[0].Fingerprint; !reflect.DeepEqual(got, want) {
		t.Fatalf("fingerprint = %#v, want %#v", got, want)
	}
}

// SPEC §3: "Durations are Go durations", and Go reads "0" as a duration
// (so HOOKSTAMP_…=0 works). YAML reads an unquoted 0 as a number: a route
// that answers repeats with 409 at once may write `wait_timeout: 0`, and
// was refused with "bad duration 0".
func TestZeroDurationWrittenAsNumber(t *testing.T) {
	doc := `
routes:
  - name: r
    path: /r
    upstream: {url: "http://127.0.0.1:9000/r"}
    key: {sources: [{header: X-Event-Id}]}
    inflight: reject
    wait_timeout: 0
`
	c, err := LoadFromBytes([]byte(doc), nil)
	if err != nil {
		t.Fatalf("wait_timeout: 0 with inflight reject refused: %v", err)
	}
	if got := c.Routes[0].WaitTimeout; got != 0 {
		t.Fatalf("wait_timeout = %s, want 0", got)
	}
	// A number other than 0 still has no unit and stays an error.
	_, err = LoadFromBytes([]byte(strings.Replace(doc, "wait_timeout: 0", "wait_timeout: 10", 1)), nil)
	if err == nil || !strings.Contains(err.Error(), "routes[0].wait_timeout: bad duration 10") {
		t.Fatalf("wait_timeout: 10 = %v, want a bad duration error", err)
	}
}

// Route paths are matched decoded: an escape that does not decode, or one
// that decodes to what a path may not hold, is refused at start-up; two
// spellings of one path are one path.
func TestRoutePathEscapes(t *testing.T) {
	for path, want := range map[string]string{
		"/hooks/a%zz":   "malformed percent-escape",
		"/hooks/a%2":    "malformed percent-escape",
		"/hooks/%2e%2e": `".." segment`,
		"/hooks%2F%2Fa": "empty segment",
		"/hooks/a%00":   "control character",
	} {
		err := checkRoutePath(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkRoutePath(%q) = %v, want an error with %q", path, err, want)
		}
	}
	if err := checkRoutePath("/hooks/order%20paid"); err != nil {
		t.Errorf("checkRoutePath(/hooks/order%%20paid) = %v, want nil", err)
	}
	a := Route{Path: "/caf%C3%A9/*", Methods: []string{"POST"}}
	b := Route{Path: "/café/*", Methods: []string{"POST"}}
	if overlap(a, b) != "POST" {
		t.Errorf("overlap(%q, %q) found nothing: both route POST to one path", a.Path, b.Path)
	}
	if e := (Route{Path: "/hooks/"}); overlap(e, Route{Path: "/hooks/*", Methods: []string{"POST"}}) != "" {
		t.Error("an exact route and a prefix route overlap")
	}
}

// A number written with YAML's digit separators, in hex or in octal is
// still the number YAML reads (SPEC §3: sizes accept plain bytes), though
// parseYAML keeps its text for string fields: `body_limit: 1_048_576` was
// refused with "bad size".
func TestNumberSpellingsOfYAML(t *testing.T) {
	c := mustLoad(t, `
server: {body_limit: 1_048_576}
store: {max_open_conns: 0x10}
screen: {redis: {db: 0o7}}
telemetry: {traces: {sample_ratio: 0.000_5}}
`+minimal)
	if c.Server.BodyLimit != MiB || c.Store.MaxOpenConns != 16 || c.Screen.Redis.DB != 7 || c.Telemetry.Traces.SampleRatio != 0.0005 {
		t.Fatalf("body_limit %d, max_open_conns %d, db %d, sample_ratio %v; want 1MiB, 16, 7, 0.0005",
			c.Server.BodyLimit, c.Store.MaxOpenConns, c.Screen.Redis.DB, c.Telemetry.Traces.SampleRatio)
	}
	// A text field still gets the text as written.
	c = mustLoad(t, "admin: {token: 0x10}\n"+minimal)
	if c.Admin.Token != "0x10" {
		t.Fatalf("admin.token = %q, want 0x10", c.Admin.Token)
	}
}
