package config

import (
	"strings"
	"testing"
	"time"
)

// wantWarning fails unless exactly one of warnings mentions each of want.
func wantWarning(t *testing.T, warnings []string, want ...string) {
	t.Helper()
	if len(warnings) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%s", len(warnings), len(want), strings.Join(warnings, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(warnings[i], w) {
			t.Errorf("warning %d: %q, want it to mention %q", i, warnings[i], w)
		}
	}
}

// Settings the configuration allows but that lose or repeat events
// without a word at runtime are told by check and at start.
func TestWarnings(t *testing.T) {
	const head = `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
`
	for _, tc := range []struct {
		name, route string
		want        []string
	}{
		{"defaults", "    key: {sources: [{header: X-Event-Id}]}\n", nil},
		{"retention under the preset's", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n    retention: 12h\n",
			[]string{"routes[0].retention: 12h0m0s is shorter than preset stripe's 96h0m0s, which outlasts the provider's retries (3 days)"}},
		{"retention above the preset's", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n    retention: 200h\n", nil},
		{"a 2xx not final, sync", "    key: {sources: [{header: X-Event-Id}]}\n    record: {statuses: [200, 4xx]}\n",
			[]string{"routes[0].record.statuses: the upstream's 201, 202, 204 would not be final: a provider's retry"}},
		{"a 2xx not final, async", "    key: {sources: [{header: X-Event-Id}]}\n    record: {statuses: [200, 201, 204]}\n    delivery: async\n",
			[]string{"the upstream's 202 would not be final: an event so answered is delivered again, up to async.max_attempts"}},
		{"json fields, form key", "    key: {sources: [{form: id}]}\n    fingerprint: {mode: fields, fields: [\"json:amount\"]}\n",
			[]string{"routes[0].fingerprint.fields: every field is read from a json body, but the route's key from a form body"}},
		{"form fields, json key", "    key: {sources: [{json: id}]}\n    fingerprint: {mode: fields, fields: [\"form:amount\"]}\n",
			[]string{"every field is read from a form body, but the route's key from a json body"}},
		{"fields the body holds", "    key: {sources: [{form: id}]}\n    fingerprint: {mode: fields, fields: [\"form:amount\", \"json:amount\"]}\n", nil},
		{"a header key, json fields", "    key: {sources: [{header: X-Event-Id}]}\n    fingerprint: {mode: fields, fields: [\"json:amount\"]}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWarning(t, mustLoad(t, head+tc.route).Warnings(time.Now()), tc.want...)
		})
	}
}

// A certificate past its date, or near it, is told: clients refuse it,
// and check passed it.
func TestCertificateWarnings(t *testing.T) {
	certFile, keyFile := selfSigned(t, t.TempDir(), "a.example") // valid for an hour
	c := mustLoad(t, "server:\n  tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n"+oneRoute)
	wantWarning(t, c.Warnings(time.Now()), "server.tls.cert_file: the certificate expires at")
	wantWarning(t, c.Warnings(time.Now().Add(2*time.Hour)), "server.tls.cert_file: the certificate expired at")
	wantWarning(t, c.Warnings(time.Now().Add(-30*24*time.Hour)))
}

// An environment variable meant to set a key but naming none was ignored
// in silence: HOOKSTAMP_STORE_DRIVER=postgres left each replica on its own
// SQLite file. Where the name can mean nothing else it is refused; one
// level down by a single underscore, it is warned of, as such a name may
// serve another tool; a name the file reads (${NAME}) is neither.
func TestMisnamedOverrides(t *testing.T) {
	for _, tc := range []struct{ env, path, want string }{
		{"HOOKSTAMP_STORE__DRIVR=postgres", "store.drivr", `set by HOOKSTAMP_STORE__DRIVR: names no configuration key (did you mean "HOOKSTAMP_STORE__DRIVER"?)`},
		{"HOOKSTAMP_SCREEN__REDIS__ADDRS__0=cache:6379", "screen.redis.addrs.0", "a list is set whole, as comma-separated text in HOOKSTAMP_SCREEN__REDIS__ADDRS"},
	} {
		assertProblem(t, mustFail(t, minimal, tc.env), tc.path, tc.want)
	}
	c := mustLoad(t, minimal, "HOOKSTAMP_STORE_DRIVER=postgres", "HOOKSTAMP_SCREEN_REDIS_ADDRS=cache:6379",
		"HOOKSTAMP_CONFIG=/etc/hookstamp.yaml", "HOOKSTAMP_FOO__BAR=1", "HOOKSTAMP_TEST_PG=x")
	wantWarning(t, c.Warnings(time.Now()),
		"HOOKSTAMP_SCREEN_REDIS_ADDRS sets nothing: one level down is a double underscore, HOOKSTAMP_SCREEN__REDIS__ADDRS",
		"HOOKSTAMP_STORE_DRIVER sets nothing: one level down is a double underscore, HOOKSTAMP_STORE__DRIVER")
	if c.Store.Driver != "sqlite" {
		t.Errorf("store.driver %q", c.Store.Driver)
	}
	c = mustLoad(t, "admin: {token: \"${HOOKSTAMP_ADMIN_TOKEN}\"}\n"+minimal, "HOOKSTAMP_ADMIN_TOKEN=secret-admin-token")
	wantWarning(t, c.Warnings(time.Now()))
	c = mustLoad(t, minimal, "HOOKSTAMP_ADMIN_TOKEN=secret-admin-token")
	wantWarning(t, c.Warnings(time.Now()), "HOOKSTAMP_ADMIN_TOKEN sets nothing: one level down is a double underscore, HOOKSTAMP_ADMIN__TOKEN")
}

// An async max_age no longer than upstream.timeout made a failure that
// took the whole timeout final: the provider had its acknowledgement, and
// the event went dead after one attempt of max_attempts.
func TestMaxAgeShorterThanAnAttemptIsWarned(t *testing.T) {
	route := "routes:\n  - name: a\n    path: /a\n    upstream: {url: \"http://127.0.0.1:9000/a\", timeout: 5s}\n" +
		"    key: {sources: [{header: X-Event-Id}]}\n    delivery: async\n"
	wantWarning(t, mustLoad(t, route+"    async: {max_age: 5s}\n").Warnings(time.Now()),
		"routes[0].async.max_age: 5s is not longer than upstream.timeout (5s): an attempt that fails only at its timeout leaves the delivery dead after one of its 25 attempts")
	wantWarning(t, mustLoad(t, route+"    async: {max_age: 6s}\n").Warnings(time.Now()))
	wantWarning(t, mustLoad(t, route+"    async: {max_age: 1s, max_attempts: 1}\n").Warnings(time.Now()))
}

// A short admin.token is within reach of guesses spread over many
// addresses, each slowed down alone: check says so (and serve at start),
// and still takes it, as gateways run with such tokens.
func TestShortAdminTokenIsWarned(t *testing.T) {
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{"t0ken", []string{"admin.token: 5 bytes is short"}},
		{"fifteen-bytes-x", []string{"admin.token: 15 bytes is short"}},
		{"sixteen-bytes-xx", nil},
		{"", nil},
	} {
		t.Run(tc.token, func(t *testing.T) {
			c := mustLoad(t, "admin: {token: \""+tc.token+"\"}\n"+minimal)
			wantWarning(t, c.Warnings(time.Now()), tc.want...)
		})
	}
}
