// Package verifytest signs requests the way each provider does, so that tests
// and tools (chaos, bench) can send deliveries the gateway accepts.
//
// The signers are deliberately independent of package verify: Stripe's uses
// stripe-go's own test signer, Standard Webhooks' the reference library, and
// the others are written here from PROVIDERS.md without sharing a line with
// the verifier, so that a misreading in one shows up as a test failure rather
// than being repeated in both.
//
// Each function returns the headers a provider would add (signature plus the
// timestamp, id or nonce headers the signature covers); callers add the rest.
package verifytest

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
)

// StandardWebhooks signs with the Standard Webhooks reference library: headers
// webhook-id, webhook-timestamp and webhook-signature ("v1,<base64>"). The
// secret is in its usual "whsec_<base64>" form.
func StandardWebhooks(secret, id string, body []byte, t time.Time) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("standard webhooks secret: %w", err)
	}
	sig, err := wh.Sign(id, t, body)
	if err != nil {
		return nil, fmt.Errorf("standard webhooks sign: %w", err)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(t.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}

// Stripe signs with stripe-go's GenerateTestSignedPayload: header
// Stripe-Signature "t=<unix>,v1=<hex>".
func Stripe(secret string, body []byte, t time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload:   body,
		Secret:    secret,
		Timestamp: t,
	})
	h := http.Header{}
	h.Set("Stripe-Signature", p.Header)
	return h
}

// GitHub signs like GitHub: X-Hub-Signature-256 "sha256=<hex>".
func GitHub(secret string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(sha256.New, secret, body)))
	return h
}

// Shopify signs like Shopify: X-Shopify-Hmac-Sha256 "<base64>".
func Shopify(secret string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac(sha256.New, secret, body)))
	return h
}

// Slack signs like Slack: X-Slack-Request-Timestamp and X-Slack-Signature
// "v0=<hex>" over "v0:{timestamp}:{body}".
func Slack(secret string, body []byte, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac(sha256.New, secret, []byte("v0:"+ts+":"), body)))
	return h
}

// Square signs like Square: x-square-hmacsha256-signature "<base64>" over
// the notification URL followed by the body.
func Square(key, notificationURL string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(mac(sha256.New, key, []byte(notificationURL), body)))
	return h
}

// Paddle signs like Paddle Billing: Paddle-Signature "ts=<unix>;h1=<hex>"
// over "{ts}:{body}".
func Paddle(secret string, body []byte, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := http.Header{}
	h.Set("Paddle-Signature", "ts="+ts+";h1="+hex.EncodeToString(mac(sha256.New, secret, []byte(ts+":"), body)))
	return h
}

// Razorpay signs like Razorpay: X-Razorpay-Signature "<hex>".
func Razorpay(secret string, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Razorpay-Signature", hex.EncodeToString(mac(sha256.New, secret, body)))
	return h
}

// Twitch signs like Twitch EventSub: Twitch-Eventsub-Message-Id,
// Twitch-Eventsub-Message-Timestamp (RFC 3339, nanoseconds) and
// Twitch-Eventsub-Message-Signature "sha256=<hex>" over id + timestamp + body.
func Twitch(secret, id string, body []byte, t time.Time) http.Header {
	ts := t.UTC().Format(time.RFC3339Nano)
	h := http.Header{}
	h.Set("Twitch-Eventsub-Message-Id", id)
	h.Set("Twitch-Eventsub-Message-Timestamp", ts)
	h.Set("Twitch-Eventsub-Message-Signature", "sha256="+hex.EncodeToString(mac(sha256.New, secret, []byte(id+ts), body)))
	return h
}

// HMAC signs for the generic hmac scheme: header carries prefix followed by
// the MAC of the body, algorithm sha1, sha256 or sha512, encoding hex or
// base64.
func HMAC(header, algorithm, encoding, prefix, secret string, body []byte) (http.Header, error) {
	var newHash func() hash.Hash
	switch algorithm {
	case "sha1":
		newHash = sha1.New
	case "sha256":
		newHash = sha256.New
	case "sha512":
		newHash = sha512.New
	default:
		return nil, fmt.Errorf("unknown algorithm %q", algorithm)
	}
	sum := mac(newHash, secret, body)
	var enc string
	switch encoding {
	case "hex":
		enc = hex.EncodeToString(sum)
	case "base64":
		enc = base64.StdEncoding.EncodeToString(sum)
	default:
		return nil, fmt.Errorf("unknown encoding %q", encoding)
	}
	h := http.Header{}
	h.Set(header, prefix+enc)
	return h, nil
}

// Alipay returns the form body of an Alipay asynchronous notification carrying
// params (the first value of each) plus sign_type=RSA2 and sign, the base64 SHA256withRSA signature of
// the parameters sorted by name, empty values and any sign or sign_type left
// out, joined as "k=v&…" with unencoded values.
func Alipay(key *rsa.PrivateKey, params url.Values) ([]byte, error) {
	names := make([]string, 0, len(params))
	for name := range params {
		if name == "sign" || name == "sign_type" || params.Get(name) == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	pairs := make([]string, len(names))
	for i, name := range names {
		pairs[i] = name + "=" + params.Get(name)
	}
	sig, err := signRSA(key, []byte(strings.Join(pairs, "&")))
	if err != nil {
		return nil, fmt.Errorf("alipay: %w", err)
	}
	form := url.Values{}
	for name := range params {
		form.Set(name, params.Get(name))
	}
	form.Set("sign_type", "RSA2")
	form.Set("sign", sig)
	return []byte(form.Encode()), nil
}

// WeChatPay signs like WeChat Pay v3: Wechatpay-Timestamp, Wechatpay-Nonce,
// Wechatpay-Serial and Wechatpay-Signature, the base64 SHA256withRSA
// signature of "{timestamp}\n{nonce}\n{body}\n".
func WeChatPay(key *rsa.PrivateKey, serial, nonce string, body []byte, t time.Time) (http.Header, error) {
	ts := strconv.FormatInt(t.Unix(), 10)
	msg := ts + "\n" + nonce + "\n" + string(body) + "\n"
	sig, err := signRSA(key, []byte(msg))
	if err != nil {
		return nil, fmt.Errorf("wechatpay: %w", err)
	}
	h := http.Header{}
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", nonce)
	h.Set("Wechatpay-Serial", serial)
	h.Set("Wechatpay-Signature", sig)
	return h, nil
}

// AdyenHMAC returns Adyen's notification signature
// (additionalData.hmacSignature): base64 HMAC-SHA256 of data, keyed with the
// hex-decoded keyHex. data is the colon-joined
// "pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success".
func AdyenHMAC(keyHex, data string) (string, error) {
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return "", fmt.Errorf("adyen hmac key is not hex")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

// GenerateRSAKey returns a fresh RSA-2048 key pair, the size Alipay (RSA2)
// and WeChat Pay use.
func GenerateRSAKey() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 2048)
}

// PublicKeyPEM returns pub (RSA, ECDSA or Ed25519) as a PEM "PUBLIC KEY"
// (PKIX) block.
func PublicKeyPEM(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// PublicKeyBase64 returns pub as bare base64 PKIX DER, the form Alipay's
// console hands out ("支付宝公钥") and SendGrid's its verification key.
func PublicKeyBase64(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(der), nil
}

func signRSA(key *rsa.PrivateKey, msg []byte) (string, error) {
	digest := sha256.Sum256(msg)
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

func mac(newHash func() hash.Hash, secret string, parts ...[]byte) []byte {
	m := hmac.New(newHash, []byte(secret))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}
