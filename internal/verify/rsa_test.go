package verify_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

func TestAlipayCanonical(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"drops sign and sign_type, sorts", "b=2&a=1&sign=abc&sign_type=RSA2", "a=1&b=2"},
		{"decodes values, drops empty ones", "a=1&empty=&b=%E4%B8%AD+x", "a=1&b=中 x"},
		{"joins decoded values as they are", "a=x%26y%3Dz", "a=x&y=z"},
		{"skips empty segments", "&&a=1&", "a=1"},
		{"a name without = has an empty value", "flag&a=1", "a=1"},
		{"byte order", "a=2&Z=1&_=3", "Z=1&_=3&a=2"},
		{"keeps GBK bytes", "subject=%D6%D0%CE%C4&charset=GBK", "charset=GBK&subject=\xd6\xd0\xce\xc4"},
		{"decodes names", "out%5Ftrade%5Fno=1", "out_trade_no=1"},
		{"only sign", "sign=abc", ""},
		{"empty body", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.AlipayCanonical([]byte(tt.body))
			if err != nil {
				t.Fatalf("AlipayCanonical(%q) error %v", tt.body, err)
			}
			if string(got) != tt.want {
				t.Errorf("AlipayCanonical(%q) = %q, want %q", tt.body, got, tt.want)
			}
		})
	}
}

func TestAlipayCanonicalRejectsAmbiguousBodies(t *testing.T) {
	for _, body := range []string{"a=%zz", "a%=1", "=1", "a=1&a=2", "a=1&a=1", "sign=1&sign=2", "a=1&%61=2"} {
		t.Run(body, func(t *testing.T) {
			if got, err := verify.AlipayCanonical([]byte(body)); err == nil {
				t.Errorf("AlipayCanonical(%q) = %q, want an error", body, got)
			}
		})
	}
}

// alipayBody signs canonical (as Alipay would) and returns form plus the
// sign parameters, encoded.
func alipayBody(tb testing.TB, key *rsa.PrivateKey, form, canonical string) []byte {
	tb.Helper()
	digest := sha256.Sum256([]byte(canonical))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		tb.Fatal(err)
	}
	return []byte(form + "&sign_type=RSA2&sign=" + url.QueryEscape(base64.StdEncoding.EncodeToString(sig)))
}

func TestAlipayVerify(t *testing.T) {
	key := rsaKey(t, "old")
	const form = "notify_id=n1&out_trade_no=20260612001&passback_params=&total_amount=1000.00&trade_status=TRADE_SUCCESS"
	tests := []struct {
		name   string
		body   []byte
		reason string // "" = accepted
	}{
		{"empty values left out (Alipay docs, PHP SDK)", alipayBody(t, key, form,
			"notify_id=n1&out_trade_no=20260612001&total_amount=1000.00&trade_status=TRADE_SUCCESS"), ""},
		{"empty values kept (Java SDK rsaCheckV1)", alipayBody(t, key, form,
			"notify_id=n1&out_trade_no=20260612001&passback_params=&total_amount=1000.00&trade_status=TRADE_SUCCESS"), ""},
		{"GBK notification", must(verifytest.Alipay(key, url.Values{
			"charset": {"GBK"}, "subject": {"\xd6\xd0\xce\xc4"}, "notify_id": {"n2"},
		}))(t), ""},
		{"sign_type RSA", []byte(strings.Replace(string(must(verifytest.Alipay(key, alipayParams))(t)), "sign_type=RSA2", "sign_type=RSA", 1)),
			"unsupported sign_type"},
		{"signed canonical of other parameters", alipayBody(t, key, form, "notify_id=n1"), "no signature matched"},
		{"added parameter", append(must(verifytest.Alipay(key, alipayParams))(t), "&refund_fee=1000.00"...), "no signature matched"},
		{"sign not base64", []byte(form + "&sign=%%%"), "malformed form body"},
		{"sign with bad base64", []byte(form + "&sign=abc*"), "malformed sign parameter"},
		{"not a form", []byte(`{"sign":"abc"}`), "missing sign parameter"},
	}
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeAlipay, PublicKey: publicKeys(t, "old")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantVerdict(t, v.Verify(verify.MapRequest{Payload: tt.body}), tt.reason)
		})
	}
}

// wantVerdict fails unless err is nil (reason "") or a rejection whose
// reason contains reason.
func wantVerdict(tb testing.TB, err error, reason string) {
	tb.Helper()
	if reason == "" {
		if err != nil {
			tb.Fatalf("Verify = %v, want accepted", err)
		}
		return
	}
	wantUnverified(tb, err, reason)
}

