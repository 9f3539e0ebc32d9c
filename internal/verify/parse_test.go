package verify_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

func hexes(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i], _ = hex.DecodeString(s)
	}
	return out
}

func TestParseStripeHeader(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		unix    int64
		sigs    [][]byte
		wantErr bool
	}{
		{"one v1", "t=1492774577,v1=5257a869", 1492774577, hexes("5257a869"), false},
		{"rotation", "t=1492774577,v1=aa,v0=bb,v1=cc", 1492774577, hexes("aa", "cc"), false},
		{"spaces around items", " t=12 , v1=aa ", 12, hexes("aa"), false},
		{"undecodable v1 skipped", "t=12,v1=zz,v1=abc,v1=aa", 12, hexes("aa"), false},
		{"items without = skipped", "t=12,junk,v1=aa", 12, hexes("aa"), false},
		{"no t", "v1=aa", 0, nil, true},
		{"two t", "t=1,t=2,v1=aa", 0, nil, true},
		{"negative t", "t=-1,v1=aa", 0, nil, true},
		{"t with fraction", "t=1.5,v1=aa", 0, nil, true},
		{"no v1", "t=12,v0=aa", 0, nil, true},
		{"v1 over 64 bytes", "t=12,v1=" + strings.Repeat("ab", 65), 0, nil, true},
		{"empty", "", 0, nil, true},
		{"paddle syntax", "ts=12;h1=aa", 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.ParseStripeHeader([]byte(tt.header))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStripeHeader(%q) error = %v, wantErr %v", tt.header, err, tt.wantErr)
			}
			if got.Unix != tt.unix || !slices.EqualFunc(got.Signatures, tt.sigs, bytes.Equal) {
				t.Errorf("ParseStripeHeader(%q) = %d %x, want %d %x", tt.header, got.Unix, got.Signatures, tt.unix, tt.sigs)
			}
		})
	}
}

func TestParsePaddleHeader(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		unix    int64
		sigs    [][]byte
		wantErr bool
	}{
		{"one h1", "ts=1671552777;h1=eb4d0dc8", 1671552777, hexes("eb4d0dc8"), false},
		{"rotation", "ts=1671552777;h1=aa;h1=bb", 1671552777, hexes("aa", "bb"), false},
		{"no ts", "h1=aa", 0, nil, true},
		{"two ts", "ts=1;ts=1;h1=aa", 0, nil, true},
		{"no h1", "ts=1", 0, nil, true},
		{"stripe syntax", "t=1,v1=aa", 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.ParsePaddleHeader([]byte(tt.header))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePaddleHeader(%q) error = %v, wantErr %v", tt.header, err, tt.wantErr)
			}
			if got.Unix != tt.unix || !slices.EqualFunc(got.Signatures, tt.sigs, bytes.Equal) {
				t.Errorf("ParsePaddleHeader(%q) = %d %x, want %d %x", tt.header, got.Unix, got.Signatures, tt.unix, tt.sigs)
			}
		})
	}
}

func TestParseStandardSignatures(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		want    []string
		wantErr bool
	}{
		{"one", "v1,Zm9v", []string{"foo"}, false},
		{"list", "v1,Zm9v v1,YmFy", []string{"foo", "bar"}, false},
		{"other versions skipped", "v1a,Zm9v v2,YmFy v1,YmF6", []string{"baz"}, false},
		{"bad base64 skipped", "v1,Zm9 v1,YmF6", []string{"baz"}, false},
		{"unpadded rejected", "v1,Zm8", nil, true},
		{"url alphabet rejected", "v1,-_-_", nil, true},
		{"non-canonical padding bits rejected", "v1,Zm9=", nil, true},
		{"no v1", "v1a,Zm9v", nil, true},
		{"no comma", "v1Zm9v", nil, true},
		{"empty", "", nil, true},
		{"over 64 bytes", "v1," + base64.StdEncoding.EncodeToString(make([]byte, 65)), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.ParseStandardSignatures([]byte(tt.header))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStandardSignatures(%q) error = %v, wantErr %v", tt.header, err, tt.wantErr)
			}
			var gotS []string
			for _, s := range got {
				gotS = append(gotS, string(s))
			}
			if !slices.Equal(gotS, tt.want) {
				t.Errorf("ParseStandardSignatures(%q) = %q, want %q", tt.header, gotS, tt.want)
			}
		})
	}
}

