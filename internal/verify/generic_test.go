package verify_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/hookstamp/hookstamp/internal/verify"
)

// hexMAC and b64MAC sign independently of the package under test.
func hexMAC(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func b64MAC(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// zoomOptions is scheme hmac configured as Zoom signs.
func zoomOptions(secrets ...string) verify.Options {
	return verify.Options{Scheme: verify.SchemeHMAC, Secrets: secrets, Header: "X-Zm-Signature", Prefix: "v0=",
		Template: "v0:{header:X-Zm-Request-Timestamp}:{body}", Timestamp: verify.TimestampSource{Header: "X-Zm-Request-Timestamp"},
		Tolerance: tolerance, Now: clock}
}

func zoomRequest(key string, at time.Time, payload string) verify.MapRequest {
	ts := strconv.FormatInt(at.Unix(), 10)
	return req(http.Header{"X-Zm-Request-Timestamp": {ts}, "X-Zm-Signature": {"v0=" + hexMAC(key, "v0:"+ts+":"+payload)}}, []byte(payload))
}

func TestGenericTemplateWithTimestamp(t *testing.T) {
	v := newVerifier(t, zoomOptions("old", "new"))
	payload := string(body)
	tamper := func(r verify.MapRequest) verify.MapRequest {
		r.Payload = []byte(strings.Replace(payload, "1000", "9000", 1))
		return r
	}
	restamp := func(r verify.MapRequest) verify.MapRequest {
		r.Headers = r.Headers.Clone()
		r.Headers.Set("X-Zm-Request-Timestamp", strconv.FormatInt(now.Unix()+1, 10))
		return r
	}
	for _, tc := range []struct {
		name   string
		r      verify.MapRequest
		reason string
	}{
		{"signed by the old secret", zoomRequest("old", now, payload), ""},
		{"signed by the new secret", zoomRequest("new", now.Add(-tolerance+time.Second), payload), ""},
		{"forged", zoomRequest("wrong", now, payload), "no signature matched"},
		{"stale", zoomRequest("old", now.Add(-tolerance-time.Second), payload), "timestamp outside tolerance"},
		{"future", zoomRequest("old", now.Add(tolerance+time.Second), payload), "timestamp outside tolerance"},
		{"body modified", tamper(zoomRequest("old", now, payload)), "no signature matched"},
		{"timestamp modified", restamp(zoomRequest("old", now, payload)), "no signature matched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(tc.r)
			wantVerdict(t, err, tc.reason)
		})
	}
}

func TestGenericMillisecondTimestampAndURL(t *testing.T) {
	const url = "https://example.com/hubspot?portal=1"
	o := verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"s"}, Header: "X-HubSpot-Signature-v3", Encoding: "base64",
		Template: "POST{url}{body}{header:X-HubSpot-Request-Timestamp}", URL: url,
		Timestamp: verify.TimestampSource{Header: "X-HubSpot-Request-Timestamp", Unit: "ms"}, Tolerance: tolerance, Now: clock}
	v := newVerifier(t, o)
	sign := func(at time.Time, signedURL string) verify.MapRequest {
		ms := strconv.FormatInt(at.UnixMilli(), 10)
		return req(http.Header{"X-Hubspot-Request-Timestamp": {ms},
			"X-Hubspot-Signature-V3": {b64MAC([]byte("s"), "POST"+signedURL+string(body)+ms)}}, body)
	}
	if err := v.Verify(sign(now.Add(-time.Minute), url)); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	wantUnverified(t, v.Verify(sign(now.Add(-tolerance-time.Millisecond), url)), "timestamp outside tolerance")
	wantUnverified(t, v.Verify(sign(now, "https://example.com/other")), "no signature matched")
}

func TestGenericSeveralCandidatesInOneHeader(t *testing.T) {
	o := verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"s"}, Header: "X-Sig", Separator: ",", Prefix: "v1="}
	v := newVerifier(t, o)
	good := "v1=" + hexMAC("s", string(body))
	for _, tc := range []struct{ name, header, reason string }{
		{"alone", good, ""},
		{"after another secret's", "v1=" + hexMAC("other", string(body)) + ", " + good, ""},
		{"after other versions", "v0=abcd,t=12," + good, ""},
		{"only foreign ones", "v1=" + hexMAC("other", string(body)) + ",v2=" + hexMAC("s", string(body)), "no signature matched"},
		{"none decodable", "v1=zz,v1=", "malformed X-Sig header"},
		{"beyond the sixteenth", strings.Repeat("v1=00,", 16) + good, "no signature matched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(req(http.Header{"X-Sig": {tc.header}}, body))
			wantVerdict(t, err, tc.reason)
		})
	}
}

