package verify_test

import (
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// now is the verifiers' clock in these tests.
var now = time.Unix(1_750_000_000, 0)

func clock() time.Time { return now }

const tolerance = 5 * time.Minute

// body contains "1000" so that tamper can change the amount in every scheme's
// payload, JSON or form.
var body = []byte(`{"id":"evt_1","type":"invoice.paid","amount":1000}`)

var alipayParams = url.Values{
	"notify_id":       {"ac05099524730693a8b330c5ecf72da9786"},
	"notify_time":     {"2026-06-12 10:00:00"},
	"out_trade_no":    {"20260612001"},
	"trade_no":        {"2026061222001400000000000001"},
	"trade_status":    {"TRADE_SUCCESS"},
	"total_amount":    {"1000.00"},
	"subject":         {"测试 商品 & more=less"},
	"passback_params": {""},
}

// secret returns the HMAC secret called name ("old", "new", "wrong").
func secret(name string) string { return "secret-" + name + "-0123456789abcdef" }

// whsec returns the Standard Webhooks form of secret(name).
func whsec(name string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(secret(name)))
}

var (
	rsaOnce sync.Once
	rsaKeys map[string]*rsa.PrivateKey
	rsaErr  error
)

// rsaKey returns the RSA-2048 key pair called name, generated once per test
// binary.
func rsaKey(tb testing.TB, name string) *rsa.PrivateKey {
	tb.Helper()
	rsaOnce.Do(func() {
		rsaKeys = map[string]*rsa.PrivateKey{}
		for _, n := range []string{"old", "new", "wrong"} {
			if rsaKeys[n], rsaErr = verifytest.GenerateRSAKey(); rsaErr != nil {
				return
			}
		}
	})
	if rsaErr != nil {
		tb.Fatal(rsaErr)
	}
	return rsaKeys[name]
}

// publicKeys returns the verify.Options.PublicKey for key names: one key in
// Alipay's bare base64 form, several as concatenated PEM blocks.
func publicKeys(tb testing.TB, names ...string) string {
	tb.Helper()
	if len(names) == 1 {
		s, err := verifytest.PublicKeyBase64(&rsaKey(tb, names[0]).PublicKey)
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}
	var b strings.Builder
	for _, n := range names {
		s, err := verifytest.PublicKeyPEM(&rsaKey(tb, n).PublicKey)
		if err != nil {
			tb.Fatal(err)
		}
		b.WriteString(s)
	}
	return b.String()
}

func mapSecrets(names []string, f func(string) string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = f(n)
	}
	return out
}

// field reads and writes the place a scheme carries its signature.
type field interface {
	get(r verify.MapRequest) string
	// set replaces every value; no values removes the field.
	set(r *verify.MapRequest, values ...string)
}

type headerField string

func (h headerField) get(r verify.MapRequest) string { return r.Headers.Get(string(h)) }

func (h headerField) set(r *verify.MapRequest, values ...string) {
	r.Headers = r.Headers.Clone()
	r.Headers.Del(string(h))
	for _, v := range values {
		r.Headers.Add(string(h), v)
	}
}

type formField string

func (f formField) get(r verify.MapRequest) string {
	q, _ := url.ParseQuery(string(r.Payload))
	return q.Get(string(f))
}

func (f formField) set(r *verify.MapRequest, values ...string) {
	q, _ := url.ParseQuery(string(r.Payload))
	q.Del(string(f))
	for _, v := range values {
		q.Add(string(f), v)
	}
	r.Payload = []byte(q.Encode())
}

// scheme describes one built-in scheme to the table tests.
type scheme struct {
	name string
	// options returns verifier options trusting the named keys.
	options func(tb testing.TB, keys ...string) verify.Options
	// sign returns a request signed by the named key at t.
	sign func(tb testing.TB, key string, t time.Time) verify.MapRequest
	// sig is where the signature travels.
	sig field
	// stamp rewrites the signed timestamp to t without re-signing; nil for
	// schemes without a timestamp.
	stamp func(r *verify.MapRequest, t time.Time)
	// stampHeader is the header that carries the timestamp alone, if any.
	stampHeader string
}

