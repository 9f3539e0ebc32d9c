package chaos

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// postTo delivers ev as a gateway would, and returns the answer.
func postTo(tb testing.TB, url string, ev *Event) *http.Response {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(ev.Body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", ev.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestUpstreamLogIsTheGroundTruth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upstream.log")
	u, err := StartUpstream(path)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	ev := &Event{Route: "generic", Key: "k1", Body: []byte(`{"chaos_effect":"decline"}`)}
	snd := postTo(t, u.URL()+"/g/g1.1/generic", ev)
	got := time.Now()
	u.SetMode(UpstreamMode{FailRatio: 1})
	// Another replica forwards what g1.1 stored (an async delivery).
	failed := postTo(t, strings.Replace(u.URL(), "://", "://g2.1@", 1)+"/g/g1.1/generic", ev)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}

	recs, err := ReadUpstreamLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("logged %d requests, want 2", len(recs))
	}
	first, second := recs[0], recs[1]
	if !first.Applied || first.Action != ActDecline || first.Status != snd.StatusCode || first.Key != "k1" || first.Gateway != "g1.1" {
		t.Errorf("first record = %+v, answered %d", first, snd.StatusCode)
	}
	if second.Applied || second.Action != ActFail || second.Status != failed.StatusCode || second.Gateway != "g2.1" {
		t.Errorf("second record = %+v, answered %d", second, failed.StatusCode)
	}
	// A failed run's reader tells a slow application from AnswerAt.
	if first.AnswerAt.Before(first.Time) || first.AnswerAt.After(got) {
		t.Errorf("first answer due at %v, want between its arrival %v and its receipt %v", first.AnswerAt, first.Time, got)
	}
	if second.AnswerAt.IsZero() {
		t.Error("the failed answer's time is not logged")
	}
}
