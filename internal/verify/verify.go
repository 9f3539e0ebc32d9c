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
//   - Comparisons of MACs are constant-time (hmac.Equal).
//   - Several secrets (or several PEM keys) mean rotation: any one verifies.
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
)

// schemes are the scheme names, in SPEC order: the one list of them.
var schemes = []string{
	SchemeStandardWebhooks, SchemeStripe, SchemeGitHub, SchemeShopify,
	SchemeSlack, SchemeSquare, SchemePaddle, SchemeRazorpay, SchemeTwitch,
	SchemeAlipay, SchemeWeChatPay, SchemeHMAC, SchemeToken,
}

// Schemes returns every scheme name New accepts, sorted.
func Schemes() []string {
	s := slices.Clone(schemes)
	slices.Sort(s)
	return s
}

// UsesPublicKey reports whether scheme verifies with the provider's RSA
// public key (Options.PublicKey) rather than shared secrets.
func UsesPublicKey(scheme string) bool {
	return scheme == SchemeAlipay || scheme == SchemeWeChatPay
}

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
	// PublicKey is the provider's RSA public key for alipay and wechatpay:
	// PEM ("PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE" blocks; several
	// blocks mean rotation) or, as Alipay hands it out, bare base64 DER.
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
	// Header names the signature header for scheme hmac (default
	// "X-Signature") and the token header for scheme token.
	Header string
	// JSON is, instead of Header, the plain GJSON path of the signature
	// (hmac) or token (token) inside the JSON body: Mailgun, Adyen, Lark.
	JSON string
	// Template is the signed content for scheme hmac (see ParseTemplate).
	// Default "{body}".
	Template string
	// Timestamp is where scheme hmac finds the signed timestamp checked
	// against Tolerance. Zero means the provider signs none.
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
	// Encoding is how scheme hmac's signature is written: hex or base64.
	// Default hex.
	Encoding string
	// Prefix is stripped from scheme hmac's header value before decoding,
	// compared ASCII case-insensitively, e.g. "sha256=". Default none.
	Prefix string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// New validates o and returns the Verifier for its scheme. Errors name the
// offending option by its configuration key (secrets, public_key, url,
// tolerance, header, algorithm, encoding) and never contain a secret.
func New(o Options) (Verifier, error) {
	switch {
	case o.Scheme == "":
		return nil, fmt.Errorf("scheme: required (one of %s)", strings.Join(Schemes(), ", "))
	case !slices.Contains(Schemes(), o.Scheme):
		return nil, fmt.Errorf("scheme: unknown %q (want one of %s)", o.Scheme, strings.Join(Schemes(), ", "))
	case o.Tolerance < 0:
		return nil, fmt.Errorf("tolerance: must not be negative, got %s", o.Tolerance)
	case o.URL != "" && o.Scheme != SchemeSquare && o.Scheme != SchemeHMAC:
		return nil, fmt.Errorf("url: only used by schemes %s and %s, not %s", SchemeSquare, SchemeHMAC, o.Scheme)
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
	if UsesPublicKey(o.Scheme) {
		if len(o.Secrets) > 0 {
			return nil, fmt.Errorf("secrets: not used by scheme %s (it verifies with public_key)", o.Scheme)
		}
		keys, err := parsePublicKeys(o.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("public_key: %w", err)
		}
		if o.Scheme == SchemeAlipay {
			return &alipay{keys: keys}, nil
		}
		return &wechatpay{keys: keys, clock: c}, nil
	}
	if o.PublicKey != "" {
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
	for _, f := range []struct {
		key string
		set bool
	}{
		{"template", o.Template != ""}, {"timestamp", o.Timestamp != (TimestampSource{})},
		{"separator", o.Separator != ""}, {"secret_encoding", o.SecretEncoding != ""},
		{"single", len(o.Single) > 0}, {"json", o.JSON != "" && o.Scheme != SchemeToken},
	} {
		if f.set {
			return fmt.Errorf("%s: only used by scheme %s, not %s", f.key, SchemeHMAC, o.Scheme)
		}
	}
	return nil
}
