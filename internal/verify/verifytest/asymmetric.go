package verifytest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Discord signs an interaction like Discord: X-Signature-Ed25519 is the hex
// Ed25519 signature of X-Signature-Timestamp followed by the body.
func Discord(key ed25519.PrivateKey, body []byte, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := http.Header{}
	h.Set("X-Signature-Timestamp", ts)
	h.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(key, append([]byte(ts), body...))))
	return h
}

// DiscordPublicKey returns pub as the Developer Portal shows it: hex.
func DiscordPublicKey(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// SendGrid signs an Event Webhook batch like SendGrid: the base64 ASN.1 DER
// ECDSA P-256 SHA-256 signature of the timestamp followed by the body, in
// X-Twilio-Email-Event-Webhook-Signature.
func SendGrid(key *ecdsa.PrivateKey, body []byte, t time.Time) (http.Header, error) {
	ts := strconv.FormatInt(t.Unix(), 10)
	digest := sha256.Sum256(append([]byte(ts), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return nil, fmt.Errorf("sendgrid sign: %w", err)
	}
	h := http.Header{}
	h.Set("X-Twilio-Email-Event-Webhook-Timestamp", ts)
	h.Set("X-Twilio-Email-Event-Webhook-Signature", base64.StdEncoding.EncodeToString(sig))
	return h, nil
}

// ECDSARaw is the raw r‖s (64 bytes) ECDSA P-256 SHA-256 signature of msg,
// the form some providers send instead of DER.
func ECDSARaw(key *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	digest := sha256.Sum256(msg)
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		return nil, fmt.Errorf("ecdsa sign: %w", err)
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out, nil
}

// ECDSADER is the ASN.1 DER ECDSA P-256 SHA-256 signature of msg.
func ECDSADER(key *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	digest := sha256.Sum256(msg)
	return ecdsa.SignASN1(rand.Reader, key, digest[:])
}

// StandardWebhooksV1a signs like a Standard Webhooks sender using an
// asymmetric key: webhook-signature "v1a,<base64 Ed25519>" over
// "{id}.{timestamp}.{body}".
func StandardWebhooksV1a(key ed25519.PrivateKey, id string, body []byte, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	msg := append([]byte(id+"."+ts+"."), body...)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg)))
	return h
}

// StandardPublicKey returns pub in Standard Webhooks' form: "whpk_" and
// base64.
func StandardPublicKey(pub ed25519.PublicKey) string {
	return "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// Svix signs like Svix-based senders (Clerk, Resend): the Standard Webhooks
// reference signature, under the headers svix-id, svix-timestamp and
// svix-signature.
func Svix(secret, id string, body []byte, t time.Time) (http.Header, error) {
	std, err := StandardWebhooks(secret, id, body, t)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("svix-id", std.Get("webhook-id"))
	h.Set("svix-timestamp", std.Get("webhook-timestamp"))
	h.Set("svix-signature", std.Get("webhook-signature"))
	return h, nil
}
