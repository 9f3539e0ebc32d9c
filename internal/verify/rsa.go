package verify

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// maxRSASignature is the size of an RSA-4096 signature, the largest key
// accepted.
const maxRSASignature = 512

// Form parse errors: constant, so safe to show.
var (
	errFormEncoding  = errors.New("bad percent-encoding")
	errFormEmptyKey  = errors.New("empty parameter name")
	errFormDuplicate = errors.New("duplicated parameter")
)

// alipay verifies an Alipay asynchronous notification: a form body whose
// "sign" parameter is a base64 SHA256withRSA (RSA2) signature of the other
// parameters in canonical form (see AlipayCanonical).
type alipay struct {
	keys []*rsa.PublicKey
}

func (v *alipay) Verify(r Request) error {
	params, err := parseForm(r.Body())
	if err != nil {
		return reject("malformed form body: %v", err)
	}
	var sign, signType string
	var hasSign, hasSignType, hasEmpty bool
	for _, p := range params {
		switch p.key {
		case "sign":
			sign, hasSign = p.value, true
		case "sign_type":
			signType, hasSignType = p.value, true
		default:
			hasEmpty = hasEmpty || p.value == ""
		}
	}
	switch {
	case !hasSign:
		return reject("missing sign parameter")
	case sign == "":
		return reject("empty sign parameter")
	case len(sign) > MaxHeaderLen:
		return reject("sign parameter too long")
	}
	if hasSignType && signType != "RSA2" {
		return reject("unsupported sign_type (want RSA2)")
	}
	var buf [maxRSASignature]byte
	n, ok := decodeBase64(buf[:], []byte(sign))
	if !ok {
		return reject("malformed sign parameter")
	}
	// Alipay's documentation and its PHP SDK leave empty values out of the
	// signed string; its Java SDK (rsaCheckV1) keeps them as "k=". Whichever
	// form Alipay signed, the signature is Alipay's, so both are accepted.
	if !verifyRSA(v.keys, sha256.Sum256(alipayCanonical(params, false)), buf[:n]) &&
		(!hasEmpty || !verifyRSA(v.keys, sha256.Sum256(alipayCanonical(params, true)), buf[:n])) {
		return reject("no signature matched")
	}
	if !alipayUnambiguous(params) {
		// The reason names no parameter: names and values are the sender's.
		return reject(`parameters could be cut another way under the same signature (a name outside [A-Za-z0-9_], or a value holding "&name=")`)
	}
	return nil
}

// alipayUnambiguous reports whether params are the only parameters their
// signed string can be read as.
//
// Alipay signs decoded values joined with "&" and "=", so the signature
// does not fix where one parameter ends: from a genuine notification,
// "total_amount=20.00%26trade_no%3D2024…" (one parameter swallowing the
// next) or a value's "x&y=z" cut in two both have the genuine signed
// string. Either would be a notification Alipay never sent — another
// notify_id, or another fingerprint occupying the genuine one's key (SPEC
// §1). So names must be of [A-Za-z0-9_] (all of Alipay's are) and no value
// may hold "&" followed by such a name and "=". Then a signed string has at
// most one reading that passes, up to parameters with empty values (which
// Alipay leaves out of it): each "&" followed by a name and "=" must be a
// boundary, and no other "&" can be one. A genuine value holding "&name="
// is refused (401); Alipay's own values — ids, amounts, JSON lists, the
// merchant's URL-encoded passback_params — do not hold one, short of a
// product subject written that way.
func alipayUnambiguous(params []formParam) bool {
	for _, p := range params {
		if p.key == "sign" || p.key == "sign_type" {
			continue
		}
		if !alipayName(p.key) {
			return false
		}
		for v := p.value; ; {
			i := strings.IndexByte(v, '&')
			if i < 0 {
				break
			}
			v = v[i+1:]
			name, _, found := strings.Cut(v, "=")
			if found && alipayName(name) {
				return false
			}
		}
	}
	return true
}

// alipayName reports whether s is a non-empty run of [A-Za-z0-9_].
func alipayName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// AlipayCanonical returns the string Alipay signs for an asynchronous
// notification body (application/x-www-form-urlencoded): every parameter
// except sign and sign_type, with its URL-decoded value, parameters with an
// empty value left out, sorted by name in byte order, joined as
// "k1=v1&k2=v2". This follows Alipay's "异步通知验签" and "自行实现签名"
// documentation (剔除 sign、sign_type 与空值参数, 字典序排序, url_decode 后拼接).
// Values are decoded to bytes, not to text, so a GBK notification verifies as
// well as a UTF-8 one. A body with malformed percent-encoding, an empty
// parameter name, or a repeated parameter is an error: Alipay sends none of
// these, and any guess about them would be a second meaning for one body.
func AlipayCanonical(body []byte) ([]byte, error) {
	params, err := parseForm(body)
	if err != nil {
		return nil, err
	}
	return alipayCanonical(params, false), nil
}