// Alipay's sign parameter travels in the body and its notify_time changes
// between resends: there is no timestamp to check, so an old notification
// still verifies (deduplication, not verification, stops the replay).
func TestAlipayHasNoTimestampCheck(t *testing.T) {
	far := func() time.Time { return now.AddDate(1, 0, 0) }
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeAlipay, PublicKey: publicKeys(t, "old"), Now: far})
	if err := v.Verify(verify.MapRequest{Payload: must(verifytest.Alipay(rsaKey(t, "old"), alipayParams))(t)}); err != nil {
		t.Fatalf("Verify = %v", err)
	}
}

func TestPublicKeyForms(t *testing.T) {
	key := rsaKey(t, "old")
	spki := must(x509.MarshalPKIXPublicKey(&key.PublicKey))(t)
	b64 := base64.StdEncoding.EncodeToString(spki)
	certDER := must(x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "Tenpay.com Root CA"},
		NotBefore:    now.AddDate(-2, 0, 0),
		NotAfter:     now.AddDate(-1, 0, 0), // expired: the key is still what matters
	}, &x509.Certificate{SerialNumber: big.NewInt(1)}, &key.PublicKey, key))(t)
	pemOf := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	tests := []struct {
		name, publicKey string
	}{
		{"PKIX PEM", pemOf("PUBLIC KEY", spki)},
		{"PKCS #1 PEM", pemOf("RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&key.PublicKey))},
		{"certificate PEM", pemOf("CERTIFICATE", certDER)},
		{"bare base64 DER", b64},
		{"bare base64 DER wrapped at 64 columns", wrap(b64, 64)},
		{"bare base64 PKCS #1", base64.StdEncoding.EncodeToString(x509.MarshalPKCS1PublicKey(&key.PublicKey))},
		{"PEM with surrounding blank lines", "\n\n  " + pemOf("PUBLIC KEY", spki) + "\n\n"},
		{"other key first", publicKeys(t, "new", "old")},
	}
	body := []byte(`{"id":"EV-2018022511304009767"}`)
	r := verify.MapRequest{Headers: must(verifytest.WeChatPay(key, "serial", "nonce", body, now))(t), Payload: body}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(t, verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: tt.publicKey, Now: clock})
			if err := v.Verify(r); err != nil {
				t.Fatalf("Verify = %v", err)
			}
		})
	}
}

func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

func TestPublicKeyFormsRejected(t *testing.T) {
	small := must(rsa.GenerateKey(rand.Reader, 1024))(t)
	ec := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	pemOf := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	tests := []struct {
		name, publicKey, want string
	}{
		{"private key", pemOf("PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(rsaKey(t, "old")))(t)), `"PRIVATE KEY" is a private key`},
		{"RSA private key", pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey(t, "old"))), "is a private key"},
		{"1024-bit key", pemOf("PUBLIC KEY", must(x509.MarshalPKIXPublicKey(&small.PublicKey))(t)), "RSA key of 1024 bits"},
		{"EC key", pemOf("PUBLIC KEY", must(x509.MarshalPKIXPublicKey(&ec.PublicKey))(t)), "is not an RSA key"},
		{"unknown block", pemOf("CERTIFICATE REQUEST", []byte{1}), `type "CERTIFICATE REQUEST"`},
		{"broken certificate", pemOf("CERTIFICATE", []byte{1, 2, 3}), "certificate:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify.New(verify.Options{Scheme: verify.SchemeAlipay, PublicKey: tt.publicKey})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// WeChat Pay sends probe requests whose signature is deliberately invalid
// ("WECHATPAY/SIGNTEST/…") to check that merchants verify; they must fail.
func TestWeChatPayRejectsSignatureProbes(t *testing.T) {
	h := must(verifytest.WeChatPay(rsaKey(t, "old"), "serial", "nonce", body, now))(t)
	h.Set("Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+h.Get("Wechatpay-Signature"))
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: publicKeys(t, "old"), Now: clock})
	wantUnverified(t, v.Verify(verify.MapRequest{Headers: h, Payload: body}), "malformed Wechatpay-Signature header")
}

// The signed message ends with a newline after the body: a signature over
// the body without it (a common mistake) must not verify.
func TestWeChatPaySignsTrailingNewline(t *testing.T) {
	key := rsaKey(t, "old")
	digest := sha256.Sum256([]byte(unix(now) + "\nnonce\n" + string(body)))
	sig := must(rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:]))(t)
	h := http.Header{
		"Wechatpay-Timestamp": {unix(now)},
		"Wechatpay-Nonce":     {"nonce"},
		"Wechatpay-Signature": {base64.StdEncoding.EncodeToString(sig)},
	}
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: publicKeys(t, "old"), Now: clock})
	wantUnverified(t, v.Verify(verify.MapRequest{Headers: h, Payload: body}), "no signature matched")
}
