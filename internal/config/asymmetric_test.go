package config

import (
	"reflect"
	"strings"
	"testing"
)

// `gateway check` refuses every public-key setting `gateway serve` would:
// the verifier's own parse is part of validation.
func TestPublicKeySchemesValidate(t *testing.T) {
	route := func(extra string) string {
		return "routes:\n  - name: p\n    path: /p\n    upstream: {url: 'http://127.0.0.1:9000/p'}\n" +
			"    key: {sources: [{header: X-Event-Id}]}\n" + extra
	}
	tests := []struct {
		name, doc, path, want string
	}{
		{"discord without key", route("    verify: {scheme: discord}\n"), "routes[0].verify.public_key", "required with scheme discord"},
		{"discord key of 31 bytes", route("    verify: {scheme: discord, public_key: '" + strings.Repeat("ab", 31) + "'}\n"), "routes[0].verify.public_key", "key 1: neither hex"},
		{"discord with secrets", route("    verify: {scheme: discord, secrets: [x], public_key: '" + testDiscordKey + "'}\n"), "routes[0].verify.secrets", "not used by scheme discord"},
		{"sendgrid key that is Ed25519", route("    verify: {scheme: sendgrid, public_key: 'MCowBQYDK2VwAyEAfR8MO5suSl1sjwobLD1OX2BxgpOktcbX6PkKGyw9Tl8='}\n"), "routes[0].verify.public_key", "an Ed25519 key is not an ECDSA key"},
		{"ed25519 template signing the secret", route("    verify: {scheme: ed25519, header: X-Sig, public_key: '" + testDiscordKey + "', template: '{secret}{body}'}\n"), "routes[0].verify.template", "{secret} has no meaning"},
		{"discord with a template", route("    verify: {scheme: discord, public_key: '" + testDiscordKey + "', template: '{body}'}\n"), "routes[0].verify.template", "only used by schemes hmac, ed25519 and ecdsa"},
		{"ed25519 bad encoding", route("    verify: {scheme: ed25519, header: X-Sig, encoding: base32, public_key: '" + testDiscordKey + "'}\n"), "routes[0].verify.encoding", `unknown value "base32"`},
		{"standard-webhooks with neither", route("    verify: {scheme: standard-webhooks}\n"), "routes[0].verify.secrets", "secrets (whsec_…), public_key (whpk_…) or both"},
		{"standard-webhooks whpk_ too short", route("    verify: {scheme: standard-webhooks, public_key: 'whpk_AAAA'}\n"), "routes[0].verify.public_key", "whpk_ key of 3 bytes"},
		{"discord routes stay sync", "routes:\n  - name: p\n    path: /p\n    preset: discord\n    delivery: async\n    upstream: {url: 'http://127.0.0.1:9000/p'}\n" +
			"    verify: {public_key: '" + testDiscordKey + "'}\n", "routes[0].delivery", "async cannot be used with preset discord"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertProblem(t, mustFail(t, tt.doc), tt.path, tt.want)
		})
	}
}

func TestPublicKeySchemesLoad(t *testing.T) {
	head := "routes:\n  - name: p\n    path: /p\n    upstream: {url: 'http://127.0.0.1:9000/p'}\n"
	tests := []struct {
		name, doc string
		get       func(Route) any
		want      any
	}{
		{"standard-webhooks with a public key only", "    key: {sources: [{header: webhook-id}]}\n    verify: {scheme: standard-webhooks, public_key: 'whpk_fR8MO5suSl1sjwobLD1OX2BxgpOktcbX6PkKGyw9Tl8='}\n",
			func(r Route) any { return r.Verify.Secrets == nil }, true},
		{"ed25519 with its header", "    key: {sources: [{header: X-Event-Id}]}\n    verify: {scheme: ed25519, header: X-Sig, encoding: base64, public_key: '" + testDiscordKey + "'}\n",
			func(r Route) any { return r.Verify.Header }, "X-Sig"},
		{"ecdsa with a template and a timestamp", "    key: {sources: [{header: X-Event-Id}]}\n    verify: {scheme: ecdsa, header: X-Sig, encoding: base64, public_key: '" + testSendGridKey + "',\n" +
			"      template: '{header:X-Ts}.{body}', timestamp: {header: X-Ts}}\n",
			func(r Route) any { return r.Verify.Timestamp.Header }, "X-Ts"},
		{"clerk keys on svix-id, then webhook-id", "    preset: clerk\n    verify: {secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}\n",
			func(r Route) any { return r.Key.Sources }, []KeySource{{Kind: SourceHeader, Arg: "svix-id"}, {Kind: SourceHeader, Arg: "webhook-id"}}},
		{"sendgrid keys on the batch", "    preset: sendgrid\n    verify: {public_key: '" + testSendGridKey + "'}\n",
			func(r Route) any { return r.Key.Sources }, []KeySource{{Kind: SourceBodyHash, Arg: "sha256"}}},
		{"discord routes are sync", "    preset: discord\n    verify: {public_key: '" + testDiscordKey + "'}\n",
			func(r Route) any { return r.Delivery }, DeliverySync},
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