type formParam struct {
	key, value string
}

// parseForm decodes a form body into parameters sorted by name.
func parseForm(body []byte) ([]formParam, error) {
	var params []formParam
	for len(body) > 0 {
		seg := body
		if i := bytes.IndexByte(body, '&'); i >= 0 {
			seg, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(seg) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(seg, []byte("="))
		key, err := url.QueryUnescape(string(k))
		if err != nil {
			return nil, errFormEncoding
		}
		value, err := url.QueryUnescape(string(v))
		if err != nil {
			return nil, errFormEncoding
		}
		if key == "" {
			return nil, errFormEmptyKey
		}
		params = append(params, formParam{key: key, value: value})
	}
	slices.SortFunc(params, func(a, b formParam) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(params); i++ {
		if params[i].key == params[i-1].key {
			return nil, errFormDuplicate
		}
	}
	return params, nil
}

// alipayCanonical joins sorted params, leaving out sign and sign_type, and
// empty values unless keepEmpty.
func alipayCanonical(params []formParam, keepEmpty bool) []byte {
	var b []byte
	for _, p := range params {
		if p.key == "sign" || p.key == "sign_type" || (p.value == "" && !keepEmpty) {
			continue
		}
		if len(b) > 0 {
			b = append(b, '&')
		}
		b = append(b, p.key...)
		b = append(b, '=')
		b = append(b, p.value...)
	}
	return b
}

// wechatpay verifies a WeChat Pay v3 notification: Wechatpay-Signature is a
// base64 SHA256withRSA signature of
// "{Wechatpay-Timestamp}\n{Wechatpay-Nonce}\n{body}\n" with the platform key.
// Wechatpay-Serial, which names the key, is not consulted: every configured
// key is tried, so a rotation only needs both keys configured. WeChat's
// deliberately invalid "WECHATPAY/SIGNTEST/" probe signatures fail, as WeChat
// expects them to.
type wechatpay struct {
	keys  []*rsa.PublicKey
	clock clock
}

func (v *wechatpay) Verify(r Request) error {
	ts, err := single(r, hdrWeChatTimestamp)
	if err != nil {
		return err
	}
	nonce, err := single(r, hdrWeChatNonce)
	if err != nil {
		return err
	}
	h, err := single(r, hdrWeChatSignature)
	if err != nil {
		return err
	}
	if err := v.clock.checkUnix(hdrWeChatTimestamp, ts); err != nil {
		return err
	}
	var buf [maxRSASignature]byte
	n, ok := decodeBase64(buf[:], h)
	if !ok {
		return reject("malformed %s header", hdrWeChatSignature)
	}
	d := sha256.New()
	for _, p := range [][]byte{ts, newline, nonce, newline, r.Body(), newline} {
		d.Write(p)
	}
	var digest [sha256.Size]byte
	d.Sum(digest[:0])
	if !verifyRSA(v.keys, digest, buf[:n]) {
		return reject("no signature matched")
	}
	return nil
}

// verifyRSA reports whether sig is a PKCS #1 v1.5 SHA-256 signature of
// digest under any of keys.
func verifyRSA(keys []*rsa.PublicKey, digest [sha256.Size]byte, sig []byte) bool {
	for _, k := range keys {
		if len(sig) == k.Size() && rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
			return true
		}
	}
	return false
}

// minRSABits is the smallest key accepted; both Alipay (RSA2) and WeChat Pay
// use 2048.
const minRSABits = 2048

func rsaKey(pub any) (*rsa.PublicKey, error) {
	k, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an RSA key", keyKind(pub))
	}
	if bits := k.N.BitLen(); bits < minRSABits || k.Size() > maxRSASignature {
		return nil, fmt.Errorf("RSA key of %d bits (want %d to %d)", bits, minRSABits, 8*maxRSASignature)
	}
	return k, nil
}

// checkURL requires an absolute http(s) URL: Square signs the notification
// URL, so a relative or mistyped one would reject every delivery.
func checkURL(s string) error {
	if s == "" {
		return errors.New("required for scheme square (the notification URL as configured in Square)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an absolute http or https URL")
	}
	return nil
}
