package verify

import "fmt"

// maxAsymSignature is the longest decoded signature a public-key scheme
// accepts: an ASN.1 DER ECDSA P-256 signature is at most 72 bytes, an
// Ed25519 one is 64.
const maxAsymSignature = 72

// Built-in public-key schemes: where each provider puts its signature and
// what it signs.
var (
	discordOptions = Options{Header: "X-Signature-Ed25519", Encoding: "hex",
		Template:  "{header:X-Signature-Timestamp}{body}",
		Timestamp: TimestampSource{Header: "X-Signature-Timestamp"}}
	sendGridOptions = Options{Header: "X-Twilio-Email-Event-Webhook-Signature", Encoding: "base64",
		Template:  "{header:X-Twilio-Email-Event-Webhook-Timestamp}{body}",
		Timestamp: TimestampSource{Header: "X-Twilio-Email-Event-Webhook-Timestamp"}}
)

// signedByKey verifies one signature, read from a header or the body, over
// the content of a template, under any of the provider's public keys.
type signedByKey struct {
	keys      publicKeys
	sig       sigSource
	prefix    string
	enc       encoding
	tmpl      *Template
	url       string
	timestamp TimestampSource
	clock     clock
}

// newPublicKey builds the verifier of a scheme that only takes public keys.
func newPublicKey(o Options, c clock) (Verifier, error) {
	switch o.Scheme {
	case SchemeAlipay, SchemeWeChatPay:
		keys, err := parseRSAKeys(o.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("public_key: %w", err)
		}
		if o.Scheme == SchemeAlipay {
			return &alipay{keys: keys}, nil
		}
		return &wechatpay{keys: keys, clock: c}, nil
	}
	parse := parseEd25519Keys
	if o.Scheme == SchemeECDSA || o.Scheme == SchemeSendGrid {
		parse = parseECDSAKeys
	}
	keys, err := parse(o.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("public_key: %w", err)
	}
	switch o.Scheme {
	case SchemeDiscord:
		o = withKey(discordOptions, o)
	case SchemeSendGrid:
		o = withKey(sendGridOptions, o)
	}
	v, err := newSignedByKey(o, keys, c)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// signatureOptions reads where the signature is (Header or JSON) and how
// it is written (Encoding after Prefix): the same for schemes hmac,
// ed25519 and ecdsa.
func signatureOptions(o Options) (sigSource, encoding, error) {
	sig, err := newSigSource(o.Header, o.JSON)
	if err != nil {
		return sigSource{}, 0, err
	}
	enc, err := encodingNamed(o.Encoding)
	if err != nil {
		return sigSource{}, 0, err
	}
	if len(o.Prefix) > 64 {
		return sigSource{}, 0, fmt.Errorf("prefix: longer than 64 bytes")
	}
	return sig, enc, nil
}

// newSignedByKey reads where the signature is and what it covers, as
// scheme hmac reads them.
func newSignedByKey(o Options, keys publicKeys, c clock) (*signedByKey, error) {
	v := &signedByKey{keys: keys, prefix: o.Prefix, url: o.URL, timestamp: o.Timestamp, clock: c}
	var err error
	if v.sig, v.enc, err = signatureOptions(o); err != nil {
		return nil, err
	}
	if v.tmpl, err = templateFor(o); err != nil {
		return nil, err
	}
	if v.tmpl.Uses(PartSecret) {
		return nil, fmt.Errorf("template: {secret} has no meaning for scheme %s (it has no secret)", o.Scheme)
	}
	if err := checkTimestamp(o.Timestamp); err != nil {
		return nil, err
	}
	return v, nil
}

// withKey is a built-in scheme's options with the route's key, tolerance
// and clock.
func withKey(builtIn, route Options) Options {
	builtIn.Scheme, builtIn.PublicKey, builtIn.Tolerance, builtIn.Now = route.Scheme, route.PublicKey, route.Tolerance, route.Now
	return builtIn
}

func (v *signedByKey) Verify(r Request) error {
	raw, err := v.sig.read(r)
	if err != nil {
		return err
	}
	var buf [maxAsymSignature]byte
	n, ok := decodeSig(buf[:], raw, v.prefix, v.enc)
	if !ok {
		return reject("malformed %s", v.sig)
	}
	if err := v.timestamp.check(r, v.clock); err != nil {
		return err
	}
	msg, err := v.tmpl.Render(nil, r, Inputs{URL: v.url})
	if err != nil {
		return err
	}
	if !v.keys.verify(msg, [][]byte{buf[:n]}) {
		return reject("no signature matched")
	}
	return nil
}
