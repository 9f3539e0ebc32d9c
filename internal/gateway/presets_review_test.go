package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/extract"
)

// presetKey is the key the preset's sources give a JSON body, as the
// gateway extracts it.
func presetKey(preset string, body []byte) string {
	p, ok := config.LookupPreset(preset)
	if !ok {
		panic("no preset " + preset)
	}
	sources := make([]extract.Source, len(p.Key))
	for i, s := range p.Key {
		sources[i] = extract.Source{Kind: s.Kind, Arg: s.Arg}
	}
	e, err := extract.NewExtractor(preset, sources, 255)
	if err != nil {
		panic(err)
	}
	key, err := e.Key(extract.MapRequest{Headers: map[string]string{"Content-Type": "application/json"}, RawBody: body}, nil)
	if err != nil || key == nil {
		panic(fmt.Sprintf("preset %s keys %s as %q, %v", preset, body, key, err))
	}
	return string(key)
}

// hubspotEvent is one event of a HubSpot batch: what identifies it.
type hubspotEvent struct {
	eventID, subscriptionID, occurredAt int64
}

// hubspotBody is a batch of events at attempt (HubSpot counts it in every
// event); resent writes each event's members in another order and with
// other white space, as a re-serialised retry might.
func hubspotBody(attempt int, resent bool, events ...hubspotEvent) []byte {
	parts := make([]string, len(events))
	for i, e := range events {
		if resent {
			parts[i] = fmt.Sprintf(`{ "attemptNumber": %d, "changeSource": "CRM", "propertyValue": "customer", "propertyName": "lifecyclestage",`+
				` "objectId": 123, "subscriptionType": "contact.propertyChange", "occurredAt": %d, "appId": 1160452, "portalId": 62515,`+
				` "subscriptionId": %d, "eventId": %d }`, attempt, e.occurredAt, e.subscriptionID, e.eventID)
			continue
		}
		parts[i] = fmt.Sprintf(`{"eventId":%d,"subscriptionId":%d,"portalId":62515,"appId":1160452,"occurredAt":%d,`+
			`"subscriptionType":"contact.propertyChange","attemptNumber":%d,"objectId":123,"propertyName":"lifecyclestage",`+
			`"propertyValue":"customer","changeSource":"CRM"}`, e.eventID, e.subscriptionID, e.occurredAt, attempt)
	}
	sep := ","
	if resent {
		sep = ",\n  "
	}
	return []byte("[" + strings.Join(parts, sep) + "]")
}

// HubSpot's eventId is not unique (it goes with subscriptionId), and a
// batch is not a fixed set of events: a batch is keyed by every event in
// it. Its retry is answered from the record; a batch with any other set
// of events reaches the application, where a duplicate event is
// deduplicated, instead of being replayed a batch it never saw.
func TestHubSpotPresetKeysEveryEventOfTheBatch(t *testing.T) {
	up := newUpstream(t)
	routes := presetRoutes(up.URL, []presetCase{{preset: "hubspot", verify: "secrets: [\"${HUBSPOT_CLIENT_SECRET}\"]\n      url: " + hubspotURL}})
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, waveTwoEnv))
	deliver := func(body []byte) reply {
		return post(t, g, "/webhooks/hubspot", body, hubspotHeaders(hubspotSecret, hubspotURL, time.Now(), body))
	}
	a := hubspotEvent{eventID: 1912631245, subscriptionID: 2381011, occurredAt: 1718000000123}
	b := hubspotEvent{eventID: 1912631246, subscriptionID: 2381011, occurredAt: 1718000000456}
	c := hubspotEvent{eventID: 1912631247, subscriptionID: 2381011, occurredAt: 1718000000789}
	otherSubscription := hubspotEvent{eventID: a.eventID, subscriptionID: 2381012, occurredAt: 1718000000123}

	first := deliver(hubspotBody(0, false, a, b))
	wantOutcome(t, first, 200, "forwarded")
	retry := deliver(hubspotBody(1, true, a, b))
	wantOutcome(t, retry, 200, "replayed")
	sameReply(t, first, retry)
	if n := up.total.Load(); n != 1 {
		t.Fatalf("upstream received %d batches after the retry, want 1", n)
	}

	for name, body := range map[string][]byte{
		"a batch with one more event":                        hubspotBody(1, false, a, b, c),
		"another subscription's event with the same eventId": hubspotBody(0, false, otherSubscription),
	} {
		if r := deliver(body); r.status != 200 || r.outcome() != "forwarded" {
			t.Errorf("%s: %d %q, want 200 forwarded", name, r.status, r.outcome())
		}
	}
	if n := up.total.Load(); n != 3 {
		t.Fatalf("upstream received %d batches, want 3: the rebatched one and the other subscription's", n)
	}
}

// presetCaseOf is the end-to-end case of preset.
func presetCaseOf(tb testing.TB, p *providers, preset string) presetCase {
	tb.Helper()
	for _, c := range slices.Concat(presetCases(p), waveTwoCases(), publicKeyPresetCases(p.publicKey)) {
		if c.preset == preset {
			return c
		}
	}
	tb.Fatalf("no case for preset %s", preset)
	return presetCase{}
}

// An application that could not process a WeChat Pay notification answers
// 4XX with {"code":"FAIL"} to be notified again; one that refuses a PayPal
// delivery the gateway could not verify answers 4xx too. Neither answer is
// recorded, so the provider's next attempt reaches the application; its
// 200 is recorded and replayed. A route that lists its own final statuses
// keeps them.
func TestPresetsRecordOnlySuccesses(t *testing.T) {
	p := newProviders(t)
	tests := []struct {
		preset, record string
		outcomes       []string // of attempts 1, 2 and 3
		forwards       int
	}{
		{"wechatpay", "", []string{"400 released", "200 forwarded", "200 replayed"}, 2},
		{"paypal", "", []string{"400 released", "200 forwarded", "200 replayed"}, 2},
		{"wechatpay", `["2xx", "4xx"]`, []string{"400 forwarded", "400 replayed", "400 replayed"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.preset+" "+tt.record, func(t *testing.T) {
			c := presetCaseOf(t, p, tt.preset)
			up := newUpstream(t)
			up.setReply(func(w http.ResponseWriter, _ *http.Request, n int) {
				w.Header().Set("Content-Type", "application/json")
				if n == 1 {
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprint(w, `{"code":"FAIL","message":"order not found yet"}`)
					return
				}
				fmt.Fprintf(w, `{"code":"SUCCESS","n":%d}`, n)
			})
			routes := presetRoutes(up.URL, []presetCase{c})
			if tt.record != "" {
				routes += "    record:\n      statuses: " + tt.record + "\n"
			}
			g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, p.environ))
			for i, want := range tt.outcomes {
				body, hdr := c.deliver(t, i+1, time.Now())
				r := post(t, g, "/webhooks/"+c.preset, body, hdr)
				if got := fmt.Sprintf("%d %s", r.status, r.outcome()); got != want {
					t.Fatalf("attempt %d: %s, want %s; body %s", i+1, got, want, r.body)
				}
			}
			if n := up.count(c.key); n != tt.forwards {
				t.Fatalf("upstream received %d attempts, want %d", n, tt.forwards)
			}
		})
	}
}
