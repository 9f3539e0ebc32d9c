package gateway

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// publicKeyProviders are the key pairs the public-key presets' tests sign
// with; the gateway gets the public halves through ${ENV}, in the form each
// provider's console shows them.
type publicKeyProviders struct {
	discord    ed25519.PrivateKey
	sendgrid   *ecdsa.PrivateKey
	standardV1 ed25519.PrivateKey // Standard Webhooks' asymmetric (v1a) signing key
	environ    []string
}

// Svix secrets as Clerk and Resend hand them out (whsec_ + base64).
const (
	clerkSecret  = "whsec_Y2xlcmstd2ViaG9vay1zZWNyZXQtZm9yLXRlc3Rz"
	resendSecret = "whsec_cmVzZW5kLXdlYmhvb2stc2VjcmV0LWZvci10ZXN0cw=="
)

func newPublicKeyProviders(tb testing.TB) *publicKeyProviders {
	tb.Helper()
	p := &publicKeyProviders{}
	var err error
	if _, p.discord, err = ed25519.GenerateKey(rand.Reader); err != nil {
		tb.Fatal(err)
	}
	if _, p.standardV1, err = ed25519.GenerateKey(rand.Reader); err != nil {
		tb.Fatal(err)
	}
	if p.sendgrid, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		tb.Fatal(err)
	}
	sendgridPub, err := verifytest.PublicKeyBase64(&p.sendgrid.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	p.environ = []string{
		"DISCORD_PUBLIC_KEY=" + verifytest.DiscordPublicKey(p.discord.Public().(ed25519.PublicKey)),
		"SENDGRID_VERIFICATION_KEY=" + sendgridPub,
		"CLERK_WEBHOOK_SECRET=" + clerkSecret,
		"RESEND_WEBHOOK_SECRET=" + resendSecret,
		"STANDARD_WEBHOOKS_PUBLIC_KEY=" + verifytest.StandardPublicKey(p.standardV1.Public().(ed25519.PublicKey)),
	}
	return p
}

// discordInteraction is an application command interaction as Discord
// documents it.
func discordInteraction(id string) []byte {
	return []byte(`{"app_permissions":"442368","application_id":"1201847573910216825","channel_id":"1201848213126348862",` +
		`"data":{"id":"1201850376653209661","name":"refund","options":[{"name":"amount","type":4,"value":1000}],"type":1},` +
		`"guild_id":"1201848212564303982","id":"` + id + `","locale":"en-US",` +
		`"member":{"user":{"id":"53908232506183680","username":"mason","global_name":"Mason"}},` +
		`"token":"aW50ZXJhY3Rpb246MTIwMTg1MDM3NjY1MzIwOTY2MTpGbVhKd0xRb1FPRW5UR0lk","type":2,"version":1}`)
}

// sendgridBatch is an Event Webhook POST: a JSON array of events.
var sendgridBatch = []byte(`[{"email":"ana@example.com","timestamp":1717171717,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>",` +
	`"event":"delivered","category":["receipts"],"sg_event_id":"ZGVsaXZlcmVkLTAtMTIzNDU2Nzg","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0","response":"250 OK"},` +
	`{"email":"ana@example.com","timestamp":1717171790,"event":"open","sg_event_id":"b3Blbi0xLTEyMzQ1Njc4OTA","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",` +
	`"useragent":"Mozilla/5.0","ip":"255.255.255.255"}]`)

