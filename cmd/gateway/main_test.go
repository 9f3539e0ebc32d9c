package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "hookstamp ") {
		t.Fatalf("version: %d %q", code, out)
	}
}

func TestCheckShippedConfig(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "check", "-config", "../../config.yaml")
	if code != 0 {
		t.Fatalf("check config.yaml: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "name: demo") {
		t.Fatalf("effective configuration not printed:\n%s", out)
	}
}

// Warnings go to standard error: standard output stays the effective
// configuration, which a pipeline may parse.
func TestCheckPrintsWarningsApart(t *testing.T) {
	code, out, errOut := runCLI(t, []string{"HOOKSTAMP_STORE_DRIVER=postgres"}, "check", "-config", "../../config.yaml")
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, errOut)
	}
	if want := "gateway check: warning: HOOKSTAMP_STORE_DRIVER sets nothing: one level down is a double underscore, HOOKSTAMP_STORE__DRIVER\n"; errOut != want {
		t.Errorf("standard error %q, want %q", errOut, want)
	}
	if strings.Contains(out, "warning") || !strings.Contains(out, "driver: sqlite") {
		t.Errorf("standard output:\n%s", out)
	}
}

func TestCheckRedactsSecretsAndListsEveryError(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, `
admin: {token: "${ADMIN_TOKEN}"}
store: {driver: postgres, dsn: "postgres://app:hunter2@db:5432/hooks"}
routes:
  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    upstream: {url: "http://127.0.0.1:9000/stripe"}
    verify: {secrets: ["${STRIPE_SECRET}"]}
`)
	env := []string{"ADMIN_TOKEN=t0ps3cret-admin", "STRIPE_SECRET=whsec_s3cr3t"}
	code, out, errOut := runCLI(t, env, "check", "-config", good)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, secret := range []string{"t0ps3cret-admin", "whsec_s3cr3t", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Fatalf("check printed secret %q:\n%s", secret, out)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, `
server: {body_limit: lots}
routes:
  - name: Bad Name
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{jsn: id}]}
`)
	code, _, errOut = runCLI(t, nil, "check", "-config", bad)
	if code != 1 {
		t.Fatalf("bad config: exit %d, want 1", code)
	}
	for _, path := range []string{"server.body_limit", "routes[0].name", "routes[0].key.sources[0]"} {
		if !strings.Contains(errOut, path) {
			t.Fatalf("error output lacks %s:\n%s", path, errOut)
		}
	}
}

// A token in an upstream URL, as its user name or a query parameter, is
// not printed; the parameter's name is, so the operator sees the shape.
func TestCheckRedactsUpstreamURLCredentials(t *testing.T) {
	dir := t.TempDir()
	route := func(url string) string {
		return "routes:\n  - {name: a, path: /a, preset: github, verify: {secrets: [s3cr3t]}, upstream: {url: \"" + url + "\"}}\n"
	}
	env := []string{"UP_TOKEN=TOPSECRET9"}

	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, route("https://${UP_TOKEN}@hooks.example.com/in?token=${UP_TOKEN}&api_key=K3Y9"))
	code, out, errOut := runCLI(t, env, "check", "-config", good)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, secret := range []string{"TOPSECRET9", "K3Y9"} {
		if strings.Contains(out, secret) {
			t.Errorf("check printed %q:\n%s", secret, out)
		}
	}
	if want := "url: https://[redacted]@hooks.example.com/in?token=[redacted]&api_key=[redacted]"; !strings.Contains(out, want) {
		t.Errorf("check output lacks %q:\n%s", want, out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, route("hooks.example.com/in?token=${UP_TOKEN}"))
	code, _, errOut = runCLI(t, env, "check", "-config", bad)
	if code != 1 || !strings.Contains(errOut, `"hooks.example.com/in?token=[redacted]" is not an absolute`) {
		t.Fatalf("exit %d, want 1 and the bad URL quoted redacted:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "TOPSECRET9") {
		t.Fatalf("check's error quotes the token:\n%s", errOut)
	}
}

// A configuration whose listeners cannot both bind fails check, rather
// than checking cleanly and failing at start.
func TestCheckRefusesListenersOnOnePort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.yaml")
	writeFile(t, path, `
server: {listen: ":19090"}
admin: {listen: "127.0.0.1:19090"}
routes:
  - {name: a, path: /a, preset: github, verify: {secrets: [s3cr3t]}, upstream: {url: "http://127.0.0.1:9000/a"}}
`)
	code, _, errOut := runCLI(t, nil, "check", "-config", path)
	want := `admin.listen: "127.0.0.1:19090" and server.listen ":19090" both take port 19090`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, errOut)
	}
}

// An OTLP protocol that serve would refuse at start fails check.
func TestCheckRefusesUnsupportedOTLPProtocol(t *testing.T) {
	path := filepath.Join(t.TempDir(), "otlp.yaml")
	writeFile(t, path, `
telemetry: {traces: {exporter: otlp}}
routes:
  - {name: a, path: /a, preset: github, verify: {secrets: [s3cr3t]}, upstream: {url: "http://127.0.0.1:9000/a"}}
`)
	code, _, errOut := runCLI(t, []string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, "check", "-config", path)
	want := `telemetry.traces.exporter: OTLP protocol "http/json" is not supported (want http/protobuf or grpc; from OTEL_EXPORTER_OTLP_PROTOCOL)`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, errOut)
	}
}