// mailgunBody is a Mailgun event: the signature, its timestamp and token
// travel in the body, and sign timestamp + token only.
func mailgunBody(key string, at time.Time, eventID string) []byte {
	ts := strconv.FormatInt(at.Unix(), 10)
	tok := "tok-" + eventID
	return []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + tok + `","signature":"` + hexMAC(key, ts+tok) +
		`"},"event-data":{"id":"` + eventID + `","event":"delivered"}}`)
}

func TestGenericSignatureInTheBody(t *testing.T) {
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"k"}, JSON: "signature.signature",
		Template: "{json:signature.timestamp}{json:signature.token}", Timestamp: verify.TimestampSource{JSON: "signature.timestamp"},
		Tolerance: tolerance, Now: clock})
	good := mailgunBody("k", now, "ev1")
	for _, tc := range []struct {
		name   string
		body   string
		reason string
	}{
		{"signed", string(good), ""},
		{"forged", string(mailgunBody("x", now, "ev1")), "no signature matched"},
		{"stale", string(mailgunBody("k", now.Add(-time.Hour), "ev1")), "timestamp outside tolerance"},
		{"token modified", strings.Replace(string(good), "tok-ev1", "tok-ev2", 1), "no signature matched"},
		{"signature repeated", strings.Replace(string(good), `"signature":{`, `"signature":{"signature":"00",`, 1), "more than once"},
		{"signature object repeated", strings.Replace(string(good), `{"signature":`, `{"signature":{},"signature":`, 1), "more than once"},
		{"signature not a string", `{"signature":{"signature":5}}`, "not a string"},
		{"no signature", `{"event-data":{}}`, "missing signature.signature"},
		{"not JSON", `signature=1`, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(req(nil, []byte(tc.body)))
			wantVerdict(t, err, tc.reason)
		})
	}
}

// adyenHMACKey is Adyen's published HMAC key (adyen-go's tests,
// PROVIDERS.md); adyenItem is the notification item it signs there.
const (
	adyenHMACKey = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
	adyenItem    = `{"NotificationRequestItem":{"additionalData":{"hmacSignature":"ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="},` +
		`"amount":{"currency":"EUR","value":1000},"eventCode":"EVENT","merchantAccountCode":"merchantAccount",` +
		`"merchantReference":"reference","originalReference":"originalReference","pspReference":"pspReference","success":"true"}}`
)

// adyenOptions are the adyen preset's verify settings.
func adyenOptions() verify.Options {
	const p = "notificationItems.0.NotificationRequestItem."
	return verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{adyenHMACKey}, SecretEncoding: "hex", Encoding: "base64",
		JSON: p + "additionalData.hmacSignature", Single: []string{"notificationItems"},
		Template: "{json:" + p + "pspReference}:{json:" + p + "originalReference}:{json:" + p + "merchantAccountCode}:" +
			"{json:" + p + "merchantReference}:{json:" + p + "amount.value}:{json:" + p + "amount.currency}:" +
			"{json:" + p + "eventCode}:{json:" + p + "success}"}
}

func TestGenericHexSecretAndSingleItem(t *testing.T) {
	v := newVerifier(t, adyenOptions())
	one := `{"live":"false","notificationItems":[` + adyenItem + `]}`
	if err := v.Verify(req(nil, []byte(one))); err != nil {
		t.Fatalf("Adyen's vector: Verify = %v", err)
	}
	two := `{"live":"false","notificationItems":[` + adyenItem + `,` + adyenItem + `]}`
	wantUnverified(t, v.Verify(req(nil, []byte(two))), "exactly one element")
	wantUnverified(t, v.Verify(req(nil, []byte(strings.Replace(one, `"value":1000`, `"value":9000`, 1)))), "no signature matched")
}