func TestDecodeSignature(t *testing.T) {
	tests := []struct {
		name, value, prefix, encoding string
		want                          string // hex of the result; "" = error
	}{
		{"github", "sha256=00ff", "sha256=", "hex", "00ff"},
		{"prefix case", "SHA256=00FF", "sha256=", "hex", "00ff"},
		{"missing prefix", "00ff", "sha256=", "hex", ""},
		// Same length as the prefix, so only comparing its bytes tells them apart.
		{"other prefix", "sha512=00ff", "sha256=", "hex", ""},
		{"prefix misspelt", "sha256:00ff", "sha256=", "hex", ""},
		{"prefix only", "sha256=", "sha256=", "hex", ""},
		{"odd hex", "0ff", "", "hex", ""},
		{"base64", "AP8=", "", "base64", "00ff"},
		{"base64 unpadded", "AP8", "", "base64", ""},
		{"base64 with newline", "AP8=\n", "", "base64", ""},
		{"unknown encoding", "00ff", "", "base32", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.DecodeSignature([]byte(tt.value), tt.prefix, tt.encoding)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("DecodeSignature(%q) = %x, want error", tt.value, got)
				}
				return
			}
			if err != nil || hex.EncodeToString(got) != tt.want {
				t.Fatalf("DecodeSignature(%q) = %x, %v, want %s", tt.value, got, err, tt.want)
			}
		})
	}
}

// FuzzParseStripeHeader's contract: ParseStripeHeader never panics; on
// success the timestamp is bytes of the input, every signature is 1 to 64
// bytes and together they are at most half the input (hex), and formatting
// the result back as "t=…,v1=…" parses to the same result.
func FuzzParseStripeHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, h []byte) {
		checkTimestamped(t, h, verify.ParseStripeHeader, ",", "t", "v1")
	})
}

// FuzzParsePaddleHeader's contract is FuzzParseStripeHeader's, for
// "ts=…;h1=…".
func FuzzParsePaddleHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, h []byte) {
		checkTimestamped(t, h, verify.ParsePaddleHeader, ";", "ts", "h1")
	})
}

func checkTimestamped(t *testing.T, h []byte, parse func([]byte) (verify.SignatureHeader, error), sep, tsKey, sigKey string) {
	t.Helper()
	got, err := parse(h)
	if err != nil {
		if got.Timestamp != nil || got.Signatures != nil || got.Unix != 0 {
			t.Fatalf("error %v with a non-zero result", err)
		}
		return
	}
	n, perr := strconv.ParseUint(string(got.Timestamp), 10, 63)
	if !bytes.Contains(h, got.Timestamp) || perr != nil || int64(n) != got.Unix {
		t.Fatalf("timestamp %q / %d does not come from %q", got.Timestamp, got.Unix, h)
	}
	total := 0
	parts := []string{tsKey + "=" + string(got.Timestamp)}
	for _, s := range got.Signatures {
		if len(s) < 1 || len(s) > 64 {
			t.Fatalf("signature of %d bytes", len(s))
		}
		total += len(s)
		parts = append(parts, sigKey+"="+hex.EncodeToString(s))
	}
	if 2*total > len(h) {
		t.Fatalf("%d signature bytes from a %d-byte header", total, len(h))
	}
	again, err := parse([]byte(strings.Join(parts, sep)))
	if err != nil || again.Unix != got.Unix || !slices.EqualFunc(again.Signatures, got.Signatures, bytes.Equal) {
		t.Fatalf("reformatted header parses to %+v, %v; want %+v", again, err, got)
	}
}

// FuzzParseStandardSignatures' contract: it never panics; on success every
// signature is 1 to 64 bytes, together at most the input's length, and
// formatting them back as "v1,<base64> …" parses to the same list.
func FuzzParseStandardSignatures(f *testing.F) {
	f.Fuzz(func(t *testing.T, h []byte) {
		got, err := verify.ParseStandardSignatures(h)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with signatures", err)
			}
			return
		}
		total := 0
		var parts []string
		for _, s := range got {
			if len(s) < 1 || len(s) > 64 {
				t.Fatalf("signature of %d bytes", len(s))
			}
			total += len(s)
			parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(s))
		}
		if total > len(h) {
			t.Fatalf("%d signature bytes from a %d-byte header", total, len(h))
		}
		again, err := verify.ParseStandardSignatures([]byte(strings.Join(parts, " ")))
		if err != nil || !slices.EqualFunc(again, got, bytes.Equal) {
			t.Fatalf("reformatted header parses to %x, %v; want %x", again, err, got)
		}
	})
}

