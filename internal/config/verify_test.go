package config

import (
	"strings"
	"testing"
)

// The keys of schemes hmac and token are reported at their own path, and
// `gateway check` prints none of their secrets.
func TestVerifyBuildingBlockProblems(t *testing.T) {
	const route = oneRoute + "    verify: "
	for _, tc := range []struct{ name, verify, path, want string }{
		{"template without a scheme", `{template: "{body}"}`, "routes[0].verify.scheme", "template set but no scheme"},
		{"bad template", `{scheme: hmac, secrets: [s], header: X-S, template: "{nope}"}`, "routes[0].verify.template", "unknown placeholder"},
		{"url without {url}", `{scheme: hmac, secrets: [s], header: X-S, url: "https://a.example/"}`, "routes[0].verify.url", "no {url}"},
		{"{url} without url", `{scheme: hmac, secrets: [s], header: X-S, template: "{url}{body}"}`, "routes[0].verify.url", "required"},
		{"bad unit", `{scheme: hmac, secrets: [s], header: X-S, timestamp: {header: X-T, unit: us}}`, "routes[0].verify.timestamp.unit", `unknown value "us"`},
		{"bad secret encoding", `{scheme: hmac, secrets: [s], header: X-S, secret_encoding: rot13}`, "routes[0].verify.secret_encoding", "unknown value"},
		{"secret not hex", `{scheme: hmac, secrets: [zz], header: X-S, secret_encoding: hex}`, "routes[0].verify.secrets[0]", "not hex"},
		{"json not plain", `{scheme: hmac, secrets: [s], json: "a.#.b"}`, "routes[0].verify.json", "plain path"},
		{"token without header or json", `{scheme: token, secrets: [s]}`, "routes[0].verify.header", "required with scheme token"},
		{"unknown challenge", `{scheme: hmac, secrets: [s], header: X-S, challenge: discord}`, "routes[0].verify.challenge", "unknown value"},
		{"lark challenge on hmac", `{scheme: hmac, secrets: [s], header: X-S, challenge: lark}`, "routes[0].verify.challenge", "needs scheme token"},
		{"meta without its token", `{scheme: github, secrets: [s], challenge: meta}`, "routes[0].verify.challenge_token", "required"},
		{"template on stripe", `{scheme: stripe, secrets: [s], template: "{body}"}`, "routes[0].verify.template", "only used by schemes hmac, ed25519 and ecdsa"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertProblem(t, mustFail(t, route+tc.verify+"\n"), tc.path, tc.want)
		})
	}
}

// The schemes that read a signature read X-Signature unless header or
// json says otherwise (SPEC §3), and check shows it; they were refused
// without a header, though the documentation gave that default.
func TestSignatureHeaderDefault(t *testing.T) {
	const route = oneRoute + "    verify: "
	for _, tc := range []struct{ verify, want string }{
		{`{scheme: hmac, secrets: [s]}`, "X-Signature"},
		{`{scheme: ecdsa, public_key: '` + testSendGridKey + `'}`, "X-Signature"},
		{`{scheme: hmac, secrets: [s], header: X-Sig}`, "X-Sig"},
		{`{scheme: hmac, secrets: [s], json: sig}`, ""},
	} {
		c, err := LoadFromBytes([]byte(route+tc.verify+"\n"), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.verify, err)
		}
		if got := c.Routes[0].Verify.Header; got != tc.want {
			t.Errorf("%s: header %q, want %q", tc.verify, got, tc.want)
		}
	}
}

// A rotation's empty slot is counted when a bad secret is named: the
// error points at the entry the file lists, not at its place among the
// non-empty ones.
func TestBadSecretNamedByItsIndexInTheFile(t *testing.T) {
	errs := mustFail(t, minimal+`    verify: {scheme: hmac, header: X-S, secret_encoding: hex, secrets: ["${NEW_SECRET:-}", "${OLD_SECRET}"]}
`, "OLD_SECRET=not-hex")
	if got, want := errs.Error(), "routes[0].verify.secrets[1]: not hex"; got != want {
		t.Errorf("error:\n%s\nwant:\n%s", got, want)
	}
}

// Keys of scheme hmac set on a built-in scheme are each named, in one
// run: they would otherwise be ignored, the route verifying otherwise
// than its file says.
func TestHMACKeysOnABuiltInSchemeAreEachRefused(t *testing.T) {
	errs := mustFail(t, `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
    verify: {scheme: github, secrets: [s], header: X-My-Sig, algorithm: sha1, encoding: base64, prefix: "v1=", separator: ","}
`)
	for _, key := range []string{"header", "algorithm", "encoding", "prefix", "separator"} {
		assertProblem(t, errs, "routes[0].verify."+key, "only used by")
	}
}

// The reference configuration of SPEC §3 lists hmac's keys, at their
// defaults, beside scheme stripe: it loads.
func TestHMACDefaultsBesideABuiltInSchemeLoad(t *testing.T) {
	mustLoad(t, `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
    verify:
      scheme: stripe
      secrets: [whsec_abc]
      header: X-Signature
      algorithm: sha256
      encoding: hex
      prefix: ""
`)
}

// verify.challenge_token is a secret: trimmed like verify.secrets (a file
// read through ${NAME} ends in a newline) and never printed.
func TestChallengeTokenIsASecret(t *testing.T) {
	c := mustLoad(t, `
routes:
  - name: m
    path: /m
    preset: meta
    upstream: {url: "http://127.0.0.1:9000/m"}
    verify: {secrets: [app-secret-value], challenge_token: "${META_VERIFY_TOKEN}"}
`, "META_VERIFY_TOKEN=verify-token-value\n")
	out, err := c.Redacted().YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "verify-token-value") || strings.Contains(string(out), "app-secret-value") {
		t.Fatalf("the redacted configuration shows a secret:\n%s", out)
	}
	if c.Routes[0].Verify.ChallengeToken != "verify-token-value" {
		t.Fatalf("Redacted changed the configuration itself")
	}
}