// publicKeyPresetCases are the presets of this file, for
// TestPresetsEndToEnd.
func publicKeyPresetCases(p *publicKeyProviders) []presetCase {
	svix := func(secret, id string, body []byte) func(testing.TB, int, time.Time) ([]byte, http.Header) {
		return func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
			h, err := verifytest.Svix(secret, id, body, now)
			if err != nil {
				tb.Fatal(err)
			}
			return body, h
		}
	}
	return []presetCase{
		{
			preset: "discord",
			verify: `public_key: "${DISCORD_PUBLIC_KEY}"`,
			key:    "1201850376653209700",
			window: time.Minute,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				body := discordInteraction("1201850376653209700")
				return body, merged(verifytest.Discord(p.discord, body, now), headers("User-Agent", "Discord-Interactions/1.0 (+https://discord.com)"))
			},
		},
		{
			preset: "sendgrid",
			verify: `public_key: "${SENDGRID_VERIFICATION_KEY}"`,
			key:    bodyHash(sendgridBatch),
			window: 24 * time.Hour,
			deliver: func(tb testing.TB, n int, now time.Time) ([]byte, http.Header) {
				h, err := verifytest.SendGrid(p.sendgrid, sendgridBatch, now)
				if err != nil {
					tb.Fatal(err)
				}
				return sendgridBatch, merged(h, headers("User-Agent", "SendGrid Event API"))
			},
		},
		{
			preset: "clerk",
			verify: `secrets: ["${CLERK_WEBHOOK_SECRET}"]`,
			key:    "msg_2hBQZ1cF0tmmcbY3UhT7rcl34Ww",
			window: 28 * time.Hour,
			deliver: svix(clerkSecret, "msg_2hBQZ1cF0tmmcbY3UhT7rcl34Ww", []byte(`{"data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC","object":"user",`+
				`"email_addresses":[{"email_address":"example@example.org","id":"idn_29w83yL7CwVlJXylYLxcslromF1"}],"created_at":1654012591514},`+
				`"instance_id":"ins_2dKHdr1bXzMB5ks2cMTYrxbZcz5","object":"event","timestamp":1654012591835,"type":"user.created"}`)),
		},
		{
			preset: "resend",
			verify: `secrets: ["${RESEND_WEBHOOK_SECRET}"]`,
			key:    "msg_2pQ6vmdBGo1g9WRl1zVjCJp3xJT",
			window: 18 * time.Hour,
			deliver: svix(resendSecret, "msg_2pQ6vmdBGo1g9WRl1zVjCJp3xJT", []byte(`{"type":"email.delivered","created_at":"2024-11-22T23:41:12.126Z",`+
				`"data":{"created_at":"2024-11-22T23:41:11.894719+00:00","email_id":"56761188-7520-42d8-8898-ff6fc54ce618",`+
				`"from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"Sending this example"}}`)),
		},
	}
}

// forgeryCase is one public-key route and the ways a delivery to it can be
// forged: signed by a key the route does not trust, signed too long ago,
// or carrying a body other than the one signed.
type forgeryCase struct {
	route string
	// sign signs body at t: with the genuine key, or (forged) another one.
	sign func(tb testing.TB, body []byte, t time.Time, forged bool) http.Header
	// body is a delivery with id n, in the provider's format.
	body func(n int) []byte
}

func forgeryCases(p *publicKeyProviders) []forgeryCase {
	_, otherEd, _ := ed25519.GenerateKey(rand.Reader)
	otherEC, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	svix := func(genuine string) func(testing.TB, []byte, time.Time, bool) http.Header {
		return func(tb testing.TB, body []byte, t time.Time, forged bool) http.Header {
			secret := genuine
			if forged {
				secret = "whsec_bm90LXRoZS1wcm92aWRlcnMtc2VjcmV0LWF0LWFsbA=="
			}
			id := fmt.Sprintf("msg_%x", sha256.Sum256(body))[:24]
			h, err := verifytest.Svix(secret, id, body, t)
			if err != nil {
				tb.Fatal(err)
			}
			return h
		}
	}
	event := func(n int) []byte {
		return []byte(fmt.Sprintf(`{"type":"user.updated","data":{"id":"user_%d","amount":1000}}`, n))
	}
	return []forgeryCase{
		{"discord", func(_ testing.TB, body []byte, t time.Time, forged bool) http.Header {
			key := p.discord
			if forged {
				key = otherEd
			}
			return verifytest.Discord(key, body, t)
		}, func(n int) []byte { return discordInteraction(fmt.Sprint(1301850376653209000 + n)) }},
		{"sendgrid", func(tb testing.TB, body []byte, t time.Time, forged bool) http.Header {
			key := p.sendgrid
			if forged {
				key = otherEC
			}
			h, err := verifytest.SendGrid(key, body, t)
			if err != nil {
				tb.Fatal(err)
			}
			return h
		}, func(n int) []byte {
			return []byte(fmt.Sprintf(`[{"email":"bo@example.com","event":"bounce","amount":1000,"sg_event_id":"Ym91bmNl%d"}]`, n))
		}},
		{"clerk", svix(clerkSecret), event},
		{"resend", svix(resendSecret), event},
		{"standard-webhooks-v1a", func(_ testing.TB, body []byte, t time.Time, forged bool) http.Header {
			key := p.standardV1
			if forged {
				key = otherEd
			}
			return verifytest.StandardWebhooksV1a(key, fmt.Sprintf("msg_%x", sha256.Sum256(body))[:24], body, t)
		}, event},
	}
}

