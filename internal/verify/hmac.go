package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"hash"
	"sync"
	"time"
)

// macKey computes HMACs under one secret. Hashers are pooled so that a
// verification allocates nothing on the success path.
type macKey struct {
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	sum []byte
}

func newMACKey(newHash func() hash.Hash, key []byte) *macKey {
	key = append([]byte(nil), key...)
	k := &macKey{}
	k.pool.New = func() any {
		h := hmac.New(newHash, key)
		return &macState{h: h, sum: make([]byte, 0, h.Size())}
	}
	return k
}

// keyring holds every secret of a route: several mean rotation.
type keyring []*macKey

// match reports whether any of sigs is the MAC, under any key, of the
// concatenation of parts. Each comparison is constant-time.
func (k keyring) match(sigs [][]byte, parts ...[]byte) bool {
	for _, key := range k {
		if key.match(sigs, parts...) {
			return true
		}
	}
	return false
}

// match reports whether any of sigs is the MAC of the concatenation of
// parts under this key.
func (key *macKey) match(sigs [][]byte, parts ...[]byte) bool {
	st := key.pool.Get().(*macState)
	defer key.pool.Put(st)
	st.h.Reset()
	for _, p := range parts {
		st.h.Write(p)
	}
	st.sum = st.h.Sum(st.sum[:0])
	ok := false
	for _, s := range sigs {
		if hmac.Equal(st.sum, s) {
			ok = true
		}
	}
	return ok
}

// clock checks signed timestamps.
type clock struct {
	now       func() time.Time
	tolerance time.Duration
}

// check rejects a timestamp further than the tolerance from now, in either
// direction: a stale one may be a replay, a future one lets a captured
// request be replayed for longer.
func (c clock) check(t time.Time) error {
	d := c.now().Sub(t)
	if d > c.tolerance || d < -c.tolerance {
		return reject("timestamp outside tolerance")
	}
	return nil
}

// checkUnix parses a header carrying Unix seconds and checks it.
func (c clock) checkUnix(name string, v []byte) error {
	sec, ok := parseUnix(v)
	if !ok {
		return reject("malformed %s header", name)
	}
	return c.check(time.Unix(sec, 0))
}

// Header names of the built-in schemes.
const (
	hdrStripe          = "Stripe-Signature"
	hdrGitHub          = "X-Hub-Signature-256"
	hdrShopify         = "X-Shopify-Hmac-Sha256"
	hdrSlackSignature  = "X-Slack-Signature"
	hdrSlackTimestamp  = "X-Slack-Request-Timestamp"
	hdrSquare          = "X-Square-Hmacsha256-Signature"
	hdrPaddle          = "Paddle-Signature"
	hdrRazorpay        = "X-Razorpay-Signature"
	hdrTwitchID        = "Twitch-Eventsub-Message-Id"
	hdrTwitchTimestamp = "Twitch-Eventsub-Message-Timestamp"
	hdrTwitchSignature = "Twitch-Eventsub-Message-Signature"
	hdrWeChatTimestamp = "Wechatpay-Timestamp"
	hdrWeChatNonce     = "Wechatpay-Nonce"
	hdrWeChatSignature = "Wechatpay-Signature"
)

// Byte strings written into MACs; package-level so writing them allocates nothing.
var (
	dot     = []byte(".")
	colon   = []byte(":")
	slackV0 = []byte("v0:")
	newline = []byte("\n")
)

func newHMAC(o Options, c clock) (Verifier, error) {
	if len(o.Secrets) == 0 {
		return nil, fmt.Errorf("secrets: at least one required for scheme %s", o.Scheme)
	}
	switch o.Scheme {
	case SchemeHMAC:
		v, err := newGeneric(o, c)
		switch {
		case err != nil:
			return nil, err
		case o.Challenge == ChallengeZoom:
			return zoomChallenge{v}, nil
		}
		return v, nil
	case SchemeToken:
		v, err := newToken(o)
		switch {
		case err != nil:
			return nil, err
		case o.Challenge == ChallengeLark:
			return larkChallenge{v}, nil
		}
		return v, nil
	}
	keys, err := newKeyring(o)
	if err != nil {
		return nil, err
	}
	base := macBase{keys: keys, clock: c}
	switch o.Scheme {
	case SchemeStripe:
		return &stripe{base}, nil
	case SchemePaddle:
		return &paddle{base}, nil
	case SchemeSlack:
		return &slack{base}, nil
	case SchemeTwitch:
		return &twitch{base}, nil
	case SchemeGitHub:
		return &bodyMAC{macBase: base, header: hdrGitHub, prefix: "sha256=", enc: encHex}, nil
	case SchemeShopify:
		return &bodyMAC{macBase: base, header: hdrShopify, enc: encBase64}, nil
	case SchemeRazorpay:
		return &bodyMAC{macBase: base, header: hdrRazorpay, enc: encHex}, nil
	case SchemeSquare:
		if err := checkURL(o.URL); err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		return &bodyMAC{macBase: base, header: hdrSquare, enc: encBase64, signedPrefix: []byte(o.URL)}, nil
	}
	return nil, fmt.Errorf("scheme: unknown %q", o.Scheme) // unreachable: New checked the name
}

