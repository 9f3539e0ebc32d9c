package verify_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/verify"
)

// FuzzParseStandardSignatureHeader's contract: it never panics; on success
// every v1 signature is 1 to 64 bytes and every v1a signature exactly 64,
// together at most the input's length, and formatting them back as
// "v1,<base64> … v1a,<base64> …" parses to the same lists.
func FuzzParseStandardSignatureHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, h []byte) {
		got, err := verify.ParseStandardSignatureHeader(h)
		if err != nil {
			if got.V1 != nil || got.V1a != nil {
				t.Fatalf("error %v with signatures", err)
			}
			return
		}
		total := 0
		var parts []string
		for _, s := range got.V1 {
			if len(s) < 1 || len(s) > 64 {
				t.Fatalf("v1 signature of %d bytes", len(s))
			}
			total += len(s)
			parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(s))
		}
		for _, s := range got.V1a {
			if len(s) != ed25519.SignatureSize {
				t.Fatalf("v1a signature of %d bytes", len(s))
			}
			total += len(s)
			parts = append(parts, "v1a,"+base64.StdEncoding.EncodeToString(s))
		}
		if total > len(h) {
			t.Fatalf("%d signature bytes from a %d-byte header", total, len(h))
		}
		again, err := verify.ParseStandardSignatureHeader([]byte(strings.Join(parts, " ")))
		if err != nil || !slices.EqualFunc(again.V1, got.V1, bytes.Equal) || !slices.EqualFunc(again.V1a, got.V1a, bytes.Equal) {
			t.Fatalf("reformatted header parses to %x, %v; want %x", again, err, got)
		}
	})
}

// FuzzPublicKey's contract: New never panics on any public_key of a
// public-key scheme, and a verifier it builds rejects a request whose
// signature and timestamp are the fuzzed key itself with an *Error.
func FuzzPublicKey(f *testing.F) {
	names := []string{verify.SchemeDiscord, verify.SchemeSendGrid, verify.SchemeEd25519, verify.SchemeECDSA, verify.SchemeStandardWebhooks}
	f.Fuzz(func(t *testing.T, key string) {
		for _, name := range names {
			v, err := verify.New(verify.Options{Scheme: name, PublicKey: key, Now: clock})
			if err != nil {
				continue
			}
			r := fuzzRequest{sig: []byte(key), stamp: []byte(unix(now)), body: body}
			var ve *verify.Error
			if err := v.Verify(r); err == nil || !errors.As(err, &ve) {
				t.Fatalf("%s: Verify(forged) = %v", name, err)
			}
		}
	})
}

// FuzzEd25519KeyForms' contract: whatever the key, each form a provider
// writes it in (hex, whpk_, base64, base64 DER, PEM) parses to the same key:
// it accepts the key's own signature and rejects it over another body.
func FuzzEd25519KeyForms(f *testing.F) {
	f.Fuzz(func(t *testing.T, seed []byte, msg []byte) {
		if len(seed) != ed25519.SeedSize {
			return
		}
		priv := ed25519.NewKeyFromSeed(seed)
		pub := priv.Public().(ed25519.PublicKey)
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		sig := http.Header{"X-Sig": {hex.EncodeToString(ed25519.Sign(priv, msg))}}
		for _, form := range []string{
			hex.EncodeToString(pub),
			"whpk_" + base64.StdEncoding.EncodeToString(pub),
			base64.StdEncoding.EncodeToString(pub),
			base64.StdEncoding.EncodeToString(der),
			string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		} {
			v := newVerifier(t, verify.Options{Scheme: verify.SchemeEd25519, PublicKey: form, Header: "X-Sig"})
			if err := v.Verify(req(sig, msg)); err != nil {
				t.Fatalf("key form %q rejected its own signature: %v", form, err)
			}
			if err := v.Verify(req(sig, append(slices.Clone(msg), 'x'))); err == nil {
				t.Fatalf("key form %q accepted a signature over another body", form)
			}
		}
	})
}