// FuzzDecodeSignature's contract: it never panics; on success the result is
// 1 byte or more, never longer than the value, and encoding it back gives the
// value after its prefix (exactly for base64, which is strict: one spelling
// per signature; up to letter case for hex).
func FuzzDecodeSignature(f *testing.F) {
	f.Fuzz(func(t *testing.T, value []byte, prefix string, b64 bool) {
		enc := "hex"
		if b64 {
			enc = "base64"
		}
		got, err := verify.DecodeSignature(value, prefix, enc)
		if err != nil {
			return
		}
		if len(got) < 1 || len(got) > len(value) {
			t.Fatalf("%d bytes from a %d-byte value", len(got), len(value))
		}
		rest := string(value[len(prefix):])
		if b64 && base64.StdEncoding.EncodeToString(got) != rest {
			t.Fatalf("base64 %q decoded to %x, which encodes differently", rest, got)
		}
		if !b64 && !strings.EqualFold(hex.EncodeToString(got), rest) {
			t.Fatalf("hex %q decoded to %x", rest, got)
		}
	})
}

// FuzzAlipayCanonical's contract: AlipayCanonical never panics; on success
// the canonical form is no longer than the body, does not depend on the
// order of the body's parameters, ignores added sign, sign_type and
// empty-valued parameters, and (where it can be split unambiguously) lists
// non-empty values under strictly increasing names other than sign and
// sign_type.
func FuzzAlipayCanonical(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := verify.AlipayCanonical(body)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if len(got) > len(body) {
			t.Fatalf("canonical form of %d bytes from a %d-byte body", len(got), len(body))
		}
		segs := bytes.Split(body, []byte("&"))
		slices.Reverse(segs)
		if rev, err := verify.AlipayCanonical(bytes.Join(segs, []byte("&"))); err != nil || !bytes.Equal(rev, got) {
			t.Fatalf("reordered body gives %q, %v; want %q", rev, err, got)
		}
		q, _ := url.ParseQuery(string(body))
		if !q.Has("sign") && !q.Has("sign_type") && !q.Has("zz_empty") {
			more := append(bytes.Clone(body), "&sign=x&sign_type=RSA2&zz_empty="...)
			if m, err := verify.AlipayCanonical(more); err == nil && !bytes.Equal(m, got) {
				t.Fatalf("adding sign, sign_type and an empty value changed %q to %q", got, m)
			}
		}
		if len(got) == 0 || bytes.ContainsAny(body, "%+") {
			return // decoded names or values may contain & or =
		}
		prev := ""
		for _, pair := range strings.Split(string(got), "&") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || v == "" || k == "sign" || k == "sign_type" || k <= prev {
				t.Fatalf("canonical form %q: pair %q breaks the contract (previous name %q)", got, pair, prev)
			}
			prev = k
		}
	})
}

// fuzzRequest carries the same fuzzed values in every header any scheme
// reads, so one input exercises every verifier.
type fuzzRequest struct {
	sig, stamp, body []byte
}

func (r fuzzRequest) HeaderValues(name string) [][]byte {
	switch strings.ToLower(name) {
	case "webhook-signature", "stripe-signature", "x-hub-signature-256", "x-shopify-hmac-sha256",
		"x-slack-signature", "x-square-hmacsha256-signature", "paddle-signature", "x-razorpay-signature",
		"twitch-eventsub-message-signature", "wechatpay-signature", "x-signature",
		"x-signature-ed25519", "x-twilio-email-event-webhook-signature", "x-ed-signature", "x-ec-signature":
		return [][]byte{r.sig}
	case "webhook-timestamp", "x-slack-request-timestamp", "twitch-eventsub-message-timestamp", "wechatpay-timestamp",
		"x-signature-timestamp", "x-twilio-email-event-webhook-timestamp":
		return [][]byte{r.stamp}
	case "webhook-id", "twitch-eventsub-message-id", "wechatpay-nonce":
		return [][]byte{[]byte("msg_p5jXN8AQM9LWM0D4loKWxJek")}
	}
	return nil
}

func (r fuzzRequest) Body() []byte { return r.body }