func req(h http.Header, b []byte) verify.MapRequest { return verify.MapRequest{Headers: h, Payload: b} }

// must(f())(tb) is f's value, failing tb if f returned an error.
func must[T any](v T, err error) func(testing.TB) T {
	return func(tb testing.TB) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}

func stampHeader(name string, format func(time.Time) string) func(*verify.MapRequest, time.Time) {
	return func(r *verify.MapRequest, t time.Time) { headerField(name).set(r, format(t)) }
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// stampInside rewrites the timestamp that re (one group: the digits) finds in
// header name.
func stampInside(name string, re *regexp.Regexp) func(*verify.MapRequest, time.Time) {
	return func(r *verify.MapRequest, t time.Time) {
		v := r.Headers.Get(name)
		loc := re.FindStringSubmatchIndex(v)
		headerField(name).set(r, v[:loc[2]]+unix(t)+v[loc[3]:])
	}
}

func hmacOptions(name string, f func(string) string) func(testing.TB, ...string) verify.Options {
	return func(_ testing.TB, keys ...string) verify.Options {
		return verify.Options{Scheme: name, Secrets: mapSecrets(keys, f), Tolerance: tolerance, Now: clock}
	}
}

const squareURL = "https://example.com/webhooks/square"

// schemes are every built-in scheme: the shared-secret and RSA ones here,
// the Ed25519 and ECDSA ones in asymmetric_test.go.
var schemes = slices.Concat(secretAndRSASchemes, asymmetricSchemes)

var secretAndRSASchemes = []scheme{
	{
		name:    verify.SchemeStandardWebhooks,
		options: hmacOptions(verify.SchemeStandardWebhooks, whsec),
		sign: func(tb testing.TB, key string, t time.Time) verify.MapRequest {
			return req(must(verifytest.StandardWebhooks(whsec(key), "msg_2x", body, t))(tb), body)
		},
		sig:         headerField("webhook-signature"),
		stamp:       stampHeader("webhook-timestamp", unix),
		stampHeader: "webhook-timestamp",
	},
	{
		name:    verify.SchemeStripe,
		options: hmacOptions(verify.SchemeStripe, secret),
		sign: func(_ testing.TB, key string, t time.Time) verify.MapRequest {
			return req(verifytest.Stripe(secret(key), body, t), body)
		},
		sig:   headerField("Stripe-Signature"),
		stamp: stampInside("Stripe-Signature", regexp.MustCompile(`t=(\d+)`)),
	},
	{
		name:    verify.SchemeGitHub,
		options: hmacOptions(verify.SchemeGitHub, secret),
		sign: func(_ testing.TB, key string, _ time.Time) verify.MapRequest {
			return req(verifytest.GitHub(secret(key), body), body)
		},
		sig: headerField("X-Hub-Signature-256"),
	},
	{
		name:    verify.SchemeShopify,
		options: hmacOptions(verify.SchemeShopify, secret),
		sign: func(_ testing.TB, key string, _ time.Time) verify.MapRequest {
			return req(verifytest.Shopify(secret(key), body), body)
		},
		sig: headerField("X-Shopify-Hmac-Sha256"),
	},
	{
		name:    verify.SchemeSlack,
		options: hmacOptions(verify.SchemeSlack, secret),
		sign: func(_ testing.TB, key string, t time.Time) verify.MapRequest {
			return req(verifytest.Slack(secret(key), body, t), body)
		},
		sig:         headerField("X-Slack-Signature"),
		stamp:       stampHeader("X-Slack-Request-Timestamp", unix),
		stampHeader: "X-Slack-Request-Timestamp",
	},
	{
		name: verify.SchemeSquare,
		options: func(tb testing.TB, keys ...string) verify.Options {
			o := hmacOptions(verify.SchemeSquare, secret)(tb, keys...)
			o.URL = squareURL
			return o
		},
		sign: func(_ testing.TB, key string, _ time.Time) verify.MapRequest {
			return req(verifytest.Square(secret(key), squareURL, body), body)
		},
		sig: headerField("X-Square-Hmacsha256-Signature"),
	},
	{
		name:    verify.SchemePaddle,
		options: hmacOptions(verify.SchemePaddle, secret),
		sign: func(_ testing.TB, key string, t time.Time) verify.MapRequest {
			return req(verifytest.Paddle(secret(key), body, t), body)
		},
		sig:   headerField("Paddle-Signature"),
		stamp: stampInside("Paddle-Signature", regexp.MustCompile(`ts=(\d+)`)),
	},
	{
		name:    verify.SchemeRazorpay,
		options: hmacOptions(verify.SchemeRazorpay, secret),
		sign: func(_ testing.TB, key string, _ time.Time) verify.MapRequest {
			return req(verifytest.Razorpay(secret(key), body), body)
		},
		sig: headerField("X-Razorpay-Signature"),
	},
	{
		name:    verify.SchemeTwitch,
		options: hmacOptions(verify.SchemeTwitch, secret),
		sign: func(_ testing.TB, key string, t time.Time) verify.MapRequest {
			return req(verifytest.Twitch(secret(key), "befa7b53-d79d-478f-86b9-120f112b044e", body, t), body)
		},
		sig: headerField("Twitch-Eventsub-Message-Signature"),
		stamp: stampHeader("Twitch-Eventsub-Message-Timestamp", func(t time.Time) string {
			return t.UTC().Format(time.RFC3339Nano)
		}),
		stampHeader: "Twitch-Eventsub-Message-Timestamp",
	},
	{
		name: verify.SchemeAlipay,
		options: func(tb testing.TB, keys ...string) verify.Options {
			return verify.Options{Scheme: verify.SchemeAlipay, PublicKey: publicKeys(tb, keys...), Now: clock}
		},
		sign: func(tb testing.TB, key string, _ time.Time) verify.MapRequest {
			h := http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}
			return req(h, must(verifytest.Alipay(rsaKey(tb, key), alipayParams))(tb))
		},
		sig: formField("sign"),
	},
	{
		name: verify.SchemeWeChatPay,
		options: func(tb testing.TB, keys ...string) verify.Options {
			return verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: publicKeys(tb, keys...), Tolerance: tolerance, Now: clock}
		},
		sign: func(tb testing.TB, key string, t time.Time) verify.MapRequest {
			return req(must(verifytest.WeChatPay(rsaKey(tb, key), "5157F09EFDC096DE15EBE81A47057A72", "fdasflkja484w", body, t))(tb), body)
		},
		sig:         headerField("Wechatpay-Signature"),
		stamp:       stampHeader("Wechatpay-Timestamp", unix),
		stampHeader: "Wechatpay-Timestamp",
	},
	{
		name: verify.SchemeHMAC,
		options: func(tb testing.TB, keys ...string) verify.Options {
			o := hmacOptions(verify.SchemeHMAC, secret)(tb, keys...)
			o.Header, o.Algorithm, o.Encoding, o.Prefix = "X-Lemon-Signature", "sha512", "base64", "sha512="
			return o
		},
		sign: func(tb testing.TB, key string, _ time.Time) verify.MapRequest {
			return req(must(verifytest.HMAC("X-Lemon-Signature", "sha512", "base64", "sha512=", secret(key), body))(tb), body)
		},
		sig: headerField("X-Lemon-Signature"),
	},
}

