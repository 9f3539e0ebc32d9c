package config

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"time"
)

// Preset is a provider's conventions (SPEC §3 "Presets", PROVIDERS.md): where
// the stable delivery identity is, what the delivery means, how it is signed
// and how long the provider keeps retrying. A route naming the preset gets
// these values wherever it leaves the key unset.
type Preset struct {
	// Name is the value of routes[].preset.
	Name string
	// Key becomes key.sources.
	Key []KeySource
	// KeyOptional sets key.required to false: the provider also sends
	// requests that carry no key and must still reach the upstream (Slack's
	// url_verification handshake and app_rate_limited notices have no
	// event_id). They pass through without deduplication.
	KeyOptional bool
	// Fingerprint gives fingerprint.mode and fingerprint.fields: the fields
	// only when the route sets neither, the mode when the route sets none.
	// OnMismatch is not part of a preset.
	Fingerprint Fingerprint
	// Scheme becomes verify.scheme; "" means no built-in verification.
	Scheme string
	// Verify holds the rest of the provider's verify settings for schemes
	// hmac and token (header, template, timestamp, …); its zero fields are
	// left to the defaults. Never secrets, keys or URLs. A route that names
	// another scheme gets none of them.
	Verify Verify
	// Tolerance becomes verify.tolerance when the provider documents its
	// own limit; zero leaves the default (5m).
	Tolerance time.Duration
	// Retention becomes retention: the provider's whole retry window plus at
	// least a day of margin, and never under 72h.
	Retention time.Duration
	// RetryWindow is the provider's documented retry window, for the README.
	RetryWindow string
	// RecordStatuses becomes record.statuses when the route sets none:
	// for a provider whose consumer asks to be sent a delivery again with
	// a 4xx (WeChat Pay's FAIL), and for one the gateway cannot verify,
	// whose forgeries the application refuses with a 4xx (PayPal).
	// Recorded, such an answer would be replayed to every resend. Unset
	// leaves the default (2xx and 4xx).
	RecordStatuses []string
	// Resend, when set, is the body with which the provider's consumer
	// asks to be sent a delivery again (Alipay: "fail"). Such an answer,
	// whatever its status, is not recorded: recorded, it would answer every
	// resend for the whole retention and the delivery would never reach
	// the consumer again.
	Resend string
	// Ack, when set, becomes async.ack: the answer the provider must read
	// to stop resending. Unset leaves the default (202, no body).
	Ack *Ack
	// SyncOnly refuses delivery: async on the preset's routes: the
	// provider reads its answer from the upstream's (a Discord interaction
	// response says what to show the user), so no acknowledgement the
	// gateway could make up would do.
	SyncOnly bool
	// Handshake, when set, marks the provider's handshake requests: on an
	// async route they are still forwarded synchronously, since the
	// provider reads the upstream's own answer (Twitch's challenge echo).
	Handshake *HeaderMatch
}

// HeaderMatch matches requests whose header Name has the value Value
// (case-insensitive).
type HeaderMatch struct {
	Name, Value string
}

const day = 24 * time.Hour

// adyenKey is the Adyen notification item identity: pspReference, eventCode
// and success of the first (and, for webhooks, only) item.
const adyenKey = "{json:notificationItems.0.NotificationRequestItem.pspReference}:" +
	"{json:notificationItems.0.NotificationRequestItem.eventCode}:" +
	"{json:notificationItems.0.NotificationRequestItem.success}"

// hubspotKey is what identifies each event of a HubSpot batch (eventId
// alone is not unique, HubSpot says: it goes with subscriptionId), and
// nothing a retry changes.
const hubspotKey = "json:#.subscriptionId,json:#.eventId,json:#.portalId,json:#.occurredAt"