// A misspelt key is named even while its ${NAME} is unset.
func TestCheckNamesUnknownKeyBesideAnUnsetVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.yaml")
	writeFile(t, path, `
admin: {tokn: "${HOOKSTAMP_ADMIN_TOKEN}"}
routes:
  - {name: a, path: /a, preset: github, verify: {secrets: [s3cr3t]}, upstream: {url: "http://127.0.0.1:9000/a"}}
`)
	code, _, errOut := runCLI(t, nil, "check", "-config", path)
	for _, want := range []string{"admin.tokn: environment variable HOOKSTAMP_ADMIN_TOKEN is not set", `admin.tokn: unknown key (did you mean "token"?)`} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, want 1 and %q:\n%s", code, want, errOut)
		}
	}
}

func TestMigrateCreatesSchema(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	db := filepath.Join(dir, "sub", "ledger.db")
	writeFile(t, cfg, `
store: {dsn: "`+db+`", auto_migrate: false}
`+demoRoutes)
	if code, _, errOut := runCLI(t, nil, "migrate", "-config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("ledger file not created: %v", err)
	}
}

func TestUnknownCommand(t *testing.T) {
	if code, _, _ := runCLI(t, nil, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A command after the flags is refused rather than ignored: "gateway
// -config f.yaml check" would otherwise start serving.
func TestCommandAfterFlags(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "-config", "../../config.yaml", "check")
	if code != 2 || out != "" || !strings.Contains(errOut, `unexpected argument "check"`) {
		t.Fatalf("gateway -config … check: exit %d, stdout %q, stderr %q; want exit 2 naming the argument", code, out, errOut)
	}
}

// -h prints the usage and succeeds.
func TestHelpFlag(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"check", "-h"}} {
		if code, _, errOut := runCLI(t, nil, args...); code != 0 || !strings.Contains(errOut, "-config") {
			t.Errorf("gateway %v: exit %d, stderr %q; want 0 and the usage", args, code, errOut)
		}
	}
}

// migrate says so on stdout when it succeeds, and exits 1 naming the
// error when the ledger cannot be opened.
func TestMigrateOutputAndFailure(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "file"), "not a directory")
	for _, tc := range []struct {
		name, dsn string
		code      int
	}{
		{"ok", filepath.Join(dir, "ledger.db"), 0},
		{"unopenable", filepath.Join(dir, "file", "ledger.db"), 1},
	} {
		cfg := filepath.Join(dir, tc.name+".yaml")
		writeFile(t, cfg, `
store: {dsn: "`+tc.dsn+`", auto_migrate: false}
`+demoRoutes)
		code, out, errOut := runCLI(t, nil, "migrate", "-config", cfg)
		if code != tc.code {
			t.Fatalf("migrate %s: exit %d, want %d; stderr %q", tc.name, code, tc.code, errOut)
		}
		if tc.code == 0 && !strings.Contains(out, "up to date") {
			t.Fatalf("migrate %s: stdout %q, want the schema reported up to date", tc.name, out)
		}
		if tc.code != 0 && (out != "" || !strings.Contains(errOut, "gateway migrate:")) {
			t.Fatalf("migrate %s: stdout %q, stderr %q; want the error on stderr only", tc.name, out, errOut)
		}
	}
}

// The configuration file defaults to $HOOKSTAMP_CONFIG, and -config wins.
func TestConfigFromEnvironment(t *testing.T) {
	env := []string{"HOOKSTAMP_CONFIG=../../config.yaml"}
	if code, out, errOut := runCLI(t, env, "check"); code != 0 || !strings.Contains(out, "../../config.yaml: valid") {
		t.Fatalf("check with HOOKSTAMP_CONFIG: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if code, _, errOut := runCLI(t, env, "check", "-config", missing); code != 1 || !strings.Contains(errOut, missing) {
		t.Fatalf("-config %s beside HOOKSTAMP_CONFIG: exit %d, stderr %q; want 1 naming the file", missing, code, errOut)
	}
}

// Usage errors exit 2; "help" prints the usage on stdout and succeeds.
func TestUsageExitCodes(t *testing.T) {
	if code, _, errOut := runCLI(t, nil, "check", "-no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Fatalf("unknown flag: exit %d, stderr %q; want 2", code, errOut)
	}
	for _, arg := range []string{"help"} {
		if code, out, _ := runCLI(t, nil, arg); code != 0 || !strings.Contains(out, "gateway migrate") {
			t.Fatalf("gateway %s: exit %d, stdout %q; want 0 and the usage", arg, code, out)
		}
	}
}

// serve exits 1 when the gateway cannot start (its address is taken).
func TestServeFailureExitsNonZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg, `
server: {listen: "`+ln.Addr().String()+`"}
admin: {listen: ""}
store: {dsn: "`+filepath.Join(dir, "ledger.db")+`"}
`+demoRoutes)
	code, _, errOut := runCLI(t, nil, "serve", "-config", cfg)
	if code != 1 || !strings.Contains(errOut, "gateway stopped") {
		t.Fatalf("serve on a taken address: exit %d, stderr %q; want 1 and the error logged", code, errOut)
	}
}

// demoRoutes is the one route of the CLI tests' configurations.
const demoRoutes = `routes:
  - name: demo
    path: /d
    upstream: {url: "http://127.0.0.1:9000/d"}
    key: {sources: [{header: X-Event-Id}]}
`