func timedSchemes() []scheme {
	var out []scheme
	for _, s := range schemes {
		if s.stamp != nil {
			out = append(out, s)
		}
	}
	return out
}

func newVerifier(tb testing.TB, o verify.Options) verify.Verifier {
	tb.Helper()
	v, err := verify.New(o)
	if err != nil {
		tb.Fatalf("New(%s): %v", o.Scheme, err)
	}
	return v
}

// wantUnverified fails unless err is an *verify.Error wrapping
// ErrUnverified whose reason contains reason.
func wantUnverified(tb testing.TB, err error, reason string) {
	tb.Helper()
	var ve *verify.Error
	switch {
	case err == nil:
		tb.Fatalf("Verify accepted the request, want rejection %q", reason)
	case !errors.Is(err, verify.ErrUnverified) || !errors.As(err, &ve):
		tb.Fatalf("Verify = %v (%T), want an *Error wrapping ErrUnverified", err, err)
	case !strings.Contains(ve.Reason, reason):
		tb.Fatalf("Verify reason = %q, want it to contain %q", ve.Reason, reason)
	}
}

func TestSchemesCoverEveryBuiltIn(t *testing.T) {
	var names []string
	for _, s := range schemes {
		names = append(names, s.name)
	}
	// Scheme token signs no body, so the table's tampered-body case cannot
	// apply: token_test.go covers it.
	names = append(names, verify.SchemeToken)
	slices.Sort(names)
	if got, want := strings.Join(verify.Schemes(), ","), strings.Join(names, ","); got != want {
		t.Fatalf("Schemes() = %s\ntests cover %s", got, want)
	}
}