// A member that the application's parser may read in place of a signed
// one, being spelled in another case (Go's encoding/json and Json.NET
// match names so, the last member winning), is refused, wherever it is on
// the signed path; one merely sharing a prefix is not.
func TestAdyenCaseVariantsUnverified(t *testing.T) {
	v := newVerifier(t, adyenOptions())
	forged := `{"NotificationRequestItem":{"pspReference":"FORGED","success":"true","amount":{"currency":"EUR","value":99999999}}}`
	insert := func(member string) string {
		return `{"live":"false","notificationItems":[` + strings.Replace(adyenItem, `"success":"true"`, `"success":"true",`+member, 1) + `]}`
	}
	for _, tc := range []struct{ name, body string }{
		{"items in another case", `{"live":"false","notificationItems":[` + adyenItem + `],"NotificationItems":[` + forged + `]}`},
		{"amount in another case", insert(`"Amount":{"currency":"EUR","value":99999999}`)},
		{"success with a long s", insert(`"ſuccess":"false"`)},
		{"value in another case, escaped", strings.Replace(insert(`"x":0`), `"value":1000`, `"value":1000,"\u0076ALUE":1`, 1)},
		{"signature in another case", insert(`"AdditionalData":{}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUnverified(t, v.Verify(req(nil, []byte(tc.body))), "more than once, or in another case")
		})
	}
	near := insert(`"amountDetails":{"value":1},"successful":"false","pspReferences":["x"],"Notes":"n"`)
	near = strings.Replace(near, `{"live"`, `{"notificationItemsCount":1,"live"`, 1)
	if err := v.Verify(req(nil, []byte(near))); err != nil {
		t.Fatalf("names sharing a prefix with signed ones: Verify = %v", err)
	}
}

func TestToken(t *testing.T) {
	hv := newVerifier(t, verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"old-token", "new-token"}, Header: "X-Gitlab-Token"})
	jv := newVerifier(t, verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"tok"}, JSON: "header.token"})
	for _, tc := range []struct {
		name   string
		v      verify.Verifier
		r      verify.MapRequest
		reason string
	}{
		{"header, old token", hv, req(http.Header{"X-Gitlab-Token": {"old-token"}}, body), ""},
		{"header, new token", hv, req(http.Header{"X-Gitlab-Token": {"new-token"}}, body), ""},
		{"header, wrong token", hv, req(http.Header{"X-Gitlab-Token": {"old-token2"}}, body), "does not match"},
		{"header, prefix of the token", hv, req(http.Header{"X-Gitlab-Token": {"old"}}, body), "does not match"},
		{"header missing", hv, req(nil, body), "missing X-Gitlab-Token"},
		{"header repeated", hv, req(http.Header{"X-Gitlab-Token": {"old-token", "old-token"}}, body), "duplicated"},
		{"body", jv, req(nil, []byte(`{"header":{"token":"tok","event_id":"e"}}`)), ""},
		{"body, wrong token", jv, req(nil, []byte(`{"header":{"token":"tik"}}`)), "does not match"},
		{"body, token repeated", jv, req(nil, []byte(`{"header":{"token":"x","token":"tok"}}`)), "more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Verify(tc.r)
			wantVerdict(t, err, tc.reason)
		})
	}
}

func TestZoomChallenge(t *testing.T) {
	o := zoomOptions("old", "new")
	o.Challenge = verify.ChallengeZoom
	ch, ok := newVerifier(t, o).(verify.Challenger)
	if !ok {
		t.Fatal("a verifier with challenge zoom is not a Challenger")
	}
	validation := `{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`
	ans, err := ch.Challenge(zoomRequest("new", now, validation))
	if err != nil || ans == nil {
		t.Fatalf("Challenge = %v, %v", ans, err)
	}
	want := `{"encryptedToken":"` + hexMAC("new", "qgg8vlvZRS6UYooatFL8Aw") + `","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}`
	if string(ans.Body) != want || ans.ContentType != "application/json" {
		t.Fatalf("answer %s %q, want %q", ans.ContentType, ans.Body, want)
	}
	_, err = ch.Challenge(zoomRequest("wrong", now, validation))
	wantUnverified(t, err, "no signature matched")
	if ans, err := ch.Challenge(zoomRequest("old", now, string(body))); ans != nil || err != nil {
		t.Fatalf("an event is taken for the handshake: %v, %v", ans, err)
	}
}

func TestLarkChallenge(t *testing.T) {
	ch := newVerifier(t, verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"vtok"}, JSON: "header.token",
		Challenge: verify.ChallengeLark}).(verify.Challenger)
	ans, err := ch.Challenge(req(nil, []byte(`{"challenge":"ajls384kdjx98XX","token":"vtok","type":"url_verification"}`)))
	if err != nil || ans == nil || string(ans.Body) != `{"challenge":"ajls384kdjx98XX"}` {
		t.Fatalf("Challenge = %+v, %v", ans, err)
	}
	_, err = ch.Challenge(req(nil, []byte(`{"challenge":"x","token":"other","type":"url_verification"}`)))
	wantUnverified(t, err, "does not match")
}

func TestNewRejectsBadGenericOptions(t *testing.T) {
	base := func(f func(*verify.Options)) verify.Options {
		o := verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"s"}}
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		o    verify.Options
		want string
	}{
		{"bad template", base(func(o *verify.Options) { o.Template = "{nope}" }), "template: "},
		{"url without {url}", base(func(o *verify.Options) { o.URL = "https://x.test/" }), "url: the template has no {url}"},
		{"{url} without url", base(func(o *verify.Options) { o.Template = "{url}{body}" }), "url: required"},
		{"header and json", base(func(o *verify.Options) { o.Header, o.JSON = "X-S", "sig" }), "json: "},
		{"json not plain", base(func(o *verify.Options) { o.JSON = "a.#" }), "json: "},
		{"separator with json", base(func(o *verify.Options) { o.JSON, o.Separator = "sig", "," }), "separator: "},
		{"timestamp both", base(func(o *verify.Options) { o.Timestamp = verify.TimestampSource{Header: "T", JSON: "t"} }), "timestamp: "},
		{"timestamp unit", base(func(o *verify.Options) { o.Timestamp = verify.TimestampSource{Header: "T", Unit: "us"} }), "timestamp.unit: "},
		{"unit alone", base(func(o *verify.Options) { o.Timestamp = verify.TimestampSource{Unit: "ms"} }), "timestamp.unit: "},
		{"secret not hex", base(func(o *verify.Options) { o.SecretEncoding = "hex"; o.Secrets = []string{"xyz"} }), "secrets[0]: not hex"},
		{"secret encoding", base(func(o *verify.Options) { o.SecretEncoding = "rot13" }), "secret_encoding: "},
		{"single not plain", base(func(o *verify.Options) { o.Single = []string{"a|b"} }), "single[0]: "},
		{"template on stripe", verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{"s"}, Template: "{body}"}, "template: only used by schemes hmac, ed25519 and ecdsa"},
		{"json on github", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"s"}, JSON: "sig"}, "json: only used by schemes hmac, ed25519, ecdsa and token"},
		{"header on github", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"s"}, Header: "X-My-Sig"}, "header: only used by schemes hmac, ed25519, ecdsa and token"},
		{"prefix on stripe", verify.Options{Scheme: verify.SchemeStripe, Secrets: []string{"s"}, Prefix: "v1="}, "prefix: only used by schemes hmac, ed25519 and ecdsa"},
		{"encoding on shopify", verify.Options{Scheme: verify.SchemeShopify, Secrets: []string{"s"}, Encoding: "base64"}, "encoding: only used by schemes hmac, ed25519 and ecdsa"},
		{"algorithm on github", verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"s"}, Algorithm: "sha1"}, "algorithm: only used by scheme hmac"},
		{"algorithm on ed25519", verify.Options{Scheme: verify.SchemeEd25519, Header: "X-Sig", Algorithm: "sha1"}, "algorithm: only used by scheme hmac"},
		{"token without header", verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"s"}}, "header: required"},
		{"token without secret", verify.Options{Scheme: verify.SchemeToken, Header: "X-T"}, "secrets: "},
		{"zoom challenge on token", verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"s"}, Header: "X-T", Challenge: "zoom"}, "challenge: zoom needs scheme hmac"},
		{"unknown challenge", base(func(o *verify.Options) { o.Challenge = "discord" }), "challenge: unknown"},
		{"challenge_token without meta", base(func(o *verify.Options) { o.ChallengeToken = "vt" }), "challenge_token: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.New(tc.o)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

// FuzzBodySignature's contract, for a signature carried in the body: Verify
// never panics and fails only with a rejection; a body it accepts names
// each signed member once, and its signature is the MAC (computed here,
// independently) of the signed members' values.
func FuzzBodySignature(f *testing.F) {
	f.Add(mailgunBody("k", now, "ev1"))
	f.Add([]byte(`{"signature":{"timestamp":"1","token":"t","signature":"zz"}}`))
	f.Add([]byte(`{"signature":{"timestamp":1,"token":["t"],"signature":"00"},"signature":{}}`))
	f.Add([]byte(`{"signature":{"timestamp":"1","token":"t","Token":"u","signature":"zz"}}`))
	f.Add([]byte(`{"signature":{"timestamp":"1","token":"t","signature":"zz"},"ſignature":{}}`))
	v := newVerifier(f, verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"k"}, JSON: "signature.signature",
		Template: "{json:signature.timestamp}{json:signature.token}"})
	f.Fuzz(func(t *testing.T, body []byte) {
		err := v.Verify(req(nil, body))
		if err != nil {
			if !errors.Is(err, verify.ErrUnverified) {
				t.Fatalf("Verify: %v is not a rejection", err)
			}
			return
		}
		for _, p := range []string{"signature.signature", "signature.timestamp", "signature.token"} {
			if verify.DuplicateOnPath(body, p) {
				t.Fatalf("accepted a body naming %s twice: %s", p, body)
			}
		}
		sig := gjson.GetBytes(body, "signature.signature").Str
		ts, tok := gjson.GetBytes(body, "signature.timestamp"), gjson.GetBytes(body, "signature.token")
		if sig != hexMAC("k", scalar(ts)+scalar(tok)) && !strings.EqualFold(sig, hexMAC("k", scalar(ts)+scalar(tok))) {
			t.Fatalf("accepted a signature that is not the MAC of the signed members: %s", body)
		}
	})
}

