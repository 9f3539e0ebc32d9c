package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// refusal is a delivery its preset must refuse: 401, nothing forwarded,
// nothing claimed under the key it names.
type refusal struct {
	preset, name string
	body         []byte
	hdr          http.Header
	key          string
}

// waveTwoRefusals are, per preset, a forgery, a stale delivery and a
// modified one, where the provider's scheme can tell them: schemes
// without a signed timestamp cannot refuse a stale copy, a token does not
// cover the body, and DingTalk and Mailgun sign only their own fields.
func waveTwoRefusals(tb testing.TB) []refusal {
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	twilioBody := []byte(twilioCall.Encode())
	twilioHdr := func(sig string) http.Header {
		return headers("X-Twilio-Signature", sig, "I-Twilio-Idempotency-Token", "RQ-refused", "Content-Type", "application/x-www-form-urlencoded")
	}
	modified := url.Values{}
	for k, v := range twilioCall {
		modified[k] = v
	}
	modified.Set("Digits", "9999")
	zoomModified := bytes.Replace(zoomBody, []byte("Weekly sync"), []byte("Weekly sink"), 1)
	hubspotModified := bytes.Replace(hubspotBatch(0), []byte(`"customer"`), []byte(`"lead"`), 1)
	mailgunTampered := bytes.Replace(mailgunEvent(mailgunKey, now, "tok-a", "MG-REFUSED", "delivered"), []byte(`"tok-a"`), []byte(`"tok-b"`), 1)
	bbHdr := func(secret string) http.Header {
		return headers("X-Hub-Signature", "sha256="+hexSHA256(secret, string(bitbucketBody)), "X-Request-UUID", "bb-refused")
	}
	metaModified := bytes.Replace(metaBody, []byte("Hello"), []byte("Hello!"), 1)
	dingStamped := dingtalkHeaders(dingtalkSecret, now)
	dingStamped.Set("timestamp", dingtalkHeaders(dingtalkSecret, now.Add(time.Second)).Get("timestamp"))
	return []refusal{
		{"mailgun", "forged", mailgunEvent("key-wrong", now, "tok-a", "MG-REFUSED", "delivered"), nil, "MG-REFUSED"},
		{"mailgun", "stale", mailgunEvent(mailgunKey, old, "tok-a", "MG-REFUSED", "delivered"), nil, "MG-REFUSED"},
		{"mailgun", "signed token modified", mailgunTampered, nil, "MG-REFUSED"},
		{"twilio", "forged", twilioBody, twilioHdr(twilioSign("wrong", twilioURL, twilioCall)), "RQ-refused"},
		{"twilio", "signed for another URL", twilioBody, twilioHdr(twilioSign(twilioToken, "https://evil.example/myapp.php", twilioCall)), "RQ-refused"},
		{"twilio", "body modified", []byte(modified.Encode()), twilioHdr(twilioSign(twilioToken, twilioURL, twilioCall)), "RQ-refused"},
		{"adyen", "forged", adyenNotification(tb, "00FF00FF", "9914073381342284", 1000, 1), nil, "9914073381342284:AUTHORISATION:true"},
		{"adyen", "amount modified", bytes.Replace(adyenNotification(tb, adyenHMACKey, "9914073381342284", 1000, 1),
			[]byte(`"value":1000`), []byte(`"value":1`), 1), nil, "9914073381342284:AUTHORISATION:true"},
		{"adyen", "an unsigned second item", adyenNotification(tb, adyenHMACKey, "9914073381342284", 1000, 2), nil, "9914073381342284:AUTHORISATION:true"},
		{"gitlab", "forged", gitlabBody, headers("X-Gitlab-Token", "guess", "Idempotency-Key", "gl-refused"), "gl-refused"},
		{"gitlab", "no token", gitlabBody, headers("Idempotency-Key", "gl-refused"), "gl-refused"},
		{"bitbucket", "forged", bitbucketBody, bbHdr("wrong"), "bb-refused"},
		{"bitbucket", "body modified", bytes.Replace(bitbucketBody, []byte("main"), []byte("prod"), 1), bbHdr(bitbucketSecret), "bb-refused"},
		{"telegram", "forged", telegramBody, headers("X-Telegram-Bot-Api-Secret-Token", "guess"), "10000"},
		{"telegram", "no token", telegramBody, nil, "10000"},
		{"lark", "forged", larkEvent("guess", "lark-refused"), nil, "lark-refused"},
		{"dingtalk", "forged", dingtalkBody, dingtalkHeaders("SECwrong", now), "msgQ9hV+2xz0Ovd7kyV8Zq3bQ=="},
		{"dingtalk", "stale", dingtalkBody, dingtalkHeaders(dingtalkSecret, old), "msgQ9hV+2xz0Ovd7kyV8Zq3bQ=="},
		{"dingtalk", "signed timestamp modified", dingtalkBody, dingStamped, "msgQ9hV+2xz0Ovd7kyV8Zq3bQ=="},
		{"meta", "forged", metaBody, headers("X-Hub-Signature-256", "sha256="+hexSHA256("wrong", string(metaBody))), bodyHash(metaBody)},
		{"meta", "body modified", metaModified, headers("X-Hub-Signature-256", "sha256="+hexSHA256(metaAppSecret, string(metaBody))), bodyHash(metaModified)},
		{"zoom", "forged", zoomBody, zoomHeaders("wrong", now, zoomBody), bodyHash(zoomBody)},
		{"zoom", "stale", zoomBody, zoomHeaders(zoomSecret, old, zoomBody), bodyHash(zoomBody)},
		{"zoom", "body modified", zoomModified, zoomHeaders(zoomSecret, now, zoomBody), bodyHash(zoomModified)},
		{"hubspot", "forged", hubspotBatch(0), hubspotHeaders("wrong", hubspotURL, now, hubspotBatch(0)), "1912631245"},
		{"hubspot", "stale", hubspotBatch(0), hubspotHeaders(hubspotSecret, hubspotURL, now.Add(-6*time.Minute), hubspotBatch(0)), "1912631245"},
		{"hubspot", "body modified", hubspotModified, hubspotHeaders(hubspotSecret, hubspotURL, now, hubspotBatch(0)), "1912631245"},
		{"hubspot", "signed for another URL", hubspotBatch(0), hubspotHeaders(hubspotSecret, "https://evil.example/", now, hubspotBatch(0)), "1912631245"},
	}
}