func TestVerifyAcceptsSignedRequests(t *testing.T) {
	for _, s := range schemes {
		t.Run(s.name, func(t *testing.T) {
			v := newVerifier(t, s.options(t, "old"))
			if err := v.Verify(s.sign(t, "old", now)); err != nil {
				t.Fatalf("Verify(signed now) = %v", err)
			}
		})
	}
}

func TestVerifyAcceptsTimestampsJustInsideTolerance(t *testing.T) {
	for _, s := range timedSchemes() {
		for _, at := range []time.Time{now.Add(-tolerance + time.Second), now.Add(tolerance - time.Second)} {
			t.Run(s.name+"/"+at.Sub(now).String(), func(t *testing.T) {
				v := newVerifier(t, s.options(t, "old"))
				if err := v.Verify(s.sign(t, "old", at)); err != nil {
					t.Fatalf("Verify = %v", err)
				}
			})
		}
	}
}

// mutation turns a correctly signed request into one that must be rejected.
type mutation struct {
	name   string
	mutate func(tb testing.TB, s scheme, r *verify.MapRequest)
	reason string
}

var mutations = []mutation{
	{"wrong secret", func(tb testing.TB, s scheme, r *verify.MapRequest) { *r = s.sign(tb, "wrong", now) }, "no signature matched"},
	{"tampered body", func(_ testing.TB, _ scheme, r *verify.MapRequest) {
		r.Payload = []byte(strings.Replace(string(r.Payload), "1000", "9000", 1))
	}, "no signature matched"},
	{"missing signature", func(_ testing.TB, s scheme, r *verify.MapRequest) { s.sig.set(r) }, "missing"},
	{"empty signature", func(_ testing.TB, s scheme, r *verify.MapRequest) { s.sig.set(r, "") }, "empty"},
	{"truncated signature", func(_ testing.TB, s scheme, r *verify.MapRequest) {
		v := s.sig.get(*r)
		s.sig.set(r, v[:len(v)/2])
	}, ""},
	{"signature cut by one character", func(_ testing.TB, s scheme, r *verify.MapRequest) {
		v := s.sig.get(*r)
		s.sig.set(r, v[:len(v)-1])
	}, ""},
	{"1 MB signature", func(_ testing.TB, s scheme, r *verify.MapRequest) {
		s.sig.set(r, s.sig.get(*r)+strings.Repeat("a", 1<<20))
	}, "too long"},
	{"duplicated signature", func(_ testing.TB, s scheme, r *verify.MapRequest) {
		v := s.sig.get(*r)
		s.sig.set(r, v, v)
	}, "duplicated"},
	{"valid signature duplicated with junk", func(_ testing.TB, s scheme, r *verify.MapRequest) {
		s.sig.set(r, "junk", s.sig.get(*r))
	}, "duplicated"},
}

func TestVerifyRejects(t *testing.T) {
	for _, s := range schemes {
		for _, m := range mutations {
			t.Run(s.name+"/"+m.name, func(t *testing.T) {
				v := newVerifier(t, s.options(t, "old"))
				r := s.sign(t, "old", now)
				sig := s.sig.get(r)
				m.mutate(t, s, &r)
				err := v.Verify(r)
				wantUnverified(t, err, m.reason)
				if msg := err.Error(); strings.Contains(msg, secret("old")) || strings.Contains(msg, sig) || len(msg) > 120 {
					t.Errorf("error %q echoes a secret or signature, or is not short", msg)
				}
			})
		}
	}
}