// FuzzVerify's contract: no verifier panics on any signature, timestamp or
// body; each rejects the fuzzed (forged) request with an *Error wrapping
// ErrUnverified whose text never contains the secret; and each accepts the
// fuzzed body once the provider's reference signer (verifytest) has signed
// it, at a time within the tolerance picked from the fuzzed timestamp.
// Alipay signs its parameters, not a body, and FuzzAlipayCanonical covers
// its canonical form, so it takes part in the first two checks only.
func FuzzVerify(f *testing.F) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	var verifiers []verify.Verifier
	for _, s := range schemes {
		o := s.options(f, "old")
		switch {
		case s.name == verify.SchemeStandardWebhooks:
			o.Secrets = []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
		case o.Secrets != nil:
			o.Secrets = []string{secret}
		}
		verifiers = append(verifiers, newVerifier(f, o))
	}
	trusted := make([]verify.Verifier, len(schemes))
	for i, s := range schemes {
		trusted[i] = newVerifier(f, s.options(f, "old"))
	}
	f.Fuzz(func(t *testing.T, sig, stamp, body []byte) {
		r := fuzzRequest{sig: sig, stamp: stamp, body: body}
		for i, v := range verifiers {
			err := v.Verify(r)
			var ve *verify.Error
			if err == nil || !errors.Is(err, verify.ErrUnverified) || !errors.As(err, &ve) || strings.Contains(err.Error(), secret) {
				t.Fatalf("%s: Verify(forged) = %v (%T)", schemes[i].name, err, err)
			}
		}
		at := now.Add(fuzzOffset(stamp))
		for i, s := range schemes {
			signed, ok := signBody(t, s.name, body, at)
			if !ok {
				continue
			}
			if err := trusted[i].Verify(signed); err != nil {
				t.Fatalf("%s: Verify(body %q signed at now%+v) = %v", s.name, body, at.Sub(now), err)
			}
		}
	})
}

// fuzzOffset maps b to an offset from now strictly inside the tolerance
// (a second of margin, since most schemes sign whole seconds), nanoseconds
// included.
func fuzzOffset(b []byte) time.Duration {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	span := 2 * (tolerance - time.Second)
	return time.Duration(h%uint64(span)) - span/2
}

// signBody signs body at t with the "old" key the way the provider named
// scheme does, through the independent signers of verifytest; false for
// Alipay, which signs parameters rather than a body.
func signBody(tb testing.TB, scheme string, body []byte, t time.Time) (verify.MapRequest, bool) {
	var h http.Header
	switch scheme {
	case verify.SchemeStandardWebhooks:
		h = must(verifytest.StandardWebhooks(whsec("old"), "msg_2x", body, t))(tb)
	case verify.SchemeStripe:
		h = verifytest.Stripe(secret("old"), body, t)
	case verify.SchemeGitHub:
		h = verifytest.GitHub(secret("old"), body)
	case verify.SchemeShopify:
		h = verifytest.Shopify(secret("old"), body)
	case verify.SchemeSlack:
		h = verifytest.Slack(secret("old"), body, t)
	case verify.SchemeSquare:
		h = verifytest.Square(secret("old"), squareURL, body)
	case verify.SchemePaddle:
		h = verifytest.Paddle(secret("old"), body, t)
	case verify.SchemeRazorpay:
		h = verifytest.Razorpay(secret("old"), body)
	case verify.SchemeTwitch:
		h = verifytest.Twitch(secret("old"), "befa7b53-d79d-478f-86b9-120f112b044e", body, t)
	case verify.SchemeWeChatPay:
		h = must(verifytest.WeChatPay(rsaKey(tb, "old"), "5157F09EFDC096DE15EBE81A47057A72", "fdasflkja484w", body, t))(tb)
	case verify.SchemeHMAC:
		h = must(verifytest.HMAC("X-Lemon-Signature", "sha512", "base64", "sha512=", secret("old"), body))(tb)
	case verify.SchemeDiscord, verify.SchemeSendGrid, verify.SchemeEd25519, verify.SchemeECDSA:
		return signAsymmetric(tb, scheme, body, t), true
	case verify.SchemeAlipay:
		return verify.MapRequest{}, false
	default:
		tb.Fatalf("signBody: no signer for scheme %s", scheme)
	}
	return verify.MapRequest{Headers: h, Payload: body}, true
}