// adyenNotification is an Adyen webhook with items copies of one signed
// item.
func adyenNotification(tb testing.TB, keyHex, psp string, value, items int) []byte {
	tb.Helper()
	sig, err := verifytest.AdyenHMAC(keyHex, psp+"::YOUR_MERCHANT_ACCOUNT:YOUR_REFERENCE:"+strconv.Itoa(value)+":EUR:AUTHORISATION:true")
	if err != nil {
		tb.Fatal(err)
	}
	item := `{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + sig + `"},"amount":{"currency":"EUR","value":` + strconv.Itoa(value) + `},` +
		`"eventCode":"AUTHORISATION","merchantAccountCode":"YOUR_MERCHANT_ACCOUNT","merchantReference":"YOUR_REFERENCE",` +
		`"pspReference":"` + psp + `","success":"true"}}`
	return []byte(`{"live":"false","notificationItems":[` + strings.TrimSuffix(strings.Repeat(item+",", items), ",") + `]}`)
}

// Every wave-two preset refuses what its provider's scheme can tell is
// not genuine, through the whole gateway, before anything is claimed.
func TestWaveTwoPresetsRefuse(t *testing.T) {
	up := newUpstream(t)
	cases := waveTwoCases()
	adyen := presetCase{preset: "adyen", verify: `secrets: ["${ADYEN_HMAC_KEY}"]`}
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, append(cases, adyen)), waveTwoEnv))
	for _, r := range waveTwoRefusals(t) {
		t.Run(r.preset+"/"+r.name, func(t *testing.T) {
			before := up.total.Load()
			wantProblem(t, post(t, g, "/webhooks/"+r.preset, r.body, r.hdr), 401, "unverified")
			if n := up.total.Load() - before; n != 0 {
				t.Fatalf("upstream received %d requests, want none", n)
			}
			wantNoRecord(t, g, r.preset, r.key)
		})
	}
}

