package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// PROVIDERS.md: Alipay resends until it reads the body "success"; an
// application answers "fail" (with a 200, as Alipay's samples do) to be
// sent the notification again. That answer must not be recorded, or
// every resend is replayed "fail" for the whole retention and the
// notification never reaches the application again.
func TestAlipayFailIsNotRecorded(t *testing.T) {
	p := newProviders(t)
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if n == 1 {
			fmt.Fprint(w, "fail") // a transient failure: resend, please
			return
		}
		fmt.Fprint(w, "success")
	})
	var cases []presetCase
	for _, c := range presetCases(p) {
		if c.preset == "alipay" {
			cases = append(cases, c)
		}
	}
	db := dbPath(t)
	g := startGateway(t, routesConfig(t, db, "", "", presetRoutes(up.URL, cases), p.environ))
	form := headers("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	const notifyID = "ac05099524730693a8b330c5ecf72da9786"
	now := time.Now()

	first := post(t, g, "/webhooks/alipay", alipayNotify(t, p.alipayKey, now, "20.00"), form)
	wantOutcome(t, first, http.StatusOK, "released")
	if string(first.body) != "fail" {
		t.Fatalf("first answer %q, want the application's \"fail\"", first.body)
	}
	if n := ledgerRows(t, db); n != 0 {
		t.Fatalf("a \"fail\" answer was recorded (%d rows): Alipay's resends would be replayed \"fail\"", n)
	}

	// Alipay's resend: same notify_id, new notify_time and sign.
	resend := post(t, g, "/webhooks/alipay", alipayNotify(t, p.alipayKey, now.Add(4*time.Minute), "20.00"), form)
	wantOutcome(t, resend, http.StatusOK, "forwarded")
	if string(resend.body) != "success" {
		t.Fatalf("resend answer %q, want \"success\"", resend.body)
	}
	if n := up.count(notifyID); n != 2 {
		t.Fatalf("upstream received the notification %d times, want 2", n)
	}

	again := post(t, g, "/webhooks/alipay", alipayNotify(t, p.alipayKey, now.Add(8*time.Minute), "20.00"), form)
	wantOutcome(t, again, http.StatusOK, "replayed")
	if !strings.EqualFold(string(again.body), "success") || up.count(notifyID) != 2 {
		t.Fatalf("second resend: %q, upstream count %d; want a replayed \"success\" and 2", again.body, up.count(notifyID))
	}
}

// A notification replayed from Paddle's dashboard (or POST
// /notifications/{id}/replay) is a new notification, with a new
// notification_id in the body, for the same event_id. The preset
// fingerprints the body (SPEC §3): such a replay is a mismatch (422), the
// application has the event already. docs/presets.md shows how a route
// fingerprints the event instead, so that replays get the recorded answer:
// this test holds both to what the doc says.
func TestPaddleReplayedNotification(t *testing.T) {
	p := newProviders(t)
	const eventID = "evt_01h8bzakzx3hm2fmen703n5q45"
	notification := func(ntf, eventType, status string) []byte {
		return []byte(`{"event_id":"` + eventID + `","event_type":"` + eventType + `","occurred_at":"2023-08-21T11:57:50.413512Z",` +
			`"notification_id":"` + ntf + `","data":{"id":"txn_01h8bz9wkp6q7b2ju8b8y5ngvw","status":"` + status + `","currency_code":"USD"}}`)
	}
	first := notification("ntf_01h8bzam1z32agrxjwhjgqk8w6", "transaction.completed", "completed")
	replayed := notification("ntf_01h46h1s2zabpkdks7yt4vkgkc", "transaction.completed", "completed")
	other := notification("ntf_01h8c0000000000000000000aa", "transaction.payment_failed", "past_due")
	for _, tc := range []struct {
		name, fingerprint string
		replay            func(t *testing.T, first, again reply)
	}{
		{"preset: body", "", func(t *testing.T, _, again reply) { wantProblem(t, again, 422, "mismatch") }},
		{"route fingerprints the event", `    fingerprint: {mode: fields, fields: ["json:event_type", "json:occurred_at", "json:data.id"]}` + "\n",
			func(t *testing.T, first, again reply) {
				wantOutcome(t, again, http.StatusOK, "replayed")
				sameReply(t, first, again)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t)
			var cases []presetCase
			for _, c := range presetCases(p) {
				if c.preset == "paddle" {
					cases = append(cases, c)
				}
			}
			g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, cases)+tc.fingerprint, p.environ))
			r1 := post(t, g, "/webhooks/paddle", first, verifytest.Paddle(paddleSecret, first, time.Now()))
			wantOutcome(t, r1, http.StatusOK, "forwarded")
			tc.replay(t, r1, post(t, g, "/webhooks/paddle", replayed, verifytest.Paddle(paddleSecret, replayed, time.Now())))
			if n := up.count(eventID); n != 1 {
				t.Fatalf("upstream received event %s %d times, want 1", eventID, n)
			}
			// Another event under the same event_id is key reuse either way.
			wantProblem(t, post(t, g, "/webhooks/paddle", other, verifytest.Paddle(paddleSecret, other, time.Now())), 422, "mismatch")
		})
	}
}
