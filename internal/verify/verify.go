// Package verify checks webhook signatures before anything is claimed: a
// forged request must never be able to occupy an idempotency key and swallow
// the genuine delivery that follows it (SPEC §1).
//
// It knows each provider's signing scheme (PROVIDERS.md) and nothing about
// HTTP servers or configuration files: the caller adapts its request to the
// two-method Request view and builds a Verifier once per route with New.
//
// Every rejection is an error wrapping ErrUnverified whose reason is safe to
// show the client: it names the header or rule that failed and never echoes
// a secret or a signature value.
//
// Decisions shared by every scheme:
//
//   - Comparisons of MACs are constant-time (hmac.Equal); public-key
//     signatures (RSA, Ed25519, ECDSA) are checked by crypto's verifiers.
//   - Several secrets (or several public keys) mean rotation: any one
//     verifies.
//   - A signed timestamp older or further in the future than the tolerance
//     is rejected; zero tolerance means the scheme's default (5 minutes,
//     10 minutes for Twitch).
//   - A header the signature depends on (signature, timestamp, message id,
//     nonce) must appear exactly once. Providers that rotate secrets put
//     several signatures in one header (Stripe, Standard Webhooks, Paddle);
//     none of them repeats the header line, so a repeated line is either a
//     broken proxy or an attempt to make two parsers disagree, and it is
//     rejected rather than guessed at.
//   - Such headers are capped at MaxHeaderLen bytes; a longer one is rejected
//     before it is parsed.
package verify

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Request is the part of an incoming request a Verifier reads. Implementations
// need not be safe for concurrent use; Verify does not retain the slices.
type Request interface {
	// HeaderValues returns every value of the header name (matched
	// case-insensitively), one per header line, in arrival order; nil when
	// the header is absent.
	HeaderValues(name string) [][]byte
	// Body returns the raw request body.
	Body() []byte
}

// Verifier checks the signature of one request.
type Verifier interface {
	// Verify returns nil when the request carries a valid signature, or an
	// error wrapping ErrUnverified (an *Error) saying why not. It never
	// returns any other kind of error.
	Verify(r Request) error
}

// ErrUnverified is wrapped by every rejection from Verify.
var ErrUnverified = errors.New("unverified")

// Error is a rejection from Verify. Reason is short, names the header or rule
// that failed, and is safe to show the client (it never contains a secret or
// a signature value).
type Error struct {
	Reason string
}

func (e *Error) Error() string { return "unverified: " + e.Reason }

// Unwrap makes errors.Is(err, ErrUnverified) true.
func (e *Error) Unwrap() error { return ErrUnverified }

func reject(format string, args ...any) error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// MaxHeaderLen is the longest value accepted for any header a signature
// depends on. Genuine headers are far shorter (a Stripe header with ten v1
// signatures is under 1 KiB); anything longer is rejected before parsing.
const MaxHeaderLen = 4096

// Scheme names, as written in verify.scheme.
const (
	SchemeStandardWebhooks = "standard-webhooks"
	SchemeStripe           = "stripe"
	SchemeGitHub           = "github"
	SchemeShopify          = "shopify"
	SchemeSlack            = "slack"
	SchemeSquare           = "square"
	SchemePaddle           = "paddle"
	SchemeRazorpay         = "razorpay"
	SchemeTwitch           = "twitch"
	SchemeAlipay           = "alipay"
	SchemeWeChatPay        = "wechatpay"
	SchemeHMAC             = "hmac"
	SchemeToken            = "token"
	SchemeEd25519          = "ed25519"
	SchemeECDSA            = "ecdsa"
	SchemeDiscord          = "discord"
	SchemeSendGrid         = "sendgrid"
)

// schemes are the scheme names, in SPEC order: the one list of them.
var schemes = []string{
	SchemeStandardWebhooks, SchemeStripe, SchemeGitHub, SchemeShopify,
	SchemeSlack, SchemeSquare, SchemePaddle, SchemeRazorpay, SchemeTwitch,
	SchemeAlipay, SchemeWeChatPay, SchemeHMAC, SchemeToken,
	SchemeEd25519, SchemeECDSA, SchemeDiscord, SchemeSendGrid,
}

// Schemes returns every scheme name New accepts, sorted.
func Schemes() []string {
	s := slices.Clone(schemes)
	slices.Sort(s)
	return s
}

// UsesPublicKey reports whether scheme verifies only with the provider's
// public key (Options.PublicKey), never with shared secrets.
// standard-webhooks takes either (AcceptsPublicKey).
func UsesPublicKey(scheme string) bool {
	switch scheme {
	case SchemeAlipay, SchemeWeChatPay, SchemeEd25519, SchemeECDSA, SchemeDiscord, SchemeSendGrid:
		return true
	}
	return false
}

