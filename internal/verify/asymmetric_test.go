package verify_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

var (
	asymOnce sync.Once
	edKeys   map[string]ed25519.PrivateKey
	ecKeys   map[string]*ecdsa.PrivateKey
	asymErr  error
)

// edKey and ecKey return the key pair called name ("old", "new", "wrong"),
// generated once per test binary.
func edKey(tb testing.TB, name string) ed25519.PrivateKey {
	tb.Helper()
	genAsymKeys(tb)
	return edKeys[name]
}

func ecKey(tb testing.TB, name string) *ecdsa.PrivateKey {
	tb.Helper()
	genAsymKeys(tb)
	return ecKeys[name]
}

func genAsymKeys(tb testing.TB) {
	tb.Helper()
	asymOnce.Do(func() {
		edKeys, ecKeys = map[string]ed25519.PrivateKey{}, map[string]*ecdsa.PrivateKey{}
		for _, n := range []string{"old", "new", "wrong"} {
			if _, edKeys[n], asymErr = ed25519.GenerateKey(rand.Reader); asymErr != nil {
				return
			}
			if ecKeys[n], asymErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); asymErr != nil {
				return
			}
		}
	})
	if asymErr != nil {
		tb.Fatal(asymErr)
	}
}

func edPublic(tb testing.TB, name string) ed25519.PublicKey {
	return edKey(tb, name).Public().(ed25519.PublicKey)
}

// discordKeys is the public_key value for names: Discord's hex, space-separated.
func discordKeys(tb testing.TB, names ...string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = verifytest.DiscordPublicKey(edPublic(tb, n))
	}
	return strings.Join(out, " ")
}

// ecdsaKeys is the public_key value for names: SendGrid's bare base64 DER for
// one key, PEM blocks for several.
func ecdsaKeys(tb testing.TB, names ...string) string {
	tb.Helper()
	if len(names) == 1 {
		return must(verifytest.PublicKeyBase64(&ecKey(tb, names[0]).PublicKey))(tb)
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(must(verifytest.PublicKeyPEM(&ecKey(tb, n).PublicKey))(tb))
	}
	return b.String()
}

func publicKeyOptions(scheme string, keys func(testing.TB, ...string) string) func(testing.TB, ...string) verify.Options {
	return func(tb testing.TB, names ...string) verify.Options {
		return verify.Options{Scheme: scheme, PublicKey: keys(tb, names...), Tolerance: tolerance, Now: clock}
	}
}

var asymmetricSchemes = []scheme{
	{
		name:        verify.SchemeDiscord,
		options:     publicKeyOptions(verify.SchemeDiscord, discordKeys),
		sign:        signer(verify.SchemeDiscord),
		sig:         headerField("X-Signature-Ed25519"),
		stamp:       stampHeader("X-Signature-Timestamp", unix),
		stampHeader: "X-Signature-Timestamp",
	},
	{
		name:        verify.SchemeSendGrid,
		options:     publicKeyOptions(verify.SchemeSendGrid, ecdsaKeys),
		sign:        signer(verify.SchemeSendGrid),
		sig:         headerField("X-Twilio-Email-Event-Webhook-Signature"),
		stamp:       stampHeader("X-Twilio-Email-Event-Webhook-Timestamp", unix),
		stampHeader: "X-Twilio-Email-Event-Webhook-Timestamp",
	},
	{
		name: verify.SchemeEd25519,
		options: func(tb testing.TB, names ...string) verify.Options {
			keys := make([]string, len(names))
			for i, n := range names {
				keys[i] = verifytest.StandardPublicKey(edPublic(tb, n))
			}
			return verify.Options{Scheme: verify.SchemeEd25519, PublicKey: strings.Join(keys, ","),
				Header: "X-Ed-Signature", Encoding: "base64", Prefix: "ed25519="}
		},
		sign: signer(verify.SchemeEd25519),
		sig:  headerField("X-Ed-Signature"),
	},
	{
		name: verify.SchemeECDSA,
		options: func(tb testing.TB, names ...string) verify.Options {
			return verify.Options{Scheme: verify.SchemeECDSA, PublicKey: ecdsaKeys(tb, names...), Header: "X-EC-Signature"}
		},
		sign: signer(verify.SchemeECDSA),
		sig:  headerField("X-EC-Signature"),
	},
}

