package gateway

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Secrets of the second wave of presets, as the providers hand them out.
// Twilio's token and URL are those of its documented example (PROVIDERS.md).
const (
	mailgunKey      = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
	twilioToken     = "12345"
	twilioURL       = "https://mycompany.com/myapp.php?foo=1&bar=2"
	gitlabToken     = "glwht-8c2f0d6e0b1a4f7d"
	bitbucketSecret = "bb-webhook-secret-5a1e9c"
	telegramToken   = "tg_secret-Token_42"
	larkToken       = "lGjTxsC7Q9fWm2yBzd1E8cPk"
	dingtalkSecret  = "SEC2a7c9d1e3f5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5"
	metaAppSecret   = "6b1f3e5d7c9a2b4d6f8e0a1c3e5b7d9f"
	metaVerifyToken = "meta-verify-token-7Qx"
	zoomSecret      = "zm_wh_secret_Q2x4Vb7N"
	hubspotSecret   = "d4b3c2a1-hs-client-secret"
	hubspotURL      = "https://hooks.example.com/webhooks/hubspot"
)

var waveTwoEnv = []string{
	"ADYEN_HMAC_KEY=" + adyenHMACKey,
	"MAILGUN_SIGNING_KEY=" + mailgunKey,
	"TWILIO_AUTH_TOKEN=" + twilioToken,
	"GITLAB_WEBHOOK_TOKEN=" + gitlabToken,
	"BITBUCKET_WEBHOOK_SECRET=" + bitbucketSecret,
	"TELEGRAM_SECRET_TOKEN=" + telegramToken,
	"LARK_VERIFICATION_TOKEN=" + larkToken,
	"DINGTALK_APP_SECRET=" + dingtalkSecret,
	"META_APP_SECRET=" + metaAppSecret,
	"META_VERIFY_TOKEN=" + metaVerifyToken,
	"ZOOM_WEBHOOK_SECRET=" + zoomSecret,
	"HUBSPOT_CLIENT_SECRET=" + hubspotSecret,
}

// macOf is an independent signer: the test's own HMAC, not the gateway's.
func macOf(newHash func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hexSHA256(key string, parts ...string) string {
	return hex.EncodeToString(macOf(sha256.New, []byte(key), parts...))
}

func b64SHA256(key string, parts ...string) string {
	return base64.StdEncoding.EncodeToString(macOf(sha256.New, []byte(key), parts...))
}

func bodyHash(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// mailgunEvent is a Mailgun webhook: signature block and event data.
func mailgunEvent(key string, at time.Time, token, eventID, event string) []byte {
	ts := strconv.FormatInt(at.Unix(), 10)
	return []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + token + `","signature":"` + hexSHA256(key, ts, token) + `"},` +
		`"event-data":{"id":"` + eventID + `","event":"` + event + `","timestamp":1521472262.908181,"recipient":"alice@example.com",` +
		`"message":{"headers":{"message-id":"20130503182626.18666.16540@example.com"}}}}`)
}

// twilioSign is Twilio's rule: base64 HMAC-SHA1 of the URL followed by
// every parameter's name and value, sorted by name.
func twilioSign(token, u string, params url.Values) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	s := u
	for _, n := range names {
		s += n + params.Get(n)
	}
	return base64.StdEncoding.EncodeToString(macOf(sha1.New, []byte(token), s))
}

// twilioCall is the parameter set of Twilio's documented example.
var twilioCall = url.Values{
	"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
	"From": {"+12349013030"}, "To": {"+18005551212"},
}

func larkEvent(token, eventID string) []byte {
	return []byte(`{"schema":"2.0","header":{"event_id":"` + eventID + `","token":"` + token + `","create_time":"1603977298000000",` +
		`"event_type":"im.message.receive_v1","tenant_key":"2ca1d211f64f6438","app_id":"cli_a1b2c3d4e5f6"},` +
		`"event":{"message":{"message_id":"om_5ce6d572455d361153b7cb51da133945","chat_id":"oc_5ce6d572455d361153b7xx51da133945",` +
		`"message_type":"text","content":"{\"text\":\"hello\"}"}}}`)
}

// dingtalkHeaders signs as DingTalk's outgoing robot: the millisecond
// timestamp and the secret itself, not the message.
func dingtalkHeaders(secret string, at time.Time) http.Header {
	ts := strconv.FormatInt(at.UnixMilli(), 10)
	return headers("timestamp", ts, "sign", b64SHA256(secret, ts, "\n", secret), "Content-Type", "application/json")
}

