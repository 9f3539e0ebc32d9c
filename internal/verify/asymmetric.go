package verify

import "fmt"

// maxAsymSignature is the longest decoded signature a public-key scheme
// accepts: an ASN.1 DER ECDSA P-256 signature is at most 72 bytes, an
// Ed25519 one is 64.
const maxAsymSignature = 72

// Header names of the built-in public-key schemes.
const (
	hdrDiscordSignature  = "X-Signature-Ed25519"
	hdrDiscordTimestamp  = "X-Signature-Timestamp"
	hdrSendGridSignature = "X-Twilio-Email-Event-Webhook-Signature"
	hdrSendGridTimestamp = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// content builds the message a signature covers from a request. It is the
// seam through which a scheme says what its provider signs.
type content func(r Request) ([]byte, error)

// bodyContent: the signature covers the body alone.
func bodyContent(r Request) ([]byte, error) { return r.Body(), nil }

// timestampThenBody: the signature covers a header of Unix seconds followed
// directly by the body (Discord, SendGrid); the timestamp must be within the
// clock's tolerance.
func timestampThenBody(header string, c clock) content {
	return func(r Request) ([]byte, error) {
		ts, err := single(r, header)
		if err != nil {
			return nil, err
		}
		if err := c.checkUnix(header, ts); err != nil {
			return nil, err
		}
		msg := make([]byte, 0, len(ts)+len(r.Body()))
		return append(append(msg, ts...), r.Body()...), nil
	}
}

// signedByKey verifies one signature, alone in one header, over a message
// built by signed, under any of the provider's public keys.
type signedByKey struct {
	keys   publicKeys
	sig    sigHeader
	signed content
}

func (v *signedByKey) Verify(r Request) error {
	h, err := single(r, v.sig.name)
	if err != nil {
		return err
	}
	var buf [maxAsymSignature]byte
	n, ok := decodeSig(buf[:], h, v.sig.prefix, v.sig.enc)
	if !ok {
		return reject("malformed %s header", v.sig.name)
	}
	msg, err := v.signed(r)
	if err != nil {
		return err
	}
	if !v.keys.verify(msg, [][]byte{buf[:n]}) {
		return reject("no signature matched")
	}
	return nil
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
		return &signedByKey{keys: keys, sig: sigHeader{name: hdrDiscordSignature, enc: encHex},
			signed: timestampThenBody(hdrDiscordTimestamp, c)}, nil
	case SchemeSendGrid:
		return &signedByKey{keys: keys, sig: sigHeader{name: hdrSendGridSignature, enc: encBase64},
			signed: timestampThenBody(hdrSendGridTimestamp, c)}, nil
	}
	sh, err := newSigHeader(o)
	if err != nil {
		return nil, err
	}
	return &signedByKey{keys: keys, sig: sh, signed: bodyContent}, nil
}