// scalar is how a template writes a JSON value: a string unescaped, a
// number or boolean as written, null or absent as nothing.
func scalar(r gjson.Result) string {
	if r.Type == gjson.String {
		return r.Str
	}
	if r.Type == gjson.Null {
		return ""
	}
	return r.Raw
}

func TestMetaChallenge(t *testing.T) {
	ch := newVerifier(t, verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"app"}, Challenge: verify.ChallengeMeta,
		ChallengeToken: "vt"}).(verify.Challenger)
	check := func(method, token string) verify.MapRequest {
		return verify.MapRequest{HTTPMethod: method, URLQuery: url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1158201444"}, "hub.verify_token": {token}}}
	}
	ans, err := ch.Challenge(check("GET", "vt"))
	if err != nil || ans == nil || string(ans.Body) != "1158201444" {
		t.Fatalf("Challenge = %+v, %v", ans, err)
	}
	_, err = ch.Challenge(check("GET", "vt2"))
	wantUnverified(t, err, "hub.verify_token does not match")
	if ans, err := ch.Challenge(check("POST", "vt")); ans != nil || err != nil {
		t.Fatalf("a POST is taken for the subscription check: %v, %v", ans, err)
	}
	_, err = verify.New(verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"app"}, Challenge: verify.ChallengeMeta})
	if err == nil || !strings.HasPrefix(err.Error(), "challenge_token: required") {
		t.Fatalf("New without challenge_token = %v", err)
	}
}