// presetTable is in SPEC order. Retentions: window + ≥ 1 day, min 72h.
var presetTable = []Preset{
	{Name: "standard-webhooks", Key: standardKey, Scheme: SchemeStandardWebhooks, Retention: 3 * day, RetryWindow: "~27 h"},
	{Name: "stripe", Key: src(SourceJSON, "id"), Scheme: SchemeStripe, Retention: 4 * day, RetryWindow: "3 days"},
	// GitHub never retries on its own; deliveries can be redelivered by hand
	// for 3 days.
	{Name: "github", Key: src(SourceHeader, "X-GitHub-Delivery"), Scheme: SchemeGitHub, Retention: 4 * day, RetryWindow: "manual redelivery, 3 days"},
	{Name: "shopify", Key: src(SourceHeader, "X-Shopify-Webhook-Id"), Scheme: SchemeShopify, Retention: 3 * day, RetryWindow: "4 h"},
	// Slack's url_verification challenge has no event_id: refusing it
	// would make the Request URL impossible to save.
	{Name: "slack", Key: src(SourceJSON, "event_id"), KeyOptional: true, Scheme: SchemeSlack, Retention: 3 * day, RetryWindow: "3 retries, minutes"},
	// Alipay resends change notify_time and sign, so the body cannot be the
	// fingerprint: the business fields are.
	// Alipay resends until it reads the body "success"; an application
	// answers "fail" to be sent the notification again.
	{Name: "alipay", Key: src(SourceForm, "notify_id"), Fingerprint: Fingerprint{Mode: FingerprintFields, Fields: []string{
		"form:out_trade_no", "form:trade_no", "form:trade_status", "form:total_amount",
	}}, Scheme: SchemeAlipay, Retention: 3 * day, RetryWindow: "~25 h", Resend: "fail",
		Ack: &Ack{Status: 200, ContentType: "text/plain; charset=utf-8", Body: "success"}},
	// WeChat Pay v3 takes 200 or 204; older v3 integrations expect the JSON
	// code as well, which newer ones ignore. A merchant that could not
	// process a notification answers 4XX or 5XX with {"code":"FAIL"} and
	// is notified again.
	{Name: "wechatpay", Key: src(SourceJSON, "id"), Scheme: SchemeWeChatPay, RecordStatuses: onlySuccess, Retention: 3 * day, RetryWindow: "~24 h",
		Ack: &Ack{Status: 200, ContentType: "application/json", Body: `{"code":"SUCCESS","message":"OK"}`}},
	// PayPal signs with certificates fetched at run time: verify upstream.
	{Name: "paypal", Key: src(SourceJSON, "id"), RecordStatuses: onlySuccess, Retention: 4 * day, RetryWindow: "3 days"},
	{Name: "square", Key: src(SourceJSON, "event_id"), Scheme: SchemeSquare, Retention: 3 * day, RetryWindow: "24 h"},
	{Name: "paddle", Key: src(SourceJSON, "event_id"), Scheme: SchemePaddle, Retention: 4 * day, RetryWindow: "3 days", Ack: &Ack{Status: 200}},
	{Name: "razorpay", Key: src(SourceHeader, "X-Razorpay-Event-Id"), Scheme: SchemeRazorpay, Retention: 3 * day, RetryWindow: "24 h"},
	// Twitch tells receivers to refuse messages older than 10 minutes.
	{Name: "twitch", Key: src(SourceHeader, "Twitch-Eventsub-Message-Id"), Scheme: SchemeTwitch, Tolerance: 10 * time.Minute, Retention: 3 * day, RetryWindow: "short, undocumented",
		Handshake: &HeaderMatch{Name: "Twitch-Eventsub-Message-Type", Value: "webhook_callback_verification"}},
	// Adyen signs each notification item; the preset verifies the first
	// and refuses a body with more, which would carry unsigned items.
	{Name: "adyen", Key: src(SourceTemplate, adyenKey), Scheme: SchemeHMAC, Verify: adyenVerify,
		Retention: 35 * day, RetryWindow: "30 days",
		Ack: &Ack{Status: 200, ContentType: "text/plain; charset=utf-8", Body: "[accepted]"}},
	// Mailgun signs the timestamp and a token, not the event: see
	// docs/presets.md. Each attempt carries a new signature block, so the
	// event data alone is the fingerprint. A 406 answer stops its retries.
	{Name: "mailgun", Key: src(SourceJSON, "event-data.id"), Fingerprint: Fingerprint{Mode: FingerprintFields, Fields: []string{"json:event-data"}},
		Scheme: SchemeHMAC, Verify: Verify{
			JSON: "signature.signature", Template: "{json:signature.timestamp}{json:signature.token}",
			Timestamp: VerifyTimestamp{JSON: "signature.timestamp"},
		}, Retention: 3 * day, RetryWindow: "8 h", Ack: &Ack{Status: 200}},
	// The URL Twilio calls is signed; the route gives it in verify.url.
	{Name: "twilio", Key: src(SourceHeader, "I-Twilio-Idempotency-Token"), Scheme: SchemeHMAC, Verify: Verify{
		Header: "X-Twilio-Signature", Algorithm: "sha1", Encoding: "base64", Template: "{url}{form:sorted}",
	}, Retention: 3 * day, RetryWindow: "minutes (connection overrides)",
		Ack: &Ack{Status: 200, ContentType: "text/xml", Body: "<Response/>"}},
	// Idempotency-Key is kept on GitLab's retries and manual resends;
	// GitLab versions before 17.4 send only X-Gitlab-Event-UUID.
	{Name: "gitlab", Key: []KeySource{{Kind: SourceHeader, Arg: "Idempotency-Key"}, {Kind: SourceHeader, Arg: "X-Gitlab-Event-UUID"}},
		Scheme: SchemeToken, Verify: Verify{Header: "X-Gitlab-Token"}, Retention: 3 * day, RetryWindow: "manual resend"},
	{Name: "bitbucket", Key: src(SourceHeader, "X-Request-UUID"), Scheme: SchemeHMAC, Verify: Verify{
		Header: "X-Hub-Signature", Prefix: "sha256=",
	}, Retention: 3 * day, RetryWindow: "2 retries, minutes"},
	{Name: "telegram", Key: src(SourceJSON, "update_id"), Scheme: SchemeToken, Verify: Verify{
		Header: "X-Telegram-Bot-Api-Secret-Token",
	}, Retention: 3 * day, RetryWindow: "updates kept 24 h", Ack: &Ack{Status: 200}},
	// Lark's plaintext v2 events carry the verification token in the body;
	// its url_verification handshake carries it elsewhere and is answered
	// by hookstamp.
	{Name: "lark", Key: src(SourceJSON, "header.event_id"), Scheme: SchemeToken, Verify: Verify{
		JSON: "header.token", Challenge: ChallengeLark,
	}, Retention: 3 * day, RetryWindow: "4 retries over ~6 h", Ack: &Ack{Status: 200}},
	// DingTalk signs the timestamp and the secret itself, not the message,
	// and refuses timestamps more than an hour away.
	{Name: "dingtalk", Key: src(SourceJSON, "msgId"), Scheme: SchemeHMAC, Tolerance: time.Hour, Verify: Verify{
		Header: "sign", Encoding: "base64", Template: "{header:timestamp}\n{secret}",
		Timestamp: VerifyTimestamp{Header: "timestamp", Unit: "ms"},
	}, Retention: 3 * day, RetryWindow: "undocumented", Ack: &Ack{Status: 200}},
	// Meta's notifications carry no delivery id: a retry is the same body.
	// Its unsigned GET subscription check is answered by hookstamp.
	{Name: "meta", Key: src(SourceBodyHash, "sha256"), Scheme: SchemeGitHub, Verify: Verify{Challenge: ChallengeMeta},
		Retention: 8 * day, RetryWindow: "up to 7 days", Ack: &Ack{Status: 200}},
	// Zoom re-signs each retry of an unchanged body; it wants 200 or 204
	// within 3 seconds.
	{Name: "zoom", Key: src(SourceBodyHash, "sha256"), Scheme: SchemeHMAC, Verify: Verify{
		Header: "X-Zm-Signature", Prefix: "v0=", Template: "v0:{header:X-Zm-Request-Timestamp}:{body}",
		Timestamp: VerifyTimestamp{Header: "X-Zm-Request-Timestamp"}, Challenge: ChallengeZoom,
	}, Retention: 3 * day, RetryWindow: "3 retries over ~85 min", Ack: &Ack{Status: 200}},
	// HubSpot batches events and counts attempts inside the body, so a
	// retry's body differs: the key is the identity of every event in the
	// batch, and no fingerprint is taken (decisions.md).
	{Name: "hubspot", Key: src(SourceFieldsHash, hubspotKey), Fingerprint: Fingerprint{Mode: FingerprintNone}, Scheme: SchemeHMAC, Verify: Verify{
		Header: "X-HubSpot-Signature-v3", Encoding: "base64", Template: "POST{url}{body}{header:X-HubSpot-Request-Timestamp}",
		Timestamp: VerifyTimestamp{Header: "X-HubSpot-Request-Timestamp", Unit: "ms"},
	}, Retention: 3 * day, RetryWindow: "10 retries over 24 h", Ack: &Ack{Status: 200}},
	// Discord does not retry interactions; its PING (type 1) has an id like
	// every interaction and is forwarded for the application to answer.
	{Name: "discord", Key: src(SourceJSON, "id"), Scheme: SchemeDiscord, Retention: 3 * day, RetryWindow: "none (answer within 3 s)", SyncOnly: true},
	// SendGrid posts batches of events and retries a failed batch; the
	// batch, not one event, is the delivery (decisions.md).
	{Name: "sendgrid", Key: src(SourceBodyHash, "sha256"), Scheme: SchemeSendGrid, Retention: 3 * day, RetryWindow: "24 h"},
	// Clerk and Resend send through Svix, under svix-* header names.
	{Name: "clerk", Key: svixKey, Scheme: SchemeStandardWebhooks, Retention: 3 * day, RetryWindow: "~27 h"},
	{Name: "resend", Key: svixKey, Scheme: SchemeStandardWebhooks, Retention: 3 * day, RetryWindow: "~18 h"},
}