func TestVerifyRejectsBadTimestamps(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(tb testing.TB, s scheme) verify.MapRequest
		reason string
	}{
		{"tampered timestamp", func(tb testing.TB, s scheme) verify.MapRequest {
			r := s.sign(tb, "old", now)
			s.stamp(&r, now.Add(time.Second))
			return r
		}, "no signature matched"},
		{"expired", func(tb testing.TB, s scheme) verify.MapRequest {
			return s.sign(tb, "old", now.Add(-tolerance-time.Second))
		}, "timestamp outside tolerance"},
		{"future", func(tb testing.TB, s scheme) verify.MapRequest {
			return s.sign(tb, "old", now.Add(tolerance+time.Second))
		}, "timestamp outside tolerance"},
		{"a year old", func(tb testing.TB, s scheme) verify.MapRequest {
			return s.sign(tb, "old", now.AddDate(-1, 0, 0))
		}, "timestamp outside tolerance"},
		{"epoch", func(tb testing.TB, s scheme) verify.MapRequest {
			r := s.sign(tb, "old", now)
			s.stamp(&r, time.Unix(0, 0))
			return r
		}, "timestamp outside tolerance"},
	}
	for _, s := range timedSchemes() {
		for _, tt := range tests {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				v := newVerifier(t, s.options(t, "old"))
				wantUnverified(t, v.Verify(tt.mutate(t, s)), tt.reason)
			})
		}
	}
}

// Schemes whose timestamp travels in its own header: that header is held to
// the same rules as the signature header.
func TestVerifyRejectsBadTimestampHeaders(t *testing.T) {
	tests := []struct {
		name   string
		values func(good string) []string
		reason string
	}{
		{"missing", func(string) []string { return nil }, "missing"},
		{"empty", func(string) []string { return []string{""} }, "empty"},
		{"malformed", func(string) []string { return []string{"yesterday"} }, "malformed"},
		{"negative", func(string) []string { return []string{"-1"} }, "malformed"},
		{"duplicated", func(good string) []string { return []string{good, good} }, "duplicated"},
		{"duplicated with another time", func(good string) []string { return []string{good, "1"} }, "duplicated"},
		{"1 MB", func(good string) []string { return []string{good + strings.Repeat("0", 1<<20)} }, "too long"},
	}
	for _, s := range timedSchemes() {
		if s.stampHeader == "" {
			continue // Stripe and Paddle carry the timestamp inside the signature header.
		}
		for _, tt := range tests {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				v := newVerifier(t, s.options(t, "old"))
				r := s.sign(t, "old", now)
				headerField(s.stampHeader).set(&r, tt.values(r.Headers.Get(s.stampHeader))...)
				wantUnverified(t, v.Verify(r), tt.reason)
			})
		}
	}
}

func TestVerifyAcceptsEverySecretDuringRotation(t *testing.T) {
	for _, s := range schemes {
		t.Run(s.name, func(t *testing.T) {
			both := newVerifier(t, s.options(t, "old", "new"))
			for _, key := range []string{"old", "new"} {
				if err := both.Verify(s.sign(t, key, now)); err != nil {
					t.Errorf("verifier trusting old and new rejected a request signed by %s: %v", key, err)
				}
			}
			wantUnverified(t, both.Verify(s.sign(t, "wrong", now)), "no signature matched")
			onlyNew := newVerifier(t, s.options(t, "new"))
			wantUnverified(t, onlyNew.Verify(s.sign(t, "old", now)), "no signature matched")
		})
	}
}

