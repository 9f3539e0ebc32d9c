package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

var logT0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// seedLog commits n done records on route pay, a minute apart from logT0,
// keys evt_00…, and returns them newest first.
func seedLog(tb testing.TB, e *env, n int) []string {
	tb.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("evt_%02d", i)
		e.commit(tb, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: k}, State: idempotency.StateDone,
			Response: idempotency.Response{Status: 200, Body: []byte("secret body")}, CreatedAt: logT0.Add(time.Duration(i) * time.Minute)})
		keys = append([]string{k}, keys...)
	}
	return keys
}

// listKeys pages through the list at query (without cursor) and returns
// the keys served.
func listKeys(tb testing.TB, e *env, query string) []string {
	tb.Helper()
	var keys []string
	cursor := ""
	for range 50 {
		q := query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(tb, http.MethodGet, "/admin/routes/pay/records?"+q, token, "")
		if r.status != http.StatusOK {
			tb.Fatalf("list %s: %d %s", q, r.status, r.body)
		}
		var raw struct {
			Records    []map[string]any `json:"records"`
			NextCursor *string          `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &raw); err != nil {
			tb.Fatal(err)
		}
		for _, rec := range raw.Records {
			if _, ok := rec["body_base64"]; ok {
				tb.Fatalf("listed record has a body: %v", rec)
			}
			keys = append(keys, rec["key"].(string))
		}
		if raw.NextCursor == nil {
			return keys
		}
		cursor = *raw.NextCursor
	}
	tb.Fatal("the list never ended")
	return nil
}

func TestListRecordsPagesAndFilters(t *testing.T) {
	e := newEnv(t, nil)
	all := seedLog(t, e, 7)
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "held_1"}, State: idempotency.StateHeld,
		CreatedAt: logT0.Add(150 * time.Second)})
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "ship", Key: "evt_ship"}, State: idempotency.StateDone,
		Response: idempotency.Response{Status: 200}, CreatedAt: logT0})
	withHeld := slices.Insert(slices.Clone(all), 4, "held_1")
	tests := []struct {
		query string
		want  []string
	}{
		{"limit=3", withHeld},
		{"", withHeld},
		{"state=held", []string{"held_1"}},
		{"state=done&limit=2", all},
		{"key_prefix=held", []string{"held_1"}},
		{"since=" + logT0.Add(2*time.Minute).Format(time.RFC3339) + "&until=" + logT0.Add(4*time.Minute).Format(time.RFC3339),
			[]string{"evt_03", "held_1", "evt_02"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			if got := listKeys(t, e, tt.query); !slices.Equal(got, tt.want) {
				t.Errorf("list %q = %v, want %v", tt.query, got, tt.want)
			}
		})
	}
}

func TestListRecordsRefusesBadFilters(t *testing.T) {
	e := newEnv(t, nil)
	for _, q := range []string{
		"state=finished", "since=yesterday", "until=2026-12-05", "limit=0", "limit=501", "limit=ten",
		"status=dead", "cursor=forged", "limit=1&limit=2",
		"since=2026-12-05T10:00:00Z&until=2026-12-05T10:00:00Z", "key_prefix=%00",
	} {
		t.Run(q, func(t *testing.T) {
			wantProblem(t, e.do(t, http.MethodGet, "/admin/routes/pay/records?"+q, token, ""), http.StatusBadRequest)
		})
	}
	wantProblem(t, e.do(t, http.MethodGet, "/admin/routes/nope/records", token, ""), http.StatusNotFound)
	wantProblem(t, e.do(t, http.MethodGet, "/admin/routes/pay/records", "", ""), http.StatusUnauthorized)
	wantProblem(t, e.do(t, http.MethodPost, "/admin/routes/pay/records", token, ""), http.StatusMethodNotAllowed)
}

// nextAttempts is a Queue answering from a map.
type nextAttempts map[idempotency.Ref]time.Time

func (n nextAttempts) NextAttempt(_ context.Context, ref idempotency.Ref) (time.Time, bool, error) {
	at, ok := n[ref]
	return at, ok, nil
}

func TestRecordDetailShowsRequestAttemptsAndNextAttempt(t *testing.T) {
	ref := idempotency.Ref{Route: "pay", Key: "evt_detail"}
	next := logT0.Add(time.Hour)
	e := newEnv(t, func(o *Options) { o.Queue = nextAttempts{ref: next} })
	req := &idempotency.Request{Method: "POST", Path: "/up?x=1",
		Headers: http.Header{"X-Sig": {"a"}, "X-Multi": {"1", "2"}, "Authorization": {"Bearer leak"}}, Body: []byte(`{"id":1}`)}
	now := logT0
	a := idempotency.Attempt{Ref: ref, StartedAt: now, Duration: 1200 * time.Millisecond, Status: 200, Replica: "r1"}
	if err := e.ledger.AddAttempt(context.Background(), idempotency.Attempt{Ref: ref, StartedAt: now.Add(-time.Minute),
		Duration: 5 * time.Second, Error: "upstream timeout", Replica: "r1"}); err != nil {
		t.Fatal(err)
	}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200},
		CreatedAt: now, Request: req, Attempt: &a})

	r := e.do(t, http.MethodGet, recordPath("pay", ref.Key), token, "")
	if r.status != http.StatusOK {
		t.Fatalf("detail: %d %s", r.status, r.body)
	}
	got := decode[RecordDetail](t, r)
	wantReq := &StoredRequest{Method: "POST", Path: "/up?x=1", Headers: map[string][]string{"X-Sig": {"a"}, "X-Multi": {"1", "2"}},
		BodyBase64: "eyJpZCI6MX0="}
	if gotJSON, wantJSON := mustJSON(got.Request), mustJSON(wantReq); gotJSON != wantJSON {
		t.Errorf("request = %s, want %s", gotJSON, wantJSON)
	}
	if len(got.Attempts) != 2 || got.Attempts[0].Status != nil || got.Attempts[0].Error != "upstream timeout" ||
		got.Attempts[1].Status == nil || *got.Attempts[1].Status != 200 || got.Attempts[1].DurationMS != 1200 {
		t.Errorf("attempts = %s", mustJSON(got.Attempts))
	}
	if got.NextAttemptAt.At == nil || !got.NextAttemptAt.At.Equal(next) {
		t.Errorf("next_attempt_at = %v, want %v", got.NextAttemptAt, next)
	}

	// A record without a stored request: no request member, no attempts,
	// no next attempt.
	e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: "pay", Key: "plain"}, State: idempotency.StateDone,
		Response: idempotency.Response{Status: 200}})
	plain := e.do(t, http.MethodGet, recordPath("pay", "plain"), token, "")
	body := string(plain.body)
	if plain.status != http.StatusOK || strings.Contains(body, `"request"`) || strings.Contains(body, "next_attempt_at") ||
		!strings.Contains(body, `"attempts":[]`) {
		t.Errorf("detail without a request: %d %s", plain.status, body)
	}
}

// On an async route the detail always has next_attempt_at, null when no
// attempt waits (SPEC §11).
func TestRecordDetailOfAnAsyncRouteShowsNoNextAttemptAsNull(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Queue, o.Async = nextAttempts{}, map[string]bool{"ship": true} })
	for _, route := range []string{"pay", "ship"} {
		e.commit(t, &idempotency.Record{Ref: idempotency.Ref{Route: route, Key: "evt_done"}, State: idempotency.StateDone,
			Response: idempotency.Response{Status: 200}})
	}
	if r := e.do(t, http.MethodGet, recordPath("ship", "evt_done"), token, ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"next_attempt_at":null`) {
		t.Errorf("async route's done record: %d %s, want \"next_attempt_at\":null", r.status, r.body)
	}
	if r := e.do(t, http.MethodGet, recordPath("pay", "evt_done"), token, ""); r.status != http.StatusOK || strings.Contains(string(r.body), "next_attempt_at") {
		t.Errorf("sync route's record: %d %s, want no next_attempt_at", r.status, r.body)
	}
}