// A forged, a stale and a body-modified delivery to each public-key preset
// is refused with 401 before anything is claimed: the upstream hears
// nothing and the ledger gains no row. The genuine delivery sent after
// them is forwarded: the forgeries occupied nothing.
func TestPublicKeyPresetsRefuseForgeries(t *testing.T) {
	p := newPublicKeyProviders(t)
	up := newUpstream(t)
	db := dbPath(t)
	var routes strings.Builder
	for _, c := range publicKeyPresetCases(p) {
		fmt.Fprintf(&routes, "  - name: %[1]s\n    path: /webhooks/%[1]s\n    preset: %[1]s\n    upstream: {url: '%[2]s/%[1]s'}\n    verify:\n      %[3]s\n",
			c.preset, up.URL, c.verify)
	}
	fmt.Fprintf(&routes, "  - name: standard-webhooks-v1a\n    path: /webhooks/standard-webhooks-v1a\n    preset: standard-webhooks\n"+
		"    upstream: {url: '%s/v1a'}\n    verify: {public_key: '${STANDARD_WEBHOOKS_PUBLIC_KEY}'}\n", up.URL)
	g := startGateway(t, routesConfig(t, db, "", "", routes.String(), p.environ))

	for _, c := range forgeryCases(p) {
		t.Run(c.route, func(t *testing.T) {
			path := "/webhooks/" + c.route
			now := time.Now()
			forged := []struct {
				name string
				body []byte
				hdr  http.Header
			}{
				{"signed by another key", c.body(1), c.sign(t, c.body(1), now, true)},
				{"signed 6 minutes ago", c.body(2), c.sign(t, c.body(2), now.Add(-6*time.Minute), false)},
				{"signed 6 minutes ahead", c.body(3), c.sign(t, c.body(3), now.Add(6*time.Minute), false)},
				{"body modified", []byte(strings.Replace(string(c.body(4)), "1000", "9000", 1)), c.sign(t, c.body(4), now, false)},
				{"no signature", c.body(5), nil},
			}
			rows, hits := ledgerRows(t, db), up.total.Load()
			for _, f := range forged {
				if f.name == "body modified" && string(f.body) == string(c.body(4)) {
					t.Fatalf("the modification changed nothing")
				}
				wantProblem(t, post(t, g, path, f.body, f.hdr), 401, "unverified")
			}
			if got := up.total.Load() - hits; got != 0 {
				t.Fatalf("the upstream received %d forged deliveries", got)
			}
			if got := ledgerRows(t, db); got != rows {
				t.Fatalf("forged deliveries left %d ledger rows, want %d", got, rows)
			}
			// The genuine delivery of the modified body's id still gets through.
			wantOutcome(t, post(t, g, path, c.body(4), c.sign(t, c.body(4), time.Now(), false)), 200, "forwarded")
			if got := up.total.Load() - hits; got != 1 {
				t.Fatalf("the upstream received %d deliveries, want the genuine one", got)
			}
		})
	}
}

// Svix itself sends the Standard Webhooks signature under its own header
// names (svix-id, svix-timestamp, svix-signature): the standard-webhooks
// preset keys such a delivery on svix-id, the id its signature covers,
// instead of refusing it as keyless, which Svix would retry until it gave
// the event up.
func TestStandardWebhooksPresetTakesSvixHeaderNames(t *testing.T) {
	up := newUpstream(t)
	routes := fmt.Sprintf("  - name: svix\n    path: /svix\n    preset: standard-webhooks\n    upstream: {url: '%s/svix'}\n"+
		"    verify: {secrets: ['%s']}\n", up.URL, swhSecret)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, nil))
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	body := []byte(`{"type":"invoice.paid","data":{"invoice_id":"inv_8f2a","amount":4200}}`)
	deliver := func() reply {
		h, err := verifytest.Svix(swhSecret, id, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("webhook-id") != "" {
			t.Fatalf("the Svix delivery carries webhook-id: %v", h)
		}
		return post(t, g, "/svix", body, h)
	}
	first := deliver()
	wantOutcome(t, first, 200, "forwarded")
	wantOutcome(t, deliver(), 200, "replayed")
	if n := up.count(id); n != 1 {
		t.Fatalf("the upstream received %d deliveries keyed %s, want 1", n, id)
	}
}

