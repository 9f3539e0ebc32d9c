package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

type eventLogPage struct {
	Records    []map[string]any `json:"records"`
	NextCursor *string          `json:"next_cursor"`
}

type detailJSON struct {
	recordJSON
	Request *struct {
		Method     string              `json:"method"`
		Path       string              `json:"path"`
		Headers    map[string][]string `json:"headers"`
		BodyBase64 string              `json:"body_base64"`
	} `json:"request"`
	Attempts []struct {
		Attempt int    `json:"attempt"`
		Status  *int   `json:"status"`
		Error   string `json:"error"`
	} `json:"attempts"`
}

// The event log through the real gateway and admin listener, on the
// production stores: deliveries paged newest first, a record's request and
// attempts, a held key's timed-out attempt, and the attempts gone with a
// deleted or released record.
func TestAdminEventLog(t *testing.T) {
	s := sharedSetup(t)
	s.mutate = func(c *config.Config) { c.Routes[0].Record.Request, c.Routes[1].Record.Request = true, true }
	g := s.start(t)
	for i := range 5 {
		want(t, deliver(t, g, "/hooks?n="+fmt.Sprint(i), fmt.Sprintf(`{"id":"evt_%d"}`, i), "Authorization", "Bearer app-secret"),
			http.StatusOK, "forwarded")
	}
	var keys []string
	q := "/admin/routes/hooks/records?limit=2"
	for pages := 0; ; pages++ {
		a := adminDo(t, g, http.MethodGet, q, "")
		if a.status != http.StatusOK || pages > 5 {
			t.Fatalf("list: %d %s", a.status, a.body)
		}
		page := decodeJSON[eventLogPage](t, a)
		for _, r := range page.Records {
			keys = append(keys, r["key"].(string))
		}
		if page.NextCursor == nil {
			break
		}
		q = "/admin/routes/hooks/records?limit=2&cursor=" + url.QueryEscape(*page.NextCursor)
	}
	// Deliveries a few milliseconds apart: their order is their time's.
	if strings.Join(keys, ",") != "evt_4,evt_3,evt_2,evt_1,evt_0" {
		t.Fatalf("listed %v, want evt_4 … evt_0", keys)
	}

	d := decodeJSON[detailJSON](t, adminDo(t, g, http.MethodGet, recordURL("hooks", "evt_3"), ""))
	if d.Request == nil || d.Request.Method != "POST" || d.Request.Path != "/hooks?n=3" || d.Request.Headers["Authorization"] != nil ||
		d.Request.BodyBase64 == "" {
		t.Errorf("request %+v, want POST /hooks?n=3 without Authorization", d.Request)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Attempt != 1 || d.Attempts[0].Status == nil || *d.Attempts[0].Status != 200 {
		t.Errorf("attempts %+v, want one 200", d.Attempts)
	}

	open := s.upstream.gate("h-1")
	t.Cleanup(open)
	want(t, deliver(t, g, "/held", `{"id":"h-1"}`), http.StatusGatewayTimeout, "held")
	<-s.upstream.arrived
	open()
	held := decodeJSON[eventLogPage](t, adminDo(t, g, http.MethodGet, "/admin/routes/held/records?state=held", ""))
	if len(held.Records) != 1 || held.Records[0]["key"] != "h-1" {
		t.Fatalf("held list %+v, want h-1", held.Records)
	}
	hd := decodeJSON[detailJSON](t, adminDo(t, g, http.MethodGet, recordURL("held", "h-1"), ""))
	if len(hd.Attempts) != 1 || hd.Attempts[0].Status != nil || hd.Attempts[0].Error == "" {
		t.Errorf("held attempts %+v, want one without status, with its error", hd.Attempts)
	}

	if a := adminDo(t, g, http.MethodDelete, recordURL("hooks", "evt_3"), ""); a.status != http.StatusNoContent {
		t.Fatalf("DELETE %d %s", a.status, a.body)
	}
	if a := adminDo(t, g, http.MethodPost, recordURL("held", "h-1")+"/resolve", `{"action":"release"}`); a.status != http.StatusOK {
		t.Fatalf("release %d %s", a.status, a.body)
	}
	for _, ref := range []idempotency.Ref{{Route: "hooks", Key: "evt_3"}, {Route: "held", Key: "h-1"}} {
		if atts, err := g.Ledger().Attempts(context.Background(), ref); err != nil || len(atts) != 0 {
			t.Errorf("%v: attempts %+v, %v left after the record went", ref, atts, err)
		}
	}
	wantAdminProblem(t, adminDo(t, g, http.MethodGet, "/admin/routes/hooks/records?state=gone", ""), http.StatusBadRequest)
}