// Stripe and Standard Webhooks rotate by putting several signatures in one
// header: any valid one passes, junk beside it does no harm.
func TestVerifyAcceptsSignatureLists(t *testing.T) {
	stripeOld := verifytest.Stripe(secret("old"), body, now).Get("Stripe-Signature")
	stripeNew := verifytest.Stripe(secret("new"), body, now).Get("Stripe-Signature")
	standard := must(verifytest.StandardWebhooks(whsec("new"), "msg_2x", body, now))(t)
	paddleNew := verifytest.Paddle(secret("new"), body, now).Get("Paddle-Signature")
	tests := []struct {
		scheme string
		secret string
		header http.Header
	}{
		{verify.SchemeStripe, secret("new"), http.Header{"Stripe-Signature": {stripeOld + ",v0=abcd,v1=zz," + strings.SplitN(stripeNew, ",", 2)[1]}}},
		{verify.SchemeStandardWebhooks, whsec("new"), http.Header{
			"Webhook-Id":        {"msg_2x"},
			"Webhook-Timestamp": {unix(now)},
			"Webhook-Signature": {"v1,Zm9v v1a,c2lnbmF0dXJl v2,abc " + standard.Get("webhook-signature")},
		}},
		{verify.SchemePaddle, secret("new"), http.Header{"Paddle-Signature": {"ts=" + unix(now) + ";h1=00ff;" + strings.SplitN(paddleNew, ";", 2)[1]}}},
	}
	for _, tt := range tests {
		t.Run(tt.scheme, func(t *testing.T) {
			v := newVerifier(t, verify.Options{Scheme: tt.scheme, Secrets: []string{tt.secret}, Now: clock})
			if err := v.Verify(req(tt.header, body)); err != nil {
				t.Fatalf("Verify = %v", err)
			}
		})
	}
}