// signAsymmetric signs b at t with the key called key, as the provider of
// scheme does; FuzzVerify signs fuzzed bodies with it.
func signAsymmetric(tb testing.TB, scheme string, b []byte, t time.Time) verify.MapRequest {
	return signAs(tb, scheme, "old", b, t)
}

func signAs(tb testing.TB, scheme, key string, b []byte, t time.Time) verify.MapRequest {
	tb.Helper()
	h := http.Header{}
	switch scheme {
	case verify.SchemeDiscord:
		h = verifytest.Discord(edKey(tb, key), b, t)
	case verify.SchemeSendGrid:
		h = must(verifytest.SendGrid(ecKey(tb, key), b, t))(tb)
	case verify.SchemeEd25519:
		h.Set("X-Ed-Signature", "ed25519="+base64.StdEncoding.EncodeToString(ed25519.Sign(edKey(tb, key), b)))
	case verify.SchemeECDSA:
		h.Set("X-EC-Signature", hex.EncodeToString(must(verifytest.ECDSARaw(ecKey(tb, key), b))(tb)))
	default:
		tb.Fatalf("signAs: no signer for scheme %s", scheme)
	}
	return req(h, b)
}

// signer is a scheme table's sign for an asymmetric scheme.
func signer(scheme string) func(testing.TB, string, time.Time) verify.MapRequest {
	return func(tb testing.TB, key string, t time.Time) verify.MapRequest {
		return signAs(tb, scheme, key, body, t)
	}
}

// Standard Webhooks' asymmetric signatures: v1a entries verify under
// whpk_ public keys, beside or instead of v1 secrets.
func TestStandardWebhooksV1a(t *testing.T) {
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	whpk := func(names ...string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = verifytest.StandardPublicKey(edPublic(t, n))
		}
		return strings.Join(out, " ")
	}
	v1a := func(key string, at time.Time) http.Header {
		return verifytest.StandardWebhooksV1a(edKey(t, key), id, body, at)
	}
	v1 := func(key string) http.Header { return must(verifytest.StandardWebhooks(whsec(key), id, body, now))(t) }
	both := func(hmacKey, edName string) http.Header {
		h := v1(hmacKey)
		h.Set("webhook-signature", h.Get("webhook-signature")+" "+v1a(edName, now).Get("webhook-signature"))
		return h
	}
	opts := func(secrets []string, public string) verify.Options {
		return verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: secrets, PublicKey: public, Now: clock}
	}
	tests := []struct {
		name   string
		o      verify.Options
		header http.Header
		body   []byte
		reason string // "" means accepted
	}{
		{"v1a under its key", opts(nil, whpk("old")), v1a("old", now), body, ""},
		{"v1a during rotation", opts(nil, whpk("new", "old")), v1a("old", now), body, ""},
		{"v1a under another key", opts(nil, whpk("new")), v1a("old", now), body, "no signature matched"},
		{"v1a over a modified body", opts(nil, whpk("old")), v1a("old", now), []byte(`{"id":"evt_1","amount":9000}`), "no signature matched"},
		{"v1a stale", opts(nil, whpk("old")), v1a("old", now.Add(-6*time.Minute)), body, "timestamp outside tolerance"},
		{"v1 only, public key only", opts(nil, whpk("old")), v1("old"), body, "no signature matched"},
		{"v1a only, secret only", opts([]string{whsec("old")}, ""), v1a("old", now), body, "no signature matched"},
		{"v1 right, v1a wrong, both configured", opts([]string{whsec("old")}, whpk("old")), both("old", "wrong"), body, ""},
		{"v1 wrong, v1a right, both configured", opts([]string{whsec("old")}, whpk("old")), both("wrong", "old"), body, ""},
		{"both wrong", opts([]string{whsec("old")}, whpk("old")), both("wrong", "wrong"), body, "no signature matched"},
		{"v1a of the wrong length", opts(nil, whpk("old")), headers(v1a("old", now), "webhook-signature", "v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 63))), body, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newVerifier(t, tt.o).Verify(req(tt.header, tt.body))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Verify = %v", err)
				}
				return
			}
			wantUnverified(t, err, tt.reason)
		})
	}
}