// adyenItem is the path of the one notification item Adyen's webhooks send.
const adyenItem = "notificationItems.0.NotificationRequestItem."

// adyenVerify is Adyen's HMAC: base64 HMAC-SHA256 under the hex-decoded
// key, over eight item fields joined with ':'.
var adyenVerify = Verify{
	JSON: adyenItem + "additionalData.hmacSignature", Encoding: "base64", SecretEncoding: "hex",
	Single: []string{"notificationItems"},
	Template: "{json:" + adyenItem + "pspReference}:{json:" + adyenItem + "originalReference}:" +
		"{json:" + adyenItem + "merchantAccountCode}:{json:" + adyenItem + "merchantReference}:" +
		"{json:" + adyenItem + "amount.value}:{json:" + adyenItem + "amount.currency}:" +
		"{json:" + adyenItem + "eventCode}:{json:" + adyenItem + "success}",
}

// standardKey is the message id of a Standard Webhooks sender: webhook-id,
// or svix-id from Svix itself, which sends its own header names.
var standardKey = []KeySource{{Kind: SourceHeader, Arg: "webhook-id"}, {Kind: SourceHeader, Arg: "svix-id"}}

// svixKey is the message id of a Svix sender: svix-id, or webhook-id
// should it send the specification's names.
var svixKey = []KeySource{{Kind: SourceHeader, Arg: "svix-id"}, {Kind: SourceHeader, Arg: "webhook-id"}}