func TestOfficialVectors(t *testing.T) {
	slackBody := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	squareBody := `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`
	at := func(sec int64) func() time.Time { return func() time.Time { return time.Unix(sec, 0) } }
	tests := []struct {
		name    string
		options verify.Options
		header  http.Header
		body    string
	}{
		{"github", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"It's a Secret to Everybody"}},
			http.Header{"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}},
			"Hello, World!"},
		{"standard-webhooks", verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Now: at(1614265330)},
			http.Header{
				"webhook-id":        {"msg_p5jXN8AQM9LWM0D4loKWxJek"},
				"webhook-timestamp": {"1614265330"},
				"webhook-signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
			},
			`{"test": 2432232314}`},
		{"slack", verify.Options{Scheme: verify.SchemeSlack, Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}, Now: at(1531420618)},
			http.Header{
				"X-Slack-Request-Timestamp": {"1531420618"},
				"X-Slack-Signature":         {"v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"},
			},
			slackBody},
		{"square", verify.Options{Scheme: verify.SchemeSquare, Secrets: []string{"Ibxx_5AKakO-3qeNVR61Dw"}, URL: "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"},
			http.Header{"x-square-hmacsha256-signature": {"GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="}},
			squareBody},
		// sendgrid-go, helpers/eventwebhook/eventwebhook_test.go: its
		// testPublicKey, timestamp and signature over the JSON its
		// generateTestPayload marshals (keys sorted).
		{"sendgrid", verify.Options{Scheme: verify.SchemeSendGrid, Now: at(1588788367),
			PublicKey: "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="},
			http.Header{
				"X-Twilio-Email-Event-Webhook-Timestamp": {"1588788367"},
				"X-Twilio-Email-Event-Webhook-Signature": {"MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0="},
			},
			`{"category":"example_payload","event":"test_event","message_id":"message_id"}`},
		// The Standard Webhooks vector under the svix-* names Clerk and
		// Resend send: the signed content does not depend on them.
		{"standard-webhooks under svix-* headers", verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Now: at(1614265330)},
			http.Header{
				"svix-id":        {"msg_p5jXN8AQM9LWM0D4loKWxJek"},
				"svix-timestamp": {"1614265330"},
				"svix-signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
			},
			`{"test": 2432232314}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(t, tt.options)
			if err := v.Verify(req(tt.header, []byte(tt.body))); err != nil {
				t.Fatalf("official vector rejected: %v", err)
			}
			wantUnverified(t, v.Verify(req(tt.header, []byte(tt.body+" "))), "no signature matched")
		})
	}
}

func TestDefaultTolerances(t *testing.T) {
	tests := []struct {
		name   string
		scheme scheme
		age    time.Duration
		ok     bool
	}{
		{"stripe 4m59s old", schemes[1], 4*time.Minute + 59*time.Second, true},
		{"stripe 5m01s old", schemes[1], 5*time.Minute + time.Second, false},
		{"twitch 9m59s old", schemes[8], 9*time.Minute + 59*time.Second, true},
		{"twitch 10m01s old", schemes[8], 10*time.Minute + time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.scheme.options(t, "old")
			o.Tolerance = 0
			err := newVerifier(t, o).Verify(tt.scheme.sign(t, "old", now.Add(-tt.age)))
			if gotOK := err == nil; gotOK != tt.ok {
				t.Fatalf("Verify = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestGenericHMACVariants(t *testing.T) {
	tests := []struct {
		algorithm, encoding, prefix string
	}{
		{"sha1", "hex", ""},
		{"sha256", "hex", "sha256="},
		{"sha256", "base64", ""},
		{"sha512", "hex", "v1="},
		{"sha512", "base64", "sha512="},
	}
	for _, tt := range tests {
		t.Run(tt.algorithm+"/"+tt.encoding+"/"+tt.prefix, func(t *testing.T) {
			v := newVerifier(t, verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"s3cret"},
				Header: "X-Signature", Algorithm: tt.algorithm, Encoding: tt.encoding, Prefix: tt.prefix})
			h := must(verifytest.HMAC("X-Signature", tt.algorithm, tt.encoding, tt.prefix, "s3cret", body))(t)
			if err := v.Verify(req(h, body)); err != nil {
				t.Fatalf("Verify = %v", err)
			}
			wrong := must(verifytest.HMAC("X-Signature", tt.algorithm, tt.encoding, tt.prefix, "other", body))(t)
			wantUnverified(t, v.Verify(req(wrong, body)), "no signature matched")
		})
	}
}

// Header names are matched case-insensitively: HTTP/2 lowercases them.
func TestVerifyMatchesHeaderNamesCaseInsensitively(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{secret("old")}})
	sig := verifytest.GitHub(secret("old"), body).Get("X-Hub-Signature-256")
	for _, name := range []string{"x-hub-signature-256", "X-HUB-SIGNATURE-256", "X-Hub-Signature-256"} {
		if err := v.Verify(req(http.Header{name: {sig}}, body)); err != nil {
			t.Errorf("header %q: Verify = %v", name, err)
		}
	}
}

// A header value is trimmed of surrounding spaces and tabs before it is
// decoded, and the cap counts the value as received: MaxHeaderLen bytes pass
// the length check, one more is "too long".
func TestVerifyTrimsHeaderAndCapsItAtMaxHeaderLen(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{secret("old")}})
	sig := verifytest.GitHub(secret("old"), body).Get("X-Hub-Signature-256")
	for _, h := range []string{" " + sig, sig + " \t", "\t" + sig + "\t"} {
		if err := v.Verify(req(http.Header{"X-Hub-Signature-256": {h}}, body)); err != nil {
			t.Errorf("header %q: Verify = %v", h, err)
		}
	}
	atCap := sig + strings.Repeat(" ", verify.MaxHeaderLen-len(sig))
	if err := v.Verify(req(http.Header{"X-Hub-Signature-256": {atCap}}, body)); err != nil {
		t.Errorf("header of MaxHeaderLen bytes: Verify = %v", err)
	}
	wantUnverified(t, v.Verify(req(http.Header{"X-Hub-Signature-256": {atCap + " "}}, body)), "too long")
}

// bytesRequest serves prepared byte slices, so that measuring Verify does not
// measure a conversion from strings.
type bytesRequest map[string][][]byte

func (b bytesRequest) HeaderValues(name string) [][]byte { return b[name] }
func (b bytesRequest) Body() []byte                      { return body }

// A 1 MB signature header is rejected without being parsed or copied.
func TestOversizedHeaderIsRejectedCheaply(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{secret("old")}, Now: clock})
	huge := []byte("t=" + unix(now) + ",v1=" + strings.Repeat("ab", 1<<19))
	r := bytesRequest{"Stripe-Signature": {huge}}
	wantUnverified(t, v.Verify(r), "too long")
	allocs := testing.AllocsPerRun(100, func() { _ = v.Verify(r) })
	if allocs > 4 {
		t.Errorf("rejecting a 1 MB header made %.0f allocations, want at most 4", allocs)
	}
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = v.Verify(r)
		}
	})
	if per := res.AllocedBytesPerOp(); per > 512 {
		t.Errorf("rejecting a 1 MB header allocated %d bytes, want at most 512", per)
	}
}

// A Request with no headers at all, a nil body, and headers present with no
// value must all be rejected without a panic.
func TestVerifyHandlesEmptyRequests(t *testing.T) {
	for _, s := range schemes {
		t.Run(s.name, func(t *testing.T) {
			v := newVerifier(t, s.options(t, "old"))
			wantUnverified(t, v.Verify(verify.MapRequest{}), "")
			wantUnverified(t, v.Verify(bytesRequest{}), "")
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		o    verify.Options
		want string
	}{
		{"no scheme", verify.Options{}, "scheme: required"},
		{"unknown scheme", verify.Options{Scheme: "stripey", Secrets: []string{"x"}}, `scheme: unknown "stripey"`},
		{"no secrets", verify.Options{Scheme: verify.SchemeStripe}, "secrets: at least one"},
		{"empty secret", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"a", ""}}, "secrets[1]: empty"},
		{"standard secret not base64", verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{"whsec_not*base64"}}, "secrets[0]: standard-webhooks secret is not base64"},
		{"negative tolerance", verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{"x"}, Tolerance: -time.Second}, "tolerance: must not be negative"},
		{"square without url", verify.Options{Scheme: verify.SchemeSquare, Secrets: []string{"x"}}, "url: required"},
		{"square relative url", verify.Options{Scheme: verify.SchemeSquare, Secrets: []string{"x"}, URL: "/webhooks/square"}, "url: want an absolute"},
		{"url on stripe", verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{"x"}, URL: "https://example.com"}, "url: only used by schemes square, hmac"},
		{"public key on github", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"x"}, PublicKey: "k"}, "public_key: not used"},
		{"secrets on alipay", verify.Options{Scheme: verify.SchemeAlipay, Secrets: []string{"x"}}, "secrets: not used"},
		{"alipay without key", verify.Options{Scheme: verify.SchemeAlipay}, "public_key: required"},
		{"wechatpay garbage key", verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: "not a key!"}, "public_key: neither PEM nor base64 DER"},
		{"wechatpay base64 that is not a key", verify.Options{Scheme: verify.SchemeWeChatPay, PublicKey: "aGVsbG8="}, "public_key: not a PKIX or PKCS #1 public key"},
		{"pem trailing garbage", verify.Options{Scheme: verify.SchemeAlipay, PublicKey: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\ntrailing"}, "public_key: PEM block 1"},
		{"truncated pem", verify.Options{Scheme: verify.SchemeAlipay, PublicKey: "-----BEGIN PUBLIC KEY-----\nAAAA"}, "public_key: unparseable data"},
		{"hmac bad algorithm", verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"x"}, Algorithm: "md5"}, `algorithm: "md5" is not one of`},
		{"hmac bad encoding", verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"x"}, Encoding: "base32"}, `encoding: "base32" is not one of`},
		{"hmac bad header", verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"x"}, Header: "X Sig"}, `header: "X Sig" is not a valid header name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify.New(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// Errors from New name the option, never its secret value.
func TestNewNeverEchoesSecrets(t *testing.T) {
	const secretValue = "whsec_top*secret*value"
	_, err := verify.New(verify.Options{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{secretValue}})
	if err == nil || strings.Contains(err.Error(), "top*secret") {
		t.Fatalf("New = %v, want an error that does not quote the secret", err)
	}
}

func TestNewDefaultsForGenericHMAC(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"s"}})
	h := must(verifytest.HMAC("X-Signature", "sha256", "hex", "", "s", body))(t)
	if err := v.Verify(req(h, body)); err != nil {
		t.Fatalf("defaults (X-Signature, sha256, hex, no prefix) rejected their own signature: %v", err)
	}
}