func zoomHeaders(secret string, at time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	return headers("X-Zm-Request-Timestamp", ts, "X-Zm-Signature", "v0="+hexSHA256(secret, "v0:", ts, ":", string(body)),
		"Content-Type", "application/json")
}

func hubspotHeaders(secret, u string, at time.Time, body []byte) http.Header {
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	return headers("X-HubSpot-Request-Timestamp", ms, "X-HubSpot-Signature-v3", b64SHA256(secret, "POST", u, string(body), ms),
		"Content-Type", "application/json")
}

func hubspotBatch(attempt int) []byte {
	return []byte(fmt.Sprintf(`[{"eventId":1912631245,"subscriptionId":2381011,"portalId":62515,"appId":1160452,"occurredAt":1718000000123,`+
		`"subscriptionType":"contact.propertyChange","attemptNumber":%d,"objectId":123,"propertyName":"lifecyclestage",`+
		`"propertyValue":"customer","changeSource":"CRM"}]`, attempt))
}

var (
	metaBody = []byte(`{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"field":"messages",` +
		`"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},` +
		`"messages":[{"from":"16505551234","id":"wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQUFERjg0NDEzNDdFODU3MUMxMAA=","timestamp":"1718000000",` +
		`"type":"text","text":{"body":"Hello"}}]}}]}]}`)
	zoomBody = []byte(`{"event":"meeting.started","event_ts":1718000000123,"payload":{"account_id":"AAAAAABBBB",` +
		`"object":{"id":"1234567890","uuid":"4444AAAiAAAAAiAiAiiAii==","host_id":"x1yCzABCDEfg23HiJKl4mN","topic":"Weekly sync","type":2}}}`)
	bitbucketBody = []byte(`{"push":{"changes":[{"new":{"type":"branch","name":"main","target":{"hash":"709d658dc5b6d6afcd46049c2f332ee3f515a67d"}}}]},` +
		`"repository":{"full_name":"team/repo","uuid":"{21fa9bf8-b5b2-4891-97ed-d590bad0f871}"},"actor":{"display_name":"Jane"}}`)
	gitlabBody = []byte(`{"object_kind":"push","event_name":"push","before":"95790bf891e76fee5e1747ab589903a6a1f80f22",` +
		`"after":"da1560886d4f094c3e6c9ef40349f7d38b5d27d7","ref":"refs/heads/master","project_id":15,"total_commits_count":4}`)
	telegramBody = []byte(`{"update_id":10000,"message":{"message_id":1365,"date":1441645532,"chat":{"id":1111111,"type":"private",` +
		`"first_name":"Test"},"from":{"id":1111111,"is_bot":false,"first_name":"Test"},"text":"/start"}}`)
	dingtalkBody = []byte(`{"conversationId":"cidXXXX==","atUsers":[{"dingtalkId":"$:LWCP_v1:$xxx"}],"chatbotUserId":"$:LWCP_v1:$yyy",` +
		`"msgId":"msgQ9hV+2xz0Ovd7kyV8Zq3bQ==","senderNick":"Jane","isAdmin":false,"sessionWebhookExpiredTime":1718003600000,` +
		`"createAt":1718000000000,"conversationType":"2","senderId":"$:LWCP_v1:$zzz","msgtype":"text","text":{"content":"hello"}}`)
)