// newKeyring turns o.Secrets into MAC keys (Standard Webhooks secrets
// decoded first). No secrets make an empty keyring, which matches nothing.
func newKeyring(o Options) (keyring, error) {
	keys := make(keyring, 0, len(o.Secrets))
	for i, s := range o.Secrets {
		if s == "" {
			return nil, &SecretError{Index: i, Err: errEmptySecret}
		}
		key := []byte(s)
		if o.Scheme == SchemeStandardWebhooks {
			var err error
			if key, err = standardKey(s); err != nil {
				return nil, &SecretError{Index: i, Err: err}
			}
		}
		keys = append(keys, newMACKey(sha256.New, key))
	}
	return keys, nil
}

// macBase is what every HMAC scheme needs.
type macBase struct {
	keys  keyring
	clock clock
}

// bodyMAC is the family whose signature is a MAC over the body (preceded, for
// Square, by the notification URL), alone in one header.
type bodyMAC struct {
	macBase
	header       string
	prefix       string
	enc          encoding
	signedPrefix []byte
}

func (v *bodyMAC) Verify(r Request) error {
	h, err := single(r, v.header)
	if err != nil {
		return err
	}
	var buf [maxMACSize]byte
	n, ok := decodeSig(buf[:], h, v.prefix, v.enc)
	if !ok {
		return reject("malformed %s header", v.header)
	}
	if !v.keys.match([][]byte{buf[:n]}, v.signedPrefix, r.Body()) {
		return reject("no signature matched")
	}
	return nil
}

// stripe: "t=<unix>,v1=<hex>[,v1=…]" over "{t}.{body}".
type stripe struct{ macBase }

func (v *stripe) Verify(r Request) error {
	h, err := single(r, hdrStripe)
	if err != nil {
		return err
	}
	sh, err := ParseStripeHeader(h)
	if err != nil {
		return reject("malformed %s header: %v", hdrStripe, err)
	}
	if err := v.clock.check(time.Unix(sh.Unix, 0)); err != nil {
		return err
	}
	if !v.keys.match(sh.Signatures, sh.Timestamp, dot, r.Body()) {
		return reject("no signature matched")
	}
	return nil
}

// paddle: "ts=<unix>;h1=<hex>[;h1=…]" over "{ts}:{body}".
type paddle struct{ macBase }

func (v *paddle) Verify(r Request) error {
	h, err := single(r, hdrPaddle)
	if err != nil {
		return err
	}
	ph, err := ParsePaddleHeader(h)
	if err != nil {
		return reject("malformed %s header: %v", hdrPaddle, err)
	}
	if err := v.clock.check(time.Unix(ph.Unix, 0)); err != nil {
		return err
	}
	if !v.keys.match(ph.Signatures, ph.Timestamp, colon, r.Body()) {
		return reject("no signature matched")
	}
	return nil
}

// slack: "v0=<hex>" over "v0:{timestamp}:{body}".
type slack struct{ macBase }

func (v *slack) Verify(r Request) error {
	ts, err := single(r, hdrSlackTimestamp)
	if err != nil {
		return err
	}
	h, err := single(r, hdrSlackSignature)
	if err != nil {
		return err
	}
	if err := v.clock.checkUnix(hdrSlackTimestamp, ts); err != nil {
		return err
	}
	var buf [maxMACSize]byte
	n, ok := decodeSig(buf[:], h, "v0=", encHex)
	if !ok {
		return reject("malformed %s header", hdrSlackSignature)
	}
	if !v.keys.match([][]byte{buf[:n]}, slackV0, ts, colon, r.Body()) {
		return reject("no signature matched")
	}
	return nil
}

// twitch: "sha256=<hex>" over id + timestamp + body, the timestamp in RFC 3339.
type twitch struct{ macBase }

func (v *twitch) Verify(r Request) error {
	id, err := single(r, hdrTwitchID)
	if err != nil {
		return err
	}
	ts, err := single(r, hdrTwitchTimestamp)
	if err != nil {
		return err
	}
	h, err := single(r, hdrTwitchSignature)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return reject("malformed %s header", hdrTwitchTimestamp)
	}
	if err := v.clock.check(t); err != nil {
		return err
	}
	var buf [maxMACSize]byte
	n, ok := decodeSig(buf[:], h, "sha256=", encHex)
	if !ok {
		return reject("malformed %s header", hdrTwitchSignature)
	}
	if !v.keys.match([][]byte{buf[:n]}, id, ts, r.Body()) {
		return reject("no signature matched")
	}
	return nil
}

// single returns the one value of header name, trimmed of surrounding
// spaces and tabs, rejecting a missing, repeated, empty or oversized header.
func single(r Request, name string) ([]byte, error) {
	vs := r.HeaderValues(name)
	if len(vs) == 0 {
		return nil, reject("missing %s header", name)
	}
	if len(vs) > 1 {
		return nil, reject("duplicated %s header", name)
	}
	v := vs[0]
	if len(v) > MaxHeaderLen {
		return nil, reject("%s header too long", name)
	}
	v = trimOWS(v)
	if len(v) == 0 {
		return nil, reject("empty %s header", name)
	}
	return v, nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
