package verify

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// maxMACSize is the largest MAC any scheme produces (HMAC-SHA512). Longer
// decoded signatures cannot match and are not candidates.
const maxMACSize = 64

// encoding is how a signature is written in its header.
type encoding uint8

const (
	encHex encoding = iota
	encBase64
)

// Parse errors. They carry no input bytes, so they are safe to show.
var (
	errNoTimestamp   = errors.New("no timestamp")
	errTwoTimestamps = errors.New("more than one timestamp")
	errBadTimestamp  = errors.New("malformed timestamp")
	errNoSignature   = errors.New("no usable signature")
)

// SignatureHeader is a parsed header that carries a timestamp and a list of
// signatures (Stripe-Signature, Paddle-Signature).
type SignatureHeader struct {
	// Timestamp is the timestamp exactly as sent (it aliases the input): the
	// signed message starts with these bytes.
	Timestamp []byte
	// Unix is Timestamp in seconds since the epoch.
	Unix int64
	// Signatures are the decoded signatures of the current scheme (v1 for
	// Stripe, h1 for Paddle), in order, each 1 to 64 bytes. Entries of other
	// schemes and undecodable entries are skipped.
	Signatures [][]byte
}

// ParseStripeHeader parses a Stripe-Signature value,
// "t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]". It fails when there is no t, more
// than one t, a malformed t, or no decodable v1.
func ParseStripeHeader(h []byte) (SignatureHeader, error) {
	return parseTimestamped(h, ',', "t", "v1")
}

// ParsePaddleHeader parses a Paddle-Signature value,
// "ts=<unix>;h1=<hex>[;h1=<hex>…]". It fails when there is no ts, more than
// one ts, a malformed ts, or no decodable h1.
func ParsePaddleHeader(h []byte) (SignatureHeader, error) {
	return parseTimestamped(h, ';', "ts", "h1")
}