// A body nested past extract.MaxJSONDepth is refused as JSON before any
// recursive parser sees it: megabytes of '[' took seconds of CPU each and,
// past about 9 MiB, overflowed the stack and killed the gateway. Every
// verifier that reads the body as JSON is reached before a signature is
// checked.
func TestDeeplyNestedBodyIsNotJSON(t *testing.T) {
	deep := bytes.Repeat([]byte("["), 10<<20)
	zoom := zoomOptions("k")
	zoom.Challenge = verify.ChallengeZoom
	inBody := verify.Options{Scheme: verify.SchemeHMAC, Secrets: []string{"k"}, JSON: "signature.signature",
		Template: "{json:signature.timestamp}{json:signature.token}"}
	lark := verify.Options{Scheme: verify.SchemeToken, Secrets: []string{"vtok"}, JSON: "header.token", Challenge: verify.ChallengeLark}

	if ans, err := newVerifier(t, zoom).(verify.Challenger).Challenge(req(nil, deep)); ans != nil || err != nil {
		t.Errorf("zoom: taken for a handshake: %v, %v", ans, err)
	}
	if ans, err := newVerifier(t, lark).(verify.Challenger).Challenge(req(nil, deep)); ans != nil || err != nil {
		t.Errorf("lark: taken for a handshake: %v, %v", ans, err)
	}
	wantVerdict(t, newVerifier(t, inBody).Verify(req(nil, deep)), "not valid JSON")
	wantVerdict(t, newVerifier(t, lark).Verify(req(nil, deep)), "not valid JSON")
}
