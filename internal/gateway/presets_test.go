package gateway

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// providers holds the secrets and RSA key pairs one preset test signs
// with, and the environment the configuration reads them from.
type providers struct {
	alipayKey, wechatKey *rsa.PrivateKey
	publicKey            *publicKeyProviders
	environ              []string
}

// Secrets as the providers hand them out. The Standard Webhooks secret and
// the Square key and URL are those of PROVIDERS.md's official vectors.
const (
	stripeSecret   = "whsec_test_5f4dcc3b5aa765d61d8327deb882cf99"
	githubSecret   = "It's a Secret to Everybody"
	shopifySecret  = "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"
	slackSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	swhSecret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	squareKey      = "Ibxx_5AKakO-3qeNVR61Dw"
	squareURL      = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
	paddleSecret   = "pdl_ntfset_01h8bzam1z32agrxjwhjgqk8w6_Ux7mZ1qL0t9"
	razorpaySecret = "rzp_whsec_Jk3lM9nB2vC8xZ1q"
	twitchSecret   = "s3cre7-tw1tch-eventsub-secret"
	adyenHMACKey   = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
)

func newProviders(tb testing.TB) *providers {
	tb.Helper()
	p := &providers{}
	var err error
	if p.alipayKey, err = verifytest.GenerateRSAKey(); err != nil {
		tb.Fatal(err)
	}
	if p.wechatKey, err = verifytest.GenerateRSAKey(); err != nil {
		tb.Fatal(err)
	}
	// Alipay's console hands out bare base64; WeChat Pay a PEM certificate
	// or key. Both forms go through ${ENV}.
	alipayPub, err := verifytest.PublicKeyBase64(&p.alipayKey.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	wechatPub, err := verifytest.PublicKeyPEM(&p.wechatKey.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	p.environ = []string{
		"STRIPE_WEBHOOK_SECRET=" + stripeSecret,
		"GITHUB_WEBHOOK_SECRET=" + githubSecret,
		"SHOPIFY_API_SECRET=" + shopifySecret,
		"SLACK_SIGNING_SECRET=" + slackSecret,
		"SVIX_SECRET=" + swhSecret,
		"SQUARE_SIGNATURE_KEY=" + squareKey,
		"PADDLE_WEBHOOK_SECRET=" + paddleSecret,
		"RAZORPAY_WEBHOOK_SECRET=" + razorpaySecret,
		"TWITCH_EVENTSUB_SECRET=" + twitchSecret,
		"ALIPAY_PUBLIC_KEY=" + alipayPub,
		"WECHATPAY_PLATFORM_KEY=" + wechatPub,
	}
	p.environ = append(p.environ, waveTwoEnv...)
	p.publicKey = newPublicKeyProviders(tb)
	p.environ = append(p.environ, p.publicKey.environ...)
	return p
}

// presetCase is one preset with a delivery in its provider's format.
type presetCase struct {
	preset string
	// verify is the route's verify section body (indented six spaces).
	verify string
	// key is the idempotency key the preset must extract.
	key string
	// window is the provider's retry window: the retention must cover it.
	window time.Duration
	// deliver returns attempt n (1 = first, 2 = the provider's resend) as
	// the provider sends it: body and headers, signed at now.
	deliver func(tb testing.TB, n int, now time.Time) ([]byte, http.Header)
}

const day = 24 * time.Hour

func presetCases(p *providers) []presetCase {
	return []presetCase{
		{
			preset: "standard-webhooks",
			verify: `secrets: ["${SVIX_SECRET}"]`,
			key:    "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
			window: 27 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"type":"invoice.paid","timestamp":"2024-05-02T12:00:00Z","data":{"invoice_id":"inv_8f2a","amount":4200,"currency":"EUR"}}`)
				h, err := verifytest.StandardWebhooks(swhSecret, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", body, now)
				if err != nil {
					tb.Fatal(err)
				}
				return body, h
			},
		},
		{
			preset: "stripe",
			verify: `secrets: ["${STRIPE_WEBHOOK_SECRET}"]`,
			key:    "evt_1PqRsT2eZvKYlo2C8d7XyZab",
			window: 3 * day,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"id":"evt_1PqRsT2eZvKYlo2C8d7XyZab","object":"event","api_version":"2024-06-20","created":1718000000,` +
					`"data":{"object":{"id":"pi_3PqRsT2eZvKYlo2C1abcDEF2","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded"}},` +
					`"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`)
				// A resend is the same event, signed again at its own time.
				return body, merged(verifytest.Stripe(stripeSecret, body, now), headers("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)"))
			},
		},
		{
			preset: "github",
			verify: `secrets: ["${GITHUB_WEBHOOK_SECRET}"]`,
			key:    "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			window: 3 * day,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"0000000000000000000000000000000000000000",` +
					`"repository":{"id":1296269,"full_name":"octocat/Hello-World","private":false},"pusher":{"name":"octocat","email":"octocat@github.com"}}`)
				return body, merged(verifytest.GitHub(githubSecret, body), headers(
					"X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
					"X-GitHub-Event", "push",
					"X-GitHub-Hook-ID", "292430182",
					"User-Agent", "GitHub-Hookshot/044aadd"))
			},
		},
		{
			preset: "shopify",
			verify: `secrets: ["${SHOPIFY_API_SECRET}"]`,
			key:    "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
			window: 4 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"id":820982911946154508,"email":"jon@example.com","created_at":"2024-05-02T12:00:00-04:00","total_price":"403.00","currency":"USD","financial_status":"paid"}`)
				return body, merged(verifytest.Shopify(shopifySecret, body), headers(
					"X-Shopify-Topic", "orders/create",
					"X-Shopify-Shop-Domain", "example.myshopify.com",
					"X-Shopify-API-Version", "2024-04",
					"X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
					"X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5",
					"X-Shopify-Triggered-At", "2024-05-02T16:00:00.000000Z"))
			},
		},
		{
			preset: "slack",
			verify: `secrets: ["${SLACK_SIGNING_SECRET}"]`,
			key:    "Ev0PV52K25",
			window: time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"token":"XXYYZZ","team_id":"T0001","api_app_id":"A0PNCHHK2","type":"event_callback","event_id":"Ev0PV52K25","event_time":1515449522,` +
					`"event":{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89> is it everything a river should be?","ts":"1515449522.000016","channel":"C0LAN2Q65","event_ts":"1515449522000016"}}`)
				h := verifytest.Slack(slackSecret, body, now)
				if n > 1 {
					h.Set("X-Slack-Retry-Num", fmt.Sprint(n-1))
					h.Set("X-Slack-Retry-Reason", "http_timeout")
				}
				return body, h
			},
		},
		{
			preset: "alipay",
			verify: `public_key: "${ALIPAY_PUBLIC_KEY}"`,
			key:    "ac05099524730693a8b330c5ecf72da9786",
			window: 25 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				// Every resend carries a new notify_time, hence a new sign.
				body := alipayNotify(tb, p.alipayKey, now.Add(time.Duration(n)*4*time.Minute), "20.00")
				return body, headers("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			},
		},
		{
			preset: "wechatpay",
			verify: `public_key: "${WECHATPAY_PLATFORM_KEY}"`,
			key:    "EV-2018022511223320873",
			window: 24 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"id":"EV-2018022511223320873","create_time":"2015-05-20T13:29:35+08:00","resource_type":"encrypt-resource",` +
					`"event_type":"TRANSACTION.SUCCESS","summary":"支付成功","resource":{"original_type":"transaction","algorithm":"AEAD_AES_256_GCM",` +
					`"ciphertext":"q5TRlShqx3pN0m0ZsF1nDrxBf3HrSqZp","associated_data":"transaction","nonce":"fdasflkja484w"}}`)
				h, err := verifytest.WeChatPay(p.wechatKey, "5157F09EFDC096DE15EBE81A47057A72", fmt.Sprintf("nonce%dx%d", n, now.UnixNano()), body, now)
				if err != nil {
					tb.Fatal(err)
				}
				return body, h
			},
		},
		{
			preset: "paypal",
			key:    "WH-2WR32451HC0233532-67976317FL4543714",
			window: 3 * day,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"id":"WH-2WR32451HC0233532-67976317FL4543714","event_version":"1.0","create_time":"2014-10-23T17:23:52Z",` +
					`"resource_type":"sale","event_type":"PAYMENT.SALE.COMPLETED","summary":"A successful sale payment was made for $ 0.48 USD",` +
					`"resource":{"id":"80021663DE681814L","state":"completed","amount":{"total":"0.48","currency":"USD"},"parent_payment":"PAY-1PA12106FU478450MKRETS4A"}}`)
				// PayPal's certificate signature is verified upstream; each
				// transmission has its own id.
				return body, headers(
					"Paypal-Transmission-Id", fmt.Sprintf("103e3700-8b0c-11e7-8cc9-%012d", n),
					"Paypal-Transmission-Time", now.UTC().Format(time.RFC3339),
					"Paypal-Transmission-Sig", "Z6vr4lUy0vb8KVP7ZWf0eHkYtq9TjNP0Jr5l0gcbgXuMj0Sh==",
					"Paypal-Cert-Url", "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77",
					"Paypal-Auth-Algo", "SHA256withRSA")
			},
		},
		{
			preset: "square",
			verify: "secrets: [\"${SQUARE_SIGNATURE_KEY}\"]\n      url: " + squareURL,
			key:    "ac3ac95b-f97d-458c-a6e6-18981597e05f",
			window: 24 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				// PROVIDERS.md's official vector, byte for byte.
				body := []byte(`{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`)
				h := verifytest.Square(squareKey, squareURL, body)
				if got := h.Get("X-Square-Hmacsha256-Signature"); got != "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=" {
					tb.Fatalf("square signer disagrees with the official vector: %s", got)
				}
				return body, h
			},
		},
		{
			preset: "paddle",
			verify: `secrets: ["${PADDLE_WEBHOOK_SECRET}"]`,
			key:    "evt_01h8bzakzx3hm2fmen703n5q45",
			window: 3 * day,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"event_id":"evt_01h8bzakzx3hm2fmen703n5q45","event_type":"transaction.completed","occurred_at":"2023-08-21T11:57:50.413512Z",` +
					`"notification_id":"ntf_01h8bzam1z32agrxjwhjgqk8w6","data":{"id":"txn_01h8bz9wkp6q7b2ju8b8y5ngvw","status":"completed","currency_code":"USD"}}`)
				return body, verifytest.Paddle(paddleSecret, body, now)
			},
		},
		{
			preset: "razorpay",
			verify: `secrets: ["${RAZORPAY_WEBHOOK_SECRET}"]`,
			key:    "EaCDm8rQy1x3sM",
			window: 24 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],` +
					`"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":100,"currency":"INR","status":"captured"}}},"created_at":1567674606}`)
				return body, merged(verifytest.Razorpay(razorpaySecret, body), headers("X-Razorpay-Event-Id", "EaCDm8rQy1x3sM"))
			},
		},
		{
			preset: "twitch",
			verify: `secrets: ["${TWITCH_EVENTSUB_SECRET}"]`,
			key:    "befa7b53-d79d-478f-86b9-120f112b044e",
			window: time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := []byte(`{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2","status":"enabled","cost":0,` +
					`"condition":{"broadcaster_user_id":"1337","moderator_user_id":"1337"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},` +
					`"created_at":"2019-11-16T10:11:12.634234626Z"},"event":{"user_id":"1234","user_login":"cool_user","user_name":"Cool_User",` +
					`"broadcaster_user_id":"1337","broadcaster_user_login":"cooler_user","broadcaster_user_name":"Cooler_User","followed_at":"2020-07-15T18:16:11.17106713Z"}}`)
				return body, merged(verifytest.Twitch(twitchSecret, "befa7b53-d79d-478f-86b9-120f112b044e", body, now), headers(
					"Twitch-Eventsub-Message-Type", "notification",
					"Twitch-Eventsub-Message-Retry", fmt.Sprint(n-1),
					"Twitch-Eventsub-Subscription-Type", "channel.follow",
					"Twitch-Eventsub-Subscription-Version", "2"))
			},
		},
		{
			preset: "adyen",
			verify: `secrets: ["${ADYEN_HMAC_KEY}"]`,
			key:    "QFQTPCQ8HXSKGK82:AUTHORISATION:true",
			window: 30 * day,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				sig, err := verifytest.AdyenHMAC(adyenHMACKey, "QFQTPCQ8HXSKGK82::YOUR_MERCHANT_ACCOUNT:YOUR_REFERENCE:1000:EUR:AUTHORISATION:true")
				if err != nil {
					tb.Fatal(err)
				}
				body := []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + sig + `"},` +
					`"amount":{"currency":"EUR","value":1000},"eventCode":"AUTHORISATION","eventDate":"2024-05-02T12:00:00+02:00",` +
					`"merchantAccountCode":"YOUR_MERCHANT_ACCOUNT","merchantReference":"YOUR_REFERENCE","paymentMethod":"visa",` +
					`"pspReference":"QFQTPCQ8HXSKGK82","reason":"033899:1111:03/2030","success":"true"}}]}`)
				return body, headers("User-Agent", "Adyen HttpClient 1.0")
			},
		},
	}
}