// Discord's PING (type 1) is forwarded like every interaction, and the
// application's {"type":1} goes back to Discord; the PING's id keys it,
// so a repeat is answered from the record.
func TestDiscordPingIsForwarded(t *testing.T) {
	p := newPublicKeyProviders(t)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":1}`)
	})
	routes := fmt.Sprintf("  - name: discord\n    path: /interactions\n    preset: discord\n    upstream: {url: '%s/interactions'}\n"+
		"    verify: {public_key: '${DISCORD_PUBLIC_KEY}'}\n", up.URL)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, p.environ))

	ping := []byte(`{"application_id":"1201847573910216825","id":"1201851111111111111","token":"aW50ZXJhY3Rpb246cGluZw","type":1,"version":1}`)
	first := post(t, g, "/interactions", ping, verifytest.Discord(p.discord, ping, time.Now()))
	wantOutcome(t, first, 200, "forwarded")
	if string(first.body) != `{"type":1}` {
		t.Fatalf("Discord got %q, want the application's PONG", first.body)
	}
	again := post(t, g, "/interactions", ping, verifytest.Discord(p.discord, ping, time.Now()))
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if n := up.count("1201851111111111111"); n != 1 {
		t.Fatalf("upstream received the PING %d times, want 1", n)
	}
}

// A SendGrid batch is the delivery: the same batch signed again (a retry)
// is replayed; another batch sharing an event is another delivery and is
// forwarded, leaving per-event deduplication (sg_event_id) to the
// application as SendGrid asks.
func TestSendGridBatchKey(t *testing.T) {
	p := newPublicKeyProviders(t)
	up := newUpstream(t)
	routes := fmt.Sprintf("  - name: sendgrid\n    path: /events\n    preset: sendgrid\n    upstream: {url: '%s/events'}\n"+
		"    verify: {public_key: '${SENDGRID_VERIFICATION_KEY}'}\n", up.URL)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, p.environ))
	sign := func(body []byte, at time.Time) http.Header {
		h, err := verifytest.SendGrid(p.sendgrid, body, at)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := post(t, g, "/events", sendgridBatch, sign(sendgridBatch, time.Now().Add(-time.Minute)))
	wantOutcome(t, first, 200, "forwarded")
	wantOutcome(t, post(t, g, "/events", sendgridBatch, sign(sendgridBatch, time.Now())), 200, "replayed")

	rebatched := []byte(strings.Replace(string(sendgridBatch), `]`, `,{"email":"cy@example.com","event":"processed","sg_event_id":"cHJvY2Vzc2VkLTI"}]`, 1))
	wantOutcome(t, post(t, g, "/events", rebatched, sign(rebatched, time.Now())), 200, "forwarded")
	if a, b := up.count(bodyHash(sendgridBatch)), up.count(bodyHash(rebatched)); a != 1 || b != 1 {
		t.Fatalf("upstream received the batch %d and the rebatched one %d times, want 1 and 1", a, b)
	}
}

// A secret stored with a trailing newline (a Kubernetes Secret made from a
// file written by echo) verifies as the secret it is: no provider signs
// with whitespace at either end, and each delivery refused 401 would be
// retried by the provider until it gave the event up.
func TestSecretWithSurroundingWhitespaceVerifies(t *testing.T) {
	up := newUpstream(t)
	routes := fmt.Sprintf("  - name: github\n    path: /github\n    preset: github\n    upstream: {url: '%s/github'}\n"+
		"    verify: {secrets: ['${GITHUB_WEBHOOK_SECRET}']}\n", up.URL)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, []string{"GITHUB_WEBHOOK_SECRET= " + githubSecret + "\n"}))
	body := []byte(`{"action":"opened","number":7}`)
	wantOutcome(t, post(t, g, "/github", body, merged(verifytest.GitHub(githubSecret, body), headers("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event", "pull_request"))), 200, "forwarded")
	if n := up.total.Load(); n != 1 {
		t.Fatalf("the upstream received %d deliveries, want 1", n)
	}
}
