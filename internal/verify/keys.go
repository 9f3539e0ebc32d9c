package verify

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode"
)

// publicKey checks a signature over a whole message.
type publicKey interface {
	verify(msg, sig []byte) bool
}

// publicKeys are a route's keys: several mean rotation.
type publicKeys []publicKey

// verify reports whether any of sigs is a signature of msg under any key.
func (ks publicKeys) verify(msg []byte, sigs [][]byte) bool {
	for _, k := range ks {
		for _, s := range sigs {
			if k.verify(msg, s) {
				return true
			}
		}
	}
	return false
}

type ed25519Key ed25519.PublicKey

func (k ed25519Key) verify(msg, sig []byte) bool {
	return len(sig) == ed25519.SignatureSize && ed25519.Verify(ed25519.PublicKey(k), msg, sig)
}

// ecdsaKey is a P-256 key checking SHA-256 signatures, which providers
// write either as ASN.1 DER or as the raw 64 bytes r‖s.
type ecdsaKey struct{ k *ecdsa.PublicKey }

func (k ecdsaKey) verify(msg, sig []byte) bool {
	digest := sha256.Sum256(msg)
	if ecdsa.VerifyASN1(k.k, digest[:], sig) {
		return true
	}
	// A 64-byte DER signature is possible too: both readings are tried,
	// and either needs the private key to produce.
	if len(sig) != 64 {
		return false
	}
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	return ecdsa.Verify(k.k, digest[:], r, s)
}

// parsePEM decodes every PEM block of s ("PUBLIC KEY", "RSA PUBLIC KEY" or
// "CERTIFICATE"; several mean rotation) and converts each key with conv. A
// certificate's validity period is not checked: it is a container for the
// key here, as in the providers' own SDKs.
func parsePEM[T any](s string, conv func(any) (T, error)) ([]T, error) {
	var keys []T
	rest := []byte(s)
	for {
		block, r := pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, errors.New("unparseable data after the PEM blocks")
			}
			break
		}
		rest = r
		pub, err := keyFromBlock(block)
		if err == nil {
			var k T
			if k, err = conv(pub); err == nil {
				keys = append(keys, k)
				continue
			}
		}
		return nil, fmt.Errorf("PEM block %d: %w", len(keys)+1, err)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found")
	}
	return keys, nil
}

func keyFromBlock(b *pem.Block) (any, error) {
	switch b.Type {
	case "PUBLIC KEY", "RSA PUBLIC KEY":
		return parseDER(b.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		return cert.PublicKey, nil
	}
	if strings.Contains(b.Type, "PRIVATE") {
		return nil, fmt.Errorf("%q is a private key: configure the provider's public key", b.Type)
	}
	return nil, fmt.Errorf("type %q is not PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", b.Type)
}

// parseDER accepts PKIX (SubjectPublicKeyInfo) and PKCS #1 encodings.
func parseDER(der []byte) (any, error) {
	if pub, err := x509.ParsePKIXPublicKey(der); err == nil {
		return pub, nil
	}
	if pub, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return pub, nil
	}
	return nil, errors.New("not a PKIX or PKCS #1 public key")
}

// isPEM reports whether s holds PEM rather than a provider's bare format.
func isPEM(s string) bool { return strings.Contains(s, "-----BEGIN") }

// parseBareDER decodes s, base64 DER with any whitespace (consoles wrap
// it), into one key.
func parseBareDER[T any](s string, conv func(any) (T, error)) ([]T, error) {
	der, err := base64.StdEncoding.DecodeString(strings.Map(dropSpace, s))
	if err != nil {
		return nil, errors.New("neither PEM nor base64 DER")
	}
	pub, err := parseDER(der)
	if err != nil {
		return nil, err
	}
	k, err := conv(pub)
	if err != nil {
		return nil, err
	}
	return []T{k}, nil
}

func dropSpace(r rune) rune {
	if unicode.IsSpace(r) {
		return -1
	}
	return r
}

// parseRSAKeys reads RSA public keys: PEM, or bare base64 DER as Alipay's
// console shows it.
func parseRSAKeys(s string) ([]*rsa.PublicKey, error) { return parseDERKeys(s, "RSA", rsaKey) }

// parseECDSAKeys reads P-256 public keys: PEM, or bare base64 DER as
// SendGrid shows its verification key.
func parseECDSAKeys(s string) (publicKeys, error) { return parseDERKeys(s, "P-256", ecdsaP256) }

// parseDERKeys reads PEM blocks, or one bare base64 DER key, of the kind
// conv accepts (what names it in messages).
func parseDERKeys[T any](s, what string, conv func(any) (T, error)) ([]T, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, fmt.Errorf("required (PEM or base64 DER %s public key)", what)
	case isPEM(s):
		return parsePEM(s, conv)
	}
	return parseBareDER(s, conv)
}

func ecdsaP256(pub any) (publicKey, error) {
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an ECDSA key", keyKind(pub))
	}
	if k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ECDSA key on %s (want P-256)", k.Curve.Params().Name)
	}
	return ecdsaKey{k}, nil
}

// parseEd25519Keys reads Ed25519 public keys: PEM, or keys separated by
// spaces (or commas), each in one of the providers' forms: 64 hex digits
// (Discord), "whpk_" and base64 (Standard Webhooks), base64 of the 32
// bytes, or base64 DER.
func parseEd25519Keys(s string) (publicKeys, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, errors.New("required (Ed25519 public key: hex, whpk_…, base64 or PEM)")
	case isPEM(s):
		return parsePEM(s, ed25519Of)
	}
	var keys publicKeys
	for i, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		k, err := parseEd25519Token(tok)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func parseEd25519Token(tok string) (publicKey, error) {
	if len(tok) == 2*ed25519.PublicKeySize {
		if raw, err := hex.DecodeString(tok); err == nil {
			return ed25519Key(raw), nil
		}
	}
	b64, whpk := strings.CutPrefix(tok, "whpk_")
	raw, err := base64.StdEncoding.DecodeString(b64)
	switch {
	case err != nil:
		return nil, errors.New("neither hex, whpk_ + base64, base64 nor PEM")
	case len(raw) == ed25519.PublicKeySize:
		return ed25519Key(raw), nil
	case whpk:
		return nil, fmt.Errorf("whpk_ key of %d bytes (want %d)", len(raw), ed25519.PublicKeySize)
	}
	pub, err := parseDER(raw)
	if err != nil {
		return nil, fmt.Errorf("%d bytes: neither a raw Ed25519 key (%d) nor DER", len(raw), ed25519.PublicKeySize)
	}
	return ed25519Of(pub)
}

func ed25519Of(pub any) (publicKey, error) {
	k, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an Ed25519 key", keyKind(pub))
	}
	return ed25519Key(k), nil
}

// keyKind names a key's algorithm for messages.
func keyKind(pub any) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return "an RSA key"
	case *ecdsa.PublicKey:
		return "an ECDSA key"
	case ed25519.PublicKey:
		return "an Ed25519 key"
	}
	return fmt.Sprintf("a %T", pub)
}
