package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A done record whose redelivery waits counts in the console's queued
// depth, which linked to a list of queued records that did not show it:
// the depth now says how many of its deliveries are such redeliveries,
// and the rest is what the queued list holds.
func TestConsoleQueuedDepthAgreesWithTheQueuedList(t *testing.T) {
	up, down := switchedUpstream(t)
	cfg := gwConfig(t, up.URL, dbPath(t), strings.Replace(asyncRoute, "{initial: 5ms, max: 50ms}", "{initial: 1h, max: 1h}", 1), "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_re"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_re", idempotency.StateDone)
	down.Store(true)
	if status, body := adminPost(t, g, "/admin/routes/hooks/records/evt_re/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s", status, body)
	}
	// Its first attempt fails: the next waits an hour.
	testenv.Eventually(t, 10*time.Second, "the redelivery's first attempt", func() bool { return up.count("evt_re") == 2 })
	d, err := g.queueDepths(t0ctx)
	if err != nil || d["hooks"].Queued != 1 {
		t.Fatalf("depths %+v (%v), want 1 queued", d, err)
	}
	status, body := adminCall(t, g, http.MethodGet, "/admin/routes/hooks/records?state=queued", "")
	var list struct{ Records []json.RawMessage }
	if err := json.Unmarshal([]byte(body), &list); status != http.StatusOK || err != nil {
		t.Fatalf("queued list = %d %s", status, body)
	}
	if got := d["hooks"]; got.Redelivering != 1 || got.QueuedRecords() != len(list.Records) {
		t.Fatalf("depth %+v, %d queued records shown; the queued list holds %d", got, got.QueuedRecords(), len(list.Records))
	}
}