// AcceptsPublicKey reports whether Options.PublicKey may be set for scheme.
func AcceptsPublicKey(scheme string) bool {
	return UsesPublicKey(scheme) || scheme == SchemeStandardWebhooks
}

// TakesTemplate reports whether scheme is configured rather than built in:
// its signature is where Options.Header or Options.JSON says, written as
// Options.Encoding and Options.Prefix say, over the content of
// Options.Template, with the timestamp of Options.Timestamp.
func TakesTemplate(scheme string) bool {
	return scheme == SchemeHMAC || scheme == SchemeEd25519 || scheme == SchemeECDSA
}

// DefaultHeader carries the signature of schemes hmac, ed25519 and ecdsa
// when Options.Header and JSON are empty.
const DefaultHeader = "X-Signature"

// DefaultTolerance is the timestamp tolerance used when Options.Tolerance is
// zero, for every timed scheme but Twitch.
const DefaultTolerance = 5 * time.Minute

// DefaultTwitchTolerance is Twitch's own limit: "reject messages older than
// 10 minutes".
const DefaultTwitchTolerance = 10 * time.Minute

// Options configures New. Fields a scheme does not use are ignored, except
// that Secrets on an RSA scheme, PublicKey on an HMAC scheme and URL on any
// scheme but square are errors (they are always a mistake, never a default).
type Options struct {
	// Scheme is one of Schemes(). Required.
	Scheme string
	// Secrets are the shared secrets of HMAC schemes, used as given except for
	// standard-webhooks, where a "whsec_" prefix is stripped and the rest is
	// base64-decoded. Several secrets mean rotation: any one verifies.
	Secrets []string
	// PublicKey is the provider's public key; several mean rotation. PEM
	// ("PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE" blocks) for every
	// public-key scheme; otherwise each scheme's provider format:
	//   - alipay, wechatpay: RSA, or bare base64 DER as Alipay hands it out;
	//   - ecdsa, sendgrid: P-256, or bare base64 DER as SendGrid shows it;
	//   - ed25519, discord, standard-webhooks (its v1a signatures): 32-byte
	//     keys separated by spaces, each hex (Discord), "whpk_" + base64
	//     (Standard Webhooks), base64 or base64 DER.
	// standard-webhooks takes Secrets, PublicKey or both.
	PublicKey string
	// URL is the notification URL exactly as configured at the provider,
	// part of the signed message: required for square, and for hmac when
	// Template contains {url}; an error anywhere else.
	URL string
	// Tolerance bounds how far a signed timestamp may be from now, in either
	// direction. Zero means DefaultTolerance (DefaultTwitchTolerance for
	// twitch); negative is an error. Ignored by schemes without a signed
	// timestamp: github, shopify, square, razorpay, alipay (whose notify_time
	// changes between resends and is not a freshness guarantee), token, and
	// hmac without Timestamp.
	Tolerance time.Duration
	// Header names the signature header for schemes hmac, ed25519 and
	// ecdsa (default DefaultHeader) and the token header for scheme token.
	Header string
	// JSON is, instead of Header, the plain GJSON path of the signature
	// (hmac, ed25519, ecdsa) or token (token) inside the JSON body:
	// Mailgun, Adyen, Lark.
	JSON string
	// Template is the signed content for schemes hmac, ed25519 and ecdsa
	// (see ParseTemplate). Default "{body}".
	Template string
	// Timestamp is where schemes hmac, ed25519 and ecdsa find the signed
	// timestamp checked against Tolerance. Zero means the provider signs
	// none.
	Timestamp TimestampSource
	// Separator splits scheme hmac's header into several candidate
	// signatures (rotation); any one verifies. Default: one signature.
	Separator string
	// SecretEncoding is how scheme hmac's secrets are written: raw (used as
	// given, the default), hex or base64 (decoded to the key).
	SecretEncoding string
	// Single lists plain paths of JSON arrays that must hold exactly one
	// element (scheme hmac): the signature covers one element, so a body
	// with more is refused (Adyen's notificationItems).
	Single []string
	// Challenge names a handshake hookstamp answers itself (ChallengeZoom,
	// ChallengeLark, ChallengeMeta); the verifier then implements
	// Challenger.
	Challenge string
	// ChallengeToken is the verify token Meta's subscription check must
	// carry; required with ChallengeMeta, an error otherwise.
	ChallengeToken string
	// Algorithm is the hash for scheme hmac: sha1, sha256 or sha512.
	// Default sha256.
	Algorithm string
	// Encoding is how the signature of schemes hmac, ed25519 and ecdsa is
	// written: hex or base64. Default hex.
	Encoding string
	// Prefix is stripped from the header value of schemes hmac, ed25519 and
	// ecdsa before decoding, compared ASCII case-insensitively, e.g.
	// "sha256=". Default none.
	Prefix string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// SecretError is a problem with Options.Secrets[Index].
type SecretError struct {
	Index int
	Err   error
}

func (e *SecretError) Error() string { return fmt.Sprintf("secrets[%d]: %v", e.Index, e.Err) }

func (e *SecretError) Unwrap() error { return e.Err }

var errEmptySecret = errors.New("empty")

// New validates o and returns the Verifier for its scheme. Errors name the
// offending option by its configuration key (secrets, public_key, url,
// tolerance, header, algorithm, encoding, prefix) and never contain a
// secret.
func New(o Options) (Verifier, error) {
	switch {
	case o.Scheme == "":
		return nil, fmt.Errorf("scheme: required (one of %s)", strings.Join(Schemes(), ", "))
	case !slices.Contains(Schemes(), o.Scheme):
		return nil, fmt.Errorf("scheme: unknown %q (want one of %s)", o.Scheme, strings.Join(Schemes(), ", "))
	case o.Tolerance < 0:
		return nil, fmt.Errorf("tolerance: must not be negative, got %s", o.Tolerance)
	case o.URL != "" && o.Scheme != SchemeSquare && !TakesTemplate(o.Scheme):
		return nil, fmt.Errorf("url: only used by schemes %s, %s, %s and %s, not %s", SchemeSquare, SchemeHMAC, SchemeEd25519, SchemeECDSA, o.Scheme)
	}
	if err := checkOwnOptions(o); err != nil {
		return nil, err
	}
	c := clock{now: o.Now, tolerance: o.Tolerance}
	if c.now == nil {
		c.now = time.Now
	}
	if c.tolerance == 0 {
		c.tolerance = DefaultTolerance
		if o.Scheme == SchemeTwitch {
			c.tolerance = DefaultTwitchTolerance
		}
	}
	switch {
	case o.Scheme == SchemeStandardWebhooks:
		return newStandardWebhooks(o, c)
	case UsesPublicKey(o.Scheme):
		if len(o.Secrets) > 0 {
			return nil, fmt.Errorf("secrets: not used by scheme %s (it verifies with public_key)", o.Scheme)
		}
		return newPublicKey(o, c)
	case o.PublicKey != "":
		return nil, fmt.Errorf("public_key: not used by scheme %s (it verifies with secrets)", o.Scheme)
	}
	v, err := newHMAC(o, c)
	if err != nil || o.Challenge != ChallengeMeta {
		return v, err
	}
	return metaChallenge{Verifier: v, token: sha256.Sum256([]byte(o.ChallengeToken))}, nil
}

// checkOwnOptions refuses the options of schemes hmac and token on any
// other scheme: set there, they would be silently ignored.
func checkOwnOptions(o Options) error {
	if err := checkChallenge(o.Challenge, o.Scheme, o); err != nil {
		return err
	}
	if o.Scheme == SchemeHMAC {
		return nil
	}
	configured := TakesTemplate(o.Scheme)
	var errs []error // each, for `gateway check` to list them all
	for _, f := range []struct {
		key    string
		set    bool
		usedBy string
	}{
		{"template", o.Template != "" && !configured, "schemes hmac, ed25519 and ecdsa"},
		{"timestamp", o.Timestamp != (TimestampSource{}) && !configured, "schemes hmac, ed25519 and ecdsa"},
		{"json", o.JSON != "" && o.Scheme != SchemeToken && !configured, "schemes hmac, ed25519, ecdsa and token"},
		// A default value changes nothing (configuration fills some in, and
		// SPEC §3's reference lists them beside a built-in scheme).
		{"header", o.Header != "" && o.Header != DefaultHeader && o.Scheme != SchemeToken && !configured, "schemes hmac, ed25519, ecdsa and token"},
		{"prefix", o.Prefix != "" && !configured, "schemes hmac, ed25519 and ecdsa"},
		{"encoding", o.Encoding != "" && o.Encoding != "hex" && !configured, "schemes hmac, ed25519 and ecdsa"},
		{"algorithm", o.Algorithm != "" && o.Algorithm != "sha256", "scheme hmac"},
		{"separator", o.Separator != "", "scheme hmac"},
		{"secret_encoding", o.SecretEncoding != "", "scheme hmac"},
		{"single", len(o.Single) > 0, "scheme hmac"},
	} {
		if f.set {
			errs = append(errs, fmt.Errorf("%s: only used by %s, not %s", f.key, f.usedBy, o.Scheme))
		}
	}
	return errors.Join(errs...)
}