// headers returns a copy of h with name set to value.
func headers(h http.Header, name, value string) http.Header {
	h = h.Clone()
	h.Set(name, value)
	return h
}

// Svix-based senders use svix-* header names. Whichever family a request
// carries is verified; when it carries both, both must verify, because a
// route keys on one of the two ids.
func TestStandardWebhooksHeaderFamilies(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{whsec("old")}, Now: clock})
	svix := must(verifytest.Svix(whsec("old"), "msg_svix", body, now))(t)
	std := must(verifytest.StandardWebhooks(whsec("old"), "msg_svix", body, now))(t)
	if err := v.Verify(req(svix, body)); err != nil {
		t.Fatalf("svix-* headers: %v", err)
	}
	merged := func(a, b http.Header) http.Header {
		out := a.Clone()
		for k, vs := range b {
			out[k] = vs
		}
		return out
	}
	if err := v.Verify(req(merged(svix, std), body)); err != nil {
		t.Fatalf("both families, both genuine: %v", err)
	}
	// A genuine webhook-* family beside a svix-id naming another message:
	// a route keyed on svix-id must not take that id on the strength of
	// the other family's signature.
	forged := merged(std, http.Header{"svix-id": {"msg_someone_else"}, "svix-timestamp": {unix(now)}, "svix-signature": {std.Get("webhook-signature")}})
	wantUnverified(t, v.Verify(req(forged, body)), "no signature matched")
	lone := merged(std, http.Header{"svix-id": {"msg_someone_else"}})
	wantUnverified(t, v.Verify(req(lone, body)), "missing svix-timestamp")
	wantUnverified(t, v.Verify(req(http.Header{}, body)), "missing webhook-id")
}

// ECDSA signatures arrive as DER (SendGrid) or as raw r‖s; both verify,
// whatever the encoding of the header.
func TestECDSASignatureForms(t *testing.T) {
	msg := body
	der := must(verifytest.ECDSADER(ecKey(t, "old"), msg))(t)
	raw := must(verifytest.ECDSARaw(ecKey(t, "old"), msg))(t)
	for _, tt := range []struct {
		name, encoding, value string
	}{
		{"DER base64", "base64", base64.StdEncoding.EncodeToString(der)},
		{"DER hex", "hex", hex.EncodeToString(der)},
		{"raw base64", "base64", base64.StdEncoding.EncodeToString(raw)},
		{"raw hex", "hex", hex.EncodeToString(raw)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(t, verify.Options{Scheme: verify.SchemeECDSA, PublicKey: ecdsaKeys(t, "old"), Header: "X-Sig", Encoding: tt.encoding})
			if err := v.Verify(req(http.Header{"X-Sig": {tt.value}}, msg)); err != nil {
				t.Fatalf("Verify = %v", err)
			}
			wantUnverified(t, v.Verify(req(http.Header{"X-Sig": {tt.value}}, append([]byte("x"), msg...))), "no signature matched")
		})
	}
}