func parseTimestamped(h []byte, sep byte, tsKey, sigKey string) (SignatureHeader, error) {
	var out SignatureHeader
	// Decoded hex is half its text, so buf never grows and the signatures can
	// share it: one allocation for all of them.
	buf := make([]byte, 0, len(h)/2)
	seen := false
	for len(h) > 0 {
		item := h
		if i := bytes.IndexByte(h, sep); i >= 0 {
			item, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		k, v, ok := bytes.Cut(trimOWS(item), []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case tsKey:
			if seen {
				return SignatureHeader{}, errTwoTimestamps
			}
			sec, ok := parseUnix(v)
			if !ok {
				return SignatureHeader{}, errBadTimestamp
			}
			out.Timestamp, out.Unix, seen = v, sec, true
		case sigKey:
			if len(v) == 0 || len(v)%2 != 0 || len(v) > 2*maxMACSize {
				continue
			}
			start := len(buf)
			buf = buf[:start+len(v)/2]
			if _, err := hex.Decode(buf[start:], v); err != nil {
				buf = buf[:start]
				continue
			}
			out.Signatures = append(out.Signatures, buf[start:len(buf):len(buf)])
		}
	}
	if !seen {
		return SignatureHeader{}, errNoTimestamp
	}
	if len(out.Signatures) == 0 {
		return SignatureHeader{}, errNoSignature
	}
	return out, nil
}

// StandardSignatures are the decoded entries of a webhook-signature header.
type StandardSignatures struct {
	// V1 are the symmetric (HMAC-SHA256) signatures, each 1 to 64 bytes.
	V1 [][]byte
	// V1a are the asymmetric (Ed25519) signatures, each exactly 64 bytes.
	V1a [][]byte
}

// ParseStandardSignatureHeader parses a webhook-signature value: a
// space-separated list of "<version>,<base64>". It keeps the decodable v1
// and v1a entries, in order, and skips other versions and undecodable
// entries. It fails when no entry is kept.
func ParseStandardSignatureHeader(h []byte) (StandardSignatures, error) {
	var out StandardSignatures
	// Decoded base64 is shorter than its text, so buf never grows and every
	// signature shares it.
	buf := make([]byte, 0, len(h))
	for len(h) > 0 {
		item := h
		if i := bytes.IndexByte(h, ' '); i >= 0 {
			item, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		version, sig, ok := bytes.Cut(item, []byte(","))
		if !ok || (string(version) != "v1" && string(version) != "v1a") {
			continue
		}
		start := len(buf)
		n, ok := decodeBase64(buf[start:min(start+maxMACSize, cap(buf))], sig)
		if !ok || (string(version) == "v1a" && n != ed25519.SignatureSize) {
			continue
		}
		buf = buf[:start+n]
		if string(version) == "v1" {
			out.V1 = append(out.V1, buf[start:len(buf):len(buf)])
		} else {
			out.V1a = append(out.V1a, buf[start:len(buf):len(buf)])
		}
	}
	if len(out.V1) == 0 && len(out.V1a) == 0 {
		return StandardSignatures{}, errNoSignature
	}
	return out, nil
}

// ParseStandardSignatures returns the v1 entries of a webhook-signature
// value (see ParseStandardSignatureHeader). It fails when no v1 entry
// decodes.
func ParseStandardSignatures(h []byte) ([][]byte, error) {
	sigs, err := ParseStandardSignatureHeader(h)
	if err != nil || len(sigs.V1) == 0 {
		return nil, errNoSignature
	}
	return sigs.V1, nil
}

// DecodeSignature decodes a single-signature header value such as GitHub's
// "sha256=<hex>" or Shopify's "<base64>": prefix (which may be empty) must
// lead the value, compared ASCII case-insensitively, and the rest is decoded
// with encoding "hex" or "base64" (standard alphabet, padded, strict). The
// result is never longer than the value.
func DecodeSignature(value []byte, prefix, encoding string) ([]byte, error) {
	var enc = encHex
	switch encoding {
	case "hex":
	case "base64":
		enc = encBase64
	default:
		return nil, fmt.Errorf("unknown encoding %q", encoding)
	}
	dst := make([]byte, len(value))
	n, ok := decodeSig(dst, value, prefix, enc)
	if !ok {
		return nil, errNoSignature
	}
	return dst[:n], nil
}

// decodeSig strips prefix from src and decodes the rest into dst, failing if
// it does not fit. It returns the decoded length, always at least 1.
func decodeSig(dst, src []byte, prefix string, enc encoding) (int, bool) {
	if len(src) < len(prefix) || !asciiEqualFold(src[:len(prefix)], prefix) {
		return 0, false
	}
	src = src[len(prefix):]
	if enc == encBase64 {
		return decodeBase64(dst, src)
	}
	if len(src) == 0 || len(src)%2 != 0 || len(src)/2 > len(dst) {
		return 0, false
	}
	n, err := hex.Decode(dst, src)
	return n, err == nil
}

// asciiEqualFold reports whether b equals s ignoring the case of ASCII
// letters (only: Unicode folding would let "ſ" stand for "s").
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// decodeBase64 decodes padded standard base64 (RFC 4648 §4, the only form
// the providers send) into dst, failing if it does not fit. Decoding is
// strict, so a signature has exactly one accepted spelling: a header cut by
// its padding character is as invalid as one cut anywhere else.
func decodeBase64(dst, src []byte) (int, bool) {
	// The decoder skips CR and LF, which would make the length check below
	// wrong; no provider sends them inside a signature.
	if len(src) == 0 || len(src)%4 != 0 || bytes.ContainsAny(src, "\r\n") {
		return 0, false
	}
	want := len(src) / 4 * 3
	for i := 1; i <= 2 && src[len(src)-i] == '='; i++ {
		want--
	}
	if want > len(dst) {
		return 0, false
	}
	n, err := strictBase64.Decode(dst, src)
	return n, err == nil && n > 0
}

var strictBase64 = base64.StdEncoding.Strict()

// parseUnix parses Unix seconds: 1 to 18 ASCII digits, no sign, no spaces.
func parseUnix(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
