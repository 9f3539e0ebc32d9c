package gateway

import (
	"net/http"
	"testing"
)

// An upstream that answers with a header on several lines — Content-Encoding
// lists codings in the order they were applied — passes them on as one
// line joined (RFC 9110 §5.3), and a replay carries exactly that line. The
// server library keeps only the last line of Content-Type, Content-Encoding
// and Server: the provider was told "br" of a body encoded gzip then br,
// and a replay said "gzip, br", so the first answer and its replays
// differed.
func TestHeaderLinesTheServerKeepsOnceAreJoinedAndReplayed(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		h := w.Header()
		h["Content-Type"] = []string{"application/json", "charset=utf-8"}
		h["Content-Encoding"] = []string{"gzip", "br"}
		h["Server"] = []string{"app/1", "proxy/2"}
		h["X-Listed"] = []string{"a", "b"}
		_, _ = w.Write([]byte("not really encoded"))
	})
	cfg := gwConfig(t, up.URL, dbPath(t), "    record:\n      headers: [Content-Type, Server, X-Listed]", "")
	g := startGateway(t, cfg)

	body := `{"id":"evt_listed_headers"}`
	first := send(t, g, "/hooks", body)
	wantOutcome(t, first, http.StatusOK, "forwarded")
	again := send(t, g, "/hooks", body)
	wantOutcome(t, again, http.StatusOK, "replayed")
	if n := up.count("evt_listed_headers"); n != 1 {
		t.Fatalf("upstream received %d copies, want 1", n)
	}
	want := map[string]string{
		"Content-Type":     "application/json, charset=utf-8",
		"Content-Encoding": "gzip, br",
		"Server":           "app/1, proxy/2",
	}
	for name, v := range want {
		for _, r := range []struct {
			what string
			r    reply
		}{{"first answer", first}, {"replay", again}} {
			if got := r.r.header.Values(name); len(got) != 1 || got[0] != v {
				t.Errorf("%s %s: %q, want one line %q", r.what, name, got, v)
			}
		}
	}
	// Headers the server keeps as lines stay lines on the first answer;
	// the record joins them (as it always has).
	if got := first.header.Values("X-Listed"); len(got) != 2 {
		t.Errorf("first answer X-Listed: %q, want both lines", got)
	}
	if got := again.header.Get("X-Listed"); got != "a, b" {
		t.Errorf("replay X-Listed: %q, want \"a, b\"", got)
	}
	sameReply(t, first, again)
}