// waveTwoCases are the presets of scheme hmac and token added with issue
// 33, end to end like the first thirteen.
func waveTwoCases() []presetCase {
	twilioBody := []byte(twilioCall.Encode())
	return []presetCase{
		{
			preset: "mailgun",
			verify: `secrets: ["${MAILGUN_SIGNING_KEY}"]`,
			key:    "CPgfbmQMTCKtHW6uIWtuVe",
			window: 8 * time.Hour,
			deliver: func(_ testing.TB, n int, now time.Time) ([]byte, http.Header) {
				// Each attempt is signed anew, with a new token.
				return mailgunEvent(mailgunKey, now, fmt.Sprintf("tok%050d", n), "CPgfbmQMTCKtHW6uIWtuVe", "delivered"),
					headers("Content-Type", "application/json")
			},
		},
		{
			preset: "twilio",
			verify: "secrets: [\"${TWILIO_AUTH_TOKEN}\"]\n      url: \"" + twilioURL + "\"",
			key:    "RQ0e4b8f3a6d1c2b5a8e9f0d7c6b5a4e3d2-2",
			window: time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				sig := twilioSign(twilioToken, twilioURL, twilioCall)
				if sig != "0/KCTR6DLpKmkAf8muzZqo1nDgQ=" {
					tb.Fatalf("the test's Twilio signer disagrees with Twilio's documented example: %s", sig)
				}
				return twilioBody, headers("X-Twilio-Signature", sig, "I-Twilio-Idempotency-Token", "RQ0e4b8f3a6d1c2b5a8e9f0d7c6b5a4e3d2-2",
					"Content-Type", "application/x-www-form-urlencoded")
			},
		},
		{
			preset: "gitlab",
			verify: `secrets: ["${GITLAB_WEBHOOK_TOKEN}"]`,
			key:    "908a6d9e-45fd-46c8-97e6-c4f350f219dd",
			window: time.Hour,
			deliver: func(_ testing.TB, n int, _ time.Time) ([]byte, http.Header) {
				return gitlabBody, headers("X-Gitlab-Token", gitlabToken, "X-Gitlab-Event", "Push Hook",
					"Idempotency-Key", "908a6d9e-45fd-46c8-97e6-c4f350f219dd",
					"X-Gitlab-Event-UUID", fmt.Sprintf("13792a34-cac6-4fda-95a8-c58e00a3954%d", n),
					"Content-Type", "application/json")
			},
		},
		{
			preset: "bitbucket",
			verify: `secrets: ["${BITBUCKET_WEBHOOK_SECRET}"]`,
			key:    "d5f3a7e1-2b8c-4f6d-9a0e-1c3b5d7f9a2e",
			window: time.Hour,
			deliver: func(_ testing.TB, n int, _ time.Time) ([]byte, http.Header) {
				return bitbucketBody, headers("X-Hub-Signature", "sha256="+hexSHA256(bitbucketSecret, string(bitbucketBody)),
					"X-Request-UUID", "d5f3a7e1-2b8c-4f6d-9a0e-1c3b5d7f9a2e", "X-Event-Key", "repo:push",
					"X-Attempt-Number", strconv.Itoa(n), "Content-Type", "application/json")
			},
		},
		{
			preset: "telegram",
			verify: `secrets: ["${TELEGRAM_SECRET_TOKEN}"]`,
			key:    "10000",
			window: 24 * time.Hour,
			deliver: func(_ testing.TB, _ int, _ time.Time) ([]byte, http.Header) {
				return telegramBody, headers("X-Telegram-Bot-Api-Secret-Token", telegramToken, "Content-Type", "application/json")
			},
		},
		{
			preset: "lark",
			verify: `secrets: ["${LARK_VERIFICATION_TOKEN}"]`,
			key:    "5e3702a84e847582be8db7fb73283c02",
			window: 7 * time.Hour,
			deliver: func(_ testing.TB, _ int, _ time.Time) ([]byte, http.Header) {
				return larkEvent(larkToken, "5e3702a84e847582be8db7fb73283c02"), headers("Content-Type", "application/json")
			},
		},
		{
			preset: "dingtalk",
			verify: `secrets: ["${DINGTALK_APP_SECRET}"]`,
			key:    "msgQ9hV+2xz0Ovd7kyV8Zq3bQ==",
			window: time.Hour,
			deliver: func(_ testing.TB, _ int, now time.Time) ([]byte, http.Header) {
				return dingtalkBody, dingtalkHeaders(dingtalkSecret, now)
			},
		},
		{
			preset: "meta",
			verify: "secrets: [\"${META_APP_SECRET}\"]\n      challenge_token: \"${META_VERIFY_TOKEN}\"",
			key:    bodyHash(metaBody),
			window: 7 * day,
			deliver: func(_ testing.TB, _ int, _ time.Time) ([]byte, http.Header) {
				return metaBody, headers("X-Hub-Signature-256", "sha256="+hexSHA256(metaAppSecret, string(metaBody)),
					"Content-Type", "application/json")
			},
		},
		{
			preset: "zoom",
			verify: `secrets: ["${ZOOM_WEBHOOK_SECRET}"]`,
			key:    bodyHash(zoomBody),
			window: 85 * time.Minute,
			deliver: func(_ testing.TB, _ int, now time.Time) ([]byte, http.Header) {
				return zoomBody, zoomHeaders(zoomSecret, now, zoomBody)
			},
		},
		{
			preset: "hubspot",
			verify: "secrets: [\"${HUBSPOT_CLIENT_SECRET}\"]\n      url: " + hubspotURL,
			key:    presetKey("hubspot", hubspotBatch(0)),
			window: 24 * time.Hour,
			deliver: func(_ testing.TB, n int, now time.Time) ([]byte, http.Header) {
				// A retry counts itself in the body: same event, new bytes.
				body := hubspotBatch(n - 1)
				return body, hubspotHeaders(hubspotSecret, hubspotURL, now, body)
			},
		},
	}
}