// alipayNotify is an Alipay trade notification signed with key, sent at
// notifyTime, for an order of totalAmount.
func alipayNotify(tb testing.TB, key *rsa.PrivateKey, notifyTime time.Time, totalAmount string) []byte {
	tb.Helper()
	cst := time.FixedZone("CST", 8*3600)
	params := url.Values{
		"gmt_create":       {"2024-05-02 20:00:01"},
		"charset":          {"utf-8"},
		"seller_email":     {"merchant@example.com"},
		"subject":          {"订单 20240502001"},
		"buyer_id":         {"2088102177846875"},
		"invoice_amount":   {totalAmount},
		"notify_id":        {"ac05099524730693a8b330c5ecf72da9786"},
		"fund_bill_list":   {`[{"amount":"` + totalAmount + `","fundChannel":"ALIPAYACCOUNT"}]`},
		"notify_type":      {"trade_status_sync"},
		"trade_status":     {"TRADE_SUCCESS"},
		"receipt_amount":   {totalAmount},
		"app_id":           {"2014072300007148"},
		"buyer_pay_amount": {totalAmount},
		"seller_id":        {"2088102146225135"},
		"gmt_payment":      {"2024-05-02 20:00:05"},
		"notify_time":      {notifyTime.In(cst).Format("2006-01-02 15:04:05")},
		"version":          {"1.0"},
		"out_trade_no":     {"20240502001"},
		"total_amount":     {totalAmount},
		"trade_no":         {"2024050222001446870501234567"},
		"auth_app_id":      {"2014072300007148"},
		"buyer_logon_id":   {"csq***@sandbox.com"},
		"point_amount":     {"0.00"},
	}
	body, err := verifytest.Alipay(key, params)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// providerReply answers as each provider's consumer would: Alipay wants
// "success", Adyen "[accepted]", the others a JSON receipt. Every answer is
// unique (it carries a sequence number), so a replay that was not
// recorded cannot pass for one.
func providerReply(w http.ResponseWriter, r *http.Request, n int) {
	seq := time.Now().UnixNano()
	w.Header().Set("X-Receipt", fmt.Sprint(seq))
	switch {
	case strings.HasSuffix(r.URL.Path, "/alipay"):
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "success")
	case strings.HasSuffix(r.URL.Path, "/adyen"):
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "[accepted]")
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":true,"key":%q,"n":%d,"seq":%d}`, r.Header.Get("Idempotency-Key"), n, seq)
	}
}