// Adyen's published vector (adyen-go's tests, PROVIDERS.md), as a
// notification whose fields produce its signed data, is accepted.
func TestAdyenPresetKnownAnswer(t *testing.T) {
	up := newUpstream(t)
	adyen := presetCase{preset: "adyen", verify: `secrets: ["${ADYEN_HMAC_KEY}"]`}
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, []presetCase{adyen}), waveTwoEnv))
	body := []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{` +
		`"additionalData":{"hmacSignature":"ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="},"amount":{"currency":"EUR","value":1000},` +
		`"eventCode":"EVENT","merchantAccountCode":"merchantAccount","merchantReference":"reference",` +
		`"originalReference":"originalReference","pspReference":"pspReference","success":"true"}}]}`)
	wantOutcome(t, post(t, g, "/webhooks/adyen", body, nil), 200, "forwarded")
	if n := up.count("pspReference:EVENT:true"); n != 1 {
		t.Fatalf("upstream received the vector %d times, want 1", n)
	}
}

// A genuine Adyen notification with a member added in another case, which
// Go's encoding/json (and Json.NET) reads in place of the signed one, is
// refused, and names that merely share a prefix with signed ones are not.
func TestAdyenPresetRefusesCaseVariants(t *testing.T) {
	up := newUpstream(t)
	adyen := presetCase{preset: "adyen", verify: `secrets: ["${ADYEN_HMAC_KEY}"]`}
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, []presetCase{adyen}), waveTwoEnv))
	const psp, key = "9914073381342284", "9914073381342284:AUTHORISATION:true"
	genuine := adyenNotification(t, adyenHMACKey, psp, 1000, 1)
	item := genuine[bytes.IndexByte(genuine, '[')+1 : bytes.LastIndexByte(genuine, ']')]
	insert := func(member string) []byte {
		return bytes.Replace(genuine, []byte(`"success":"true"`), []byte(`"success":"true",`+member), 1)
	}
	forged := `{"NotificationRequestItem":{"pspReference":"FORGED","success":"true","amount":{"currency":"EUR","value":99999999}}}`
	for _, tc := range []struct {
		name string
		body []byte
		read string // what a Go application reads from it
	}{
		{"items in another case", []byte(`{"notificationItems":[` + string(item) + `],"NotificationItems":[` + forged + `]}`), "FORGED 99999999 true "},
		{"amount in another case", insert(`"Amount":{"currency":"EUR","value":99999999}`), psp + " 99999999 true "},
		{"success with a long s", insert(`"ſuccess":"false"`), psp + " 1000 false "},
		{"absent signed field in another case", insert(`"OriginalReference":"8313842560770001"`), psp + " 1000 true 8313842560770001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adyenAppReads(t, tc.body); got != tc.read {
				t.Fatalf("a Go application reads %q, want %q: the body does not test what it says", got, tc.read)
			}
			before := up.total.Load()
			wantProblem(t, post(t, g, "/webhooks/adyen", tc.body, nil), 401, "unverified")
			if n := up.total.Load() - before; n != 0 {
				t.Fatalf("upstream received %d requests, want none", n)
			}
			wantNoRecord(t, g, "adyen", key)
		})
	}
	near := insert(`"amountDetails":{"value":1},"successful":"false","pspReferences":["x"]`)
	near = bytes.Replace(near, []byte(`{"live"`), []byte(`{"notificationItemsCount":1,"live"`), 1)
	wantOutcome(t, post(t, g, "/webhooks/adyen", near, nil), 200, "forwarded")
	if n := up.count(key); n != 1 {
		t.Fatalf("upstream received the notification %d times, want 1", n)
	}
}

// adyenAppReads is what a Go application that unmarshals an Adyen
// notification into structs reads of its first item: pspReference, amount,
// success and originalReference.
func adyenAppReads(tb testing.TB, body []byte) string {
	tb.Helper()
	var n struct {
		NotificationItems []struct {
			NotificationRequestItem struct {
				PSPReference string `json:"pspReference"`
				Success      string `json:"success"`
				Original     string `json:"originalReference"`
				Amount       struct {
					Value int64 `json:"value"`
				} `json:"amount"`
			}
		} `json:"notificationItems"`
	}
	if err := json.Unmarshal(body, &n); err != nil || len(n.NotificationItems) == 0 {
		tb.Fatalf("json.Unmarshal: %v, %d items", err, len(n.NotificationItems))
	}
	it := n.NotificationItems[0].NotificationRequestItem
	return it.PSPReference + " " + strconv.FormatInt(it.Amount.Value, 10) + " " + it.Success + " " + it.Original
}

// Zoom's endpoint.url_validation and Lark's url_verification are
// answered by hookstamp, signed or tokened like every request; they reach
// neither the upstream nor the ledger, and a forged one is refused.
func TestHandshakesAnsweredByHookstamp(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, waveTwoCases()), waveTwoEnv))
	zoomValidation := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
	larkVerification := []byte(`{"challenge":"ajls384kdjx98XX","token":"` + larkToken + `","type":"url_verification"}`)
	for _, tc := range []struct {
		name, path string
		body       []byte
		hdr        http.Header
		want       string
	}{
		{"zoom", "/webhooks/zoom", zoomValidation, zoomHeaders(zoomSecret, time.Now(), zoomValidation),
			`{"encryptedToken":"` + hexSHA256(zoomSecret, "qgg8vlvZRS6UYooatFL8Aw") + `","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}`},
		{"lark", "/webhooks/lark", larkVerification, headers("Content-Type", "application/json"), `{"challenge":"ajls384kdjx98XX"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.total.Load()
			for i := 0; i < 2; i++ {
				r := post(t, g, tc.path, tc.body, tc.hdr)
				wantOutcome(t, r, 200, "challenge")
				if string(r.body) != tc.want || r.header.Get("Content-Type") != "application/json" {
					t.Fatalf("answer %s %q, want %q", r.header.Get("Content-Type"), r.body, tc.want)
				}
			}
			if n := up.total.Load() - before; n != 0 {
				t.Fatalf("upstream received %d handshakes, want none", n)
			}
		})
	}
	wantNoRecord(t, g, "zoom", bodyHash(zoomValidation))
	forged := zoomHeaders("wrong", time.Now(), zoomValidation)
	wantProblem(t, post(t, g, "/webhooks/zoom", zoomValidation, forged), 401, "unverified")
	stale := zoomHeaders(zoomSecret, time.Now().Add(-time.Hour), zoomValidation)
	wantProblem(t, post(t, g, "/webhooks/zoom", zoomValidation, stale), 401, "unverified")
	wrongToken := bytes.Replace(larkVerification, []byte(larkToken), []byte("guess"), 1)
	wantProblem(t, post(t, g, "/webhooks/lark", wrongToken, nil), 401, "unverified")
}

// Meta's subscription check is an unsigned GET: hookstamp answers it when
// hub.verify_token is the configured one, and refuses it otherwise.
func TestMetaSubscriptionCheck(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, waveTwoCases()), waveTwoEnv))
	get := func(token string) *http.Response {
		t.Helper()
		q := url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1158201444"}, "hub.verify_token": {token}}
		resp, err := http.Get(g.URL() + "/webhooks/meta?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := get(metaVerifyToken)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != "1158201444" || resp.Header.Get("Hookstamp-Outcome") != "challenge" {
		t.Fatalf("got %d %q %q, want 200 1158201444 challenge", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), body)
	}
	if forged := get("guess"); forged.StatusCode != 401 {
		t.Fatalf("a wrong verify token got %d, want 401", forged.StatusCode)
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("upstream received %d requests, want none", n)
	}
}