func src(kind, arg string) []KeySource { return []KeySource{{Kind: kind, Arg: arg}} }

var onlySuccess = []string{"2xx"}

// Presets returns the preset table in SPEC order. The result is a fresh copy:
// changing it changes nothing.
func Presets() []Preset {
	out := make([]Preset, len(presetTable))
	for i, p := range presetTable {
		out[i] = p.clone()
	}
	return out
}

// LookupPreset returns the preset called name.
func LookupPreset(name string) (Preset, bool) {
	for _, p := range presetTable {
		if p.Name == name {
			return p.clone(), true
		}
	}
	return Preset{}, false
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, len(presetTable))
	for i, p := range presetTable {
		names[i] = p.Name
	}
	sort.Strings(names)
	return names
}

func (p Preset) clone() Preset {
	if p.Ack != nil {
		a := *p.Ack
		p.Ack = &a
	}
	if p.Handshake != nil {
		h := *p.Handshake
		p.Handshake = &h
	}
	p.Key = append([]KeySource(nil), p.Key...)
	p.RecordStatuses = slices.Clone(p.RecordStatuses)
	p.Verify.Single = append([]string(nil), p.Verify.Single...)
	p.Fingerprint.Fields = append([]string(nil), p.Fingerprint.Fields...)
	if len(p.Fingerprint.Fields) == 0 {
		p.Fingerprint.Fields = nil
	}
	if p.Fingerprint.Mode == "" {
		p.Fingerprint.Mode = FingerprintBody
	}
	return p
}