// presetRoutes is one route per case at /webhooks/{preset}, configured
// with nothing but the preset, the upstream and the secrets.
func presetRoutes(upstreamURL string, cases []presetCase) string {
	var b strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&b, "  - name: %s\n    path: /webhooks/%s\n    preset: %s\n    upstream:\n      url: %s/%s\n",
			c.preset, c.preset, c.preset, upstreamURL, c.preset)
		if c.verify != "" {
			fmt.Fprintf(&b, "    verify:\n      %s\n", c.verify)
		}
	}
	return b.String()
}

// Every preset, end to end through the gateway with its provider's
// payload and signature: the first delivery is forwarded and recorded with
// the preset's retention, the provider's resend is replayed byte for byte.
func TestPresetsEndToEnd(t *testing.T) {
	p := newProviders(t)
	cases := slices.Concat(presetCases(p), waveTwoCases(), publicKeyPresetCases(p.publicKey))
	if got, want := len(cases), len(config.Presets()); got != want {
		t.Fatalf("%d preset cases for %d presets: every preset needs one", got, want)
	}
	up := newUpstream(t)
	up.setReply(providerReply)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, cases), p.environ))

	for _, c := range cases {
		t.Run(c.preset, func(t *testing.T) {
			preset, ok := config.LookupPreset(c.preset)
			if !ok {
				t.Fatalf("no preset %q", c.preset)
			}
			path := "/webhooks/" + c.preset
			sent := time.Now()
			body, hdr := c.deliver(t, 1, sent)
			first := post(t, g, path, body, hdr)
			wantOutcome(t, first, 200, "forwarded")

			body2, hdr2 := c.deliver(t, 2, time.Now())
			again := post(t, g, path, body2, hdr2)
			wantOutcome(t, again, 200, "replayed")
			sameReply(t, first, again)
			if again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("resend lacks Idempotent-Replayed: true")
			}
			if n := up.count(c.key); n != 1 {
				t.Fatalf("upstream received key %q %d times, want 1 (keys seen: %v)", c.key, n, up.keys())
			}

			rec := lookup(t, g, c.preset, c.key)
			// docs/presets.md: the retention covers the whole retry window
			// "with at least a day to spare" (a row that expires as the last
			// retry arrives lets that retry through).
			if preset.Retention < c.window+day {
				t.Fatalf("retention %v does not cover the provider's retry window %v with a day to spare", preset.Retention, c.window)
			}
			want := sent.Add(preset.Retention)
			if d := rec.ExpiresAt.Sub(want); d < -time.Minute || d > time.Minute {
				t.Fatalf("expires_at %v, want ≈ now + %v (%v)", rec.ExpiresAt, preset.Retention, want)
			}
		})
	}

	t.Run("alipay resend with changed business fields is a mismatch", func(t *testing.T) {
		// Validly signed, same notify_id, another amount: key reuse, not a
		// resend. The fingerprint fields are what tell the two apart.
		body := alipayNotify(t, p.alipayKey, time.Now().Add(time.Hour), "2000.00")
		r := post(t, g, "/webhooks/alipay", body, headers("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"))
		wantProblem(t, r, 422, "mismatch")
		if n := up.count("ac05099524730693a8b330c5ecf72da9786"); n != 1 {
			t.Fatalf("upstream received %d, want 1", n)
		}
	})

	t.Run("twitch allows Twitch's own 10 minute limit", func(t *testing.T) {
		body := []byte(`{"subscription":{"type":"channel.follow"},"event":{"user_id":"1234"}}`)
		old := verifytest.Twitch(twitchSecret, "twitch-7-minutes-old", body, time.Now().Add(-7*time.Minute))
		wantOutcome(t, post(t, g, "/webhooks/twitch", body, old), 200, "forwarded")
		stale := verifytest.Twitch(twitchSecret, "twitch-11-minutes-old", body, time.Now().Add(-11*time.Minute))
		wantProblem(t, post(t, g, "/webhooks/twitch", body, stale), 401, "unverified")
	})

	t.Run("slack url_verification has no event_id and passes through", func(t *testing.T) {
		// Slack will not save a Request URL until this challenge is
		// answered; it is signed like every other request.
		body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
		before := up.total.Load()
		for i := 0; i < 2; i++ {
			wantOutcome(t, post(t, g, "/webhooks/slack", body, verifytest.Slack(slackSecret, body, time.Now())), 200, "passthrough")
		}
		if got := up.total.Load() - before; got != 2 {
			t.Fatalf("upstream received %d challenges, want 2 (no deduplication without a key)", got)
		}
		wantProblem(t, post(t, g, "/webhooks/slack", body, nil), 401, "unverified")
	})
}

// keys lists the Idempotency-Keys the upstream has seen, for messages.
func (u *upstream) keys() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.byKey))
	for k := range u.byKey {
		out = append(out, k)
	}
	return out
}