// Every form a provider hands its Ed25519 key out in is accepted.
func TestEd25519KeyForms(t *testing.T) {
	pub := edPublic(t, "old")
	der := must(x509.MarshalPKIXPublicKey(pub))(t)
	sign := func() http.Header {
		return http.Header{"X-Sig": {hex.EncodeToString(ed25519.Sign(edKey(t, "old"), body))}}
	}
	for _, tt := range []struct{ name, key string }{
		{"hex (Discord)", hex.EncodeToString(pub)},
		{"upper-case hex", strings.ToUpper(hex.EncodeToString(pub))},
		{"whpk_ (Standard Webhooks)", verifytest.StandardPublicKey(pub)},
		{"base64", base64.StdEncoding.EncodeToString(pub)},
		{"base64 DER", base64.StdEncoding.EncodeToString(der)},
		{"PEM", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
		{"among others, comma-separated", discordKeys(t, "new") + ", " + hex.EncodeToString(pub)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(t, verify.Options{Scheme: verify.SchemeEd25519, PublicKey: tt.key, Header: "X-Sig"})
			if err := v.Verify(req(sign(), body)); err != nil {
				t.Fatalf("Verify = %v", err)
			}
		})
	}
}

func TestNewRejectsBadPublicKeys(t *testing.T) {
	rsaPEM := must(verifytest.PublicKeyPEM(&rsaKey(t, "old").PublicKey))(t)
	p384 := must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))(t)
	p384PEM := must(verifytest.PublicKeyPEM(&p384.PublicKey))(t)
	edPEM := must(verifytest.PublicKeyPEM(edPublic(t, "old")))(t)
	ecPEM := must(verifytest.PublicKeyPEM(&ecKey(t, "old").PublicKey))(t)
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(edKey(t, "old")))(t)}))
	tests := []struct {
		name string
		o    verify.Options
		want string
	}{
		{"discord without key", verify.Options{Scheme: verify.SchemeDiscord}, "public_key: required"},
		{"discord short hex", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: strings.Repeat("ab", 31)}, "public_key: key 1: neither hex"},
		{"31 bytes of base64", verify.Options{Scheme: verify.SchemeEd25519, PublicKey: base64.StdEncoding.EncodeToString(make([]byte, 31))}, "public_key: key 1: 31 bytes: neither a raw Ed25519 key"},
		{"discord garbage", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: "not-a-key!"}, "public_key: key 1: neither hex"},
		{"discord second key bad", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: strings.Repeat("ab", 32) + " zz"}, "public_key: key 2:"},
		{"discord RSA PEM", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: rsaPEM}, "an RSA key is not an Ed25519 key"},
		{"discord ECDSA PEM", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: ecPEM}, "an ECDSA key is not an Ed25519 key"},
		{"discord private key", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: privPEM}, "is a private key"},
		{"whpk_ of 31 bytes", verify.Options{Scheme: verify.SchemeStandardWebhooks, PublicKey: "whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))}, "public_key: key 1: whpk_ key of 31 bytes"},
		{"standard-webhooks with neither", verify.Options{Scheme: verify.SchemeStandardWebhooks}, "needs secrets (whsec_…), public_key (whpk_…) or both"},
		{"sendgrid without key", verify.Options{Scheme: verify.SchemeSendGrid}, "public_key: required"},
		{"sendgrid P-384", verify.Options{Scheme: verify.SchemeSendGrid, PublicKey: p384PEM}, "ECDSA key on P-384 (want P-256)"},
		{"sendgrid Ed25519", verify.Options{Scheme: verify.SchemeSendGrid, PublicKey: edPEM}, "an Ed25519 key is not an ECDSA key"},
		{"sendgrid garbage", verify.Options{Scheme: verify.SchemeSendGrid, PublicKey: "MFkw!!"}, "public_key: neither PEM nor base64 DER"},
		{"sendgrid secrets", verify.Options{Scheme: verify.SchemeSendGrid, Secrets: []string{"x"}, PublicKey: ecPEM}, "secrets: not used"},
		{"ecdsa bad header", verify.Options{Scheme: verify.SchemeECDSA, PublicKey: ecPEM, Header: "X Sig"}, `header: "X Sig" is not a valid header name`},
		{"ed25519 bad encoding", verify.Options{Scheme: verify.SchemeEd25519, PublicKey: edPEM, Encoding: "base32"}, `encoding: "base32" is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify.New(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// The configured public-key schemes take the same template, timestamp and
// body-signature options as scheme hmac.
func TestPublicKeySchemesTakeATemplate(t *testing.T) {
	const tmpl = "{header:X-Ts}.{json:id}.{body}"
	content := func(ts string, b []byte) []byte { return append([]byte(ts+".evt_1."), b...) }
	ecOpts := verify.Options{Scheme: verify.SchemeECDSA, PublicKey: ecdsaKeys(t, "old"), Header: "X-Sig", Encoding: "base64",
		Template: tmpl, Timestamp: verify.TimestampSource{Header: "X-Ts"}, Now: clock}
	ecSigned := func(at time.Time, b []byte) http.Header {
		ts := unix(at)
		sig := must(verifytest.ECDSADER(ecKey(t, "old"), content(ts, b)))(t)
		return http.Header{"X-Ts": {ts}, "X-Sig": {base64.StdEncoding.EncodeToString(sig)}}
	}
	v := newVerifier(t, ecOpts)
	if err := v.Verify(req(ecSigned(now, body), body)); err != nil {
		t.Fatalf("ecdsa over a template: %v", err)
	}
	wantUnverified(t, v.Verify(req(ecSigned(now.Add(-6*time.Minute), body), body)), "timestamp outside tolerance")
	tampered := ecSigned(now, body)
	tampered.Set("X-Ts", unix(now.Add(time.Second)))
	wantUnverified(t, v.Verify(req(tampered, body)), "no signature matched")

	// Ed25519 with the signature inside the body: the template signs the
	// member it names, not the body carrying the signature.
	edOpts := verify.Options{Scheme: verify.SchemeEd25519, PublicKey: discordKeys(t, "old"), JSON: "sig", Encoding: "base64", Template: "{json:event}"}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(edKey(t, "old"), []byte("invoice.paid")))
	ed := newVerifier(t, edOpts)
	if err := ed.Verify(req(http.Header{}, []byte(`{"event":"invoice.paid","sig":"`+sig+`"}`))); err != nil {
		t.Fatalf("ed25519 signature in the body: %v", err)
	}
	wantUnverified(t, ed.Verify(req(http.Header{}, []byte(`{"event":"invoice.void","sig":"`+sig+`"}`))), "no signature matched")

	for _, tt := range []struct {
		name string
		o    verify.Options
		want string
	}{
		{"{secret} in an ed25519 template", verify.Options{Scheme: verify.SchemeEd25519, PublicKey: discordKeys(t, "old"), Template: "{secret}{body}"}, "template: {secret} has no meaning"},
		{"template on discord", verify.Options{Scheme: verify.SchemeDiscord, PublicKey: discordKeys(t, "old"), Template: "{body}"}, "template: only used by schemes hmac, ed25519 and ecdsa"},
		{"separator on ecdsa", verify.Options{Scheme: verify.SchemeECDSA, PublicKey: ecdsaKeys(t, "old"), Separator: " "}, "separator: only used by scheme hmac"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := verify.New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want %q", err, tt.want)
			}
		})
	}
}

// benchmarkSigned measures Verify of r with its headers prepared in advance
// (verifytest sets them under the names the schemes ask for).
func benchmarkSigned(b *testing.B, o verify.Options, r verify.MapRequest) {
	v := newVerifier(b, o)
	p := &preparedRequest{headers: map[string][][]byte{}, body: r.Payload}
	for name, vals := range r.Headers {
		p.headers[name] = [][]byte{[]byte(vals[0])}
	}
	if err := v.Verify(p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(p.body)))
	for b.Loop() {
		if err := v.Verify(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyDiscord1KiB(b *testing.B) {
	benchmarkSigned(b, verify.Options{Scheme: verify.SchemeDiscord, PublicKey: discordKeys(b, "old"), Now: clock},
		signAs(b, verify.SchemeDiscord, "old", kib, now))
}

func BenchmarkVerifySendGrid1KiB(b *testing.B) {
	benchmarkSigned(b, verify.Options{Scheme: verify.SchemeSendGrid, PublicKey: ecdsaKeys(b, "old"), Now: clock},
		signAs(b, verify.SchemeSendGrid, "old", kib, now))
}