// rawFragment is the preset as a raw configuration tree to lay under the
// route's own keys. The preset's fingerprint fields are left out when the
// route sets its mode or fields (mixing the preset's fields with the route's
// mode would make a combination nobody wrote), and its mode when the route
// sets a mode; a route that sets only fields gets the preset's mode.
func (p Preset) rawFragment(route map[string]any) map[string]any {
	p = p.clone()
	sources := make([]any, len(p.Key))
	for i, s := range p.Key {
		sources[i] = map[string]any{s.Kind: s.Arg}
	}
	key := map[string]any{"sources": sources}
	if p.KeyOptional {
		key["required"] = false
	}
	verify := map[string]any{"scheme": p.Scheme}
	ownVerify, _ := route["verify"].(map[string]any)
	if scheme, set := ownVerify["scheme"]; !set || scheme == p.Scheme {
		// The provider's replay window goes with its scheme: a route
		// verifying another way gets that scheme's default.
		if p.Tolerance > 0 {
			verify["tolerance"] = p.Tolerance
		}
		maps.Copy(verify, nonZeroRaw(reflect.ValueOf(p.Verify)))
	}
	frag := map[string]any{
		"key":       key,
		"verify":    verify,
		"retention": p.Retention,
	}
	if len(p.RecordStatuses) > 0 {
		frag["record"] = map[string]any{"statuses": rawList(p.RecordStatuses)}
	}
	if p.Ack != nil {
		frag["async"] = map[string]any{"ack": map[string]any{
			"status": p.Ack.Status, "content_type": p.Ack.ContentType, "body": p.Ack.Body,
		}}
	}
	fp, _ := route["fingerprint"].(map[string]any)
	_, hasMode := fp["mode"]
	_, hasFields := fp["fields"]
	switch {
	case hasMode:
	case hasFields:
		// The route narrowed the fields and left the mode to the preset
		// (SPEC §3: what the route sets wins, the preset fills the rest).
		frag["fingerprint"] = map[string]any{"mode": p.Fingerprint.Mode}
	default:
		f := map[string]any{"mode": p.Fingerprint.Mode}
		if len(p.Fingerprint.Fields) > 0 {
			f["fields"] = rawList(p.Fingerprint.Fields)
		}
		frag["fingerprint"] = f
	}
	return frag
}

// rawList is a list of strings as the raw configuration tree holds it.
func rawList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// nonZeroRaw is toRaw of a struct without its zero fields: a preset's
// settings, laid under the route's without hiding the defaults.
func nonZeroRaw(v reflect.Value) map[string]any {
	m := map[string]any{}
	for i := 0; i < v.NumField(); i++ {
		name := koanfName(v.Type().Field(i))
		if name == "" || v.Field(i).IsZero() {
			continue
		}
		if v.Field(i).Kind() == reflect.Struct {
			m[name] = nonZeroRaw(v.Field(i))
			continue
		}
		m[name] = toRaw(v.Field(i))
	}
	return m
}
