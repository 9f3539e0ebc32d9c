package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fasthttp serves any request line whose version is not "HTTP/1.1" as
// HTTP/1.0: "HTTP/1.2", "HTTP/2.0" and "http/1.1" (the name is
// case-sensitive, RFC 9112 §2.3) were forwarded and recorded, framed and
// kept by HTTP/1.0's rules where a proxy in front would read them by the
// version they name. A version the gateway does not speak is refused 505,
// a malformed one 400; nothing is forwarded or recorded.
func TestRequestLineVersionsOtherThanHTTP10And11AreRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	const rest = " /hooks %s\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_version\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	for _, c := range []struct {
		version string
		status  int
	}{
		{"HTTP/1.2", http.StatusHTTPVersionNotSupported},
		{"HTTP/2.0", http.StatusHTTPVersionNotSupported},
		{"HTTP/3.0", http.StatusHTTPVersionNotSupported},
		{"http/1.1", http.StatusBadRequest},
		{"HTTP/1.1x", http.StatusBadRequest},
		{"HTTP/1", http.StatusBadRequest},
		{"HTTPS/1.1", http.StatusBadRequest},
	} {
		t.Run(c.version, func(t *testing.T) {
			before := up.total.Load()
			out := rawExchange(t, g, "POST"+strings.Replace(rest, "%s", c.version, 1), 3*time.Second)
			if n := up.total.Load() - before; n != 0 {
				t.Fatalf("forwarded %d time(s) (answers %v %s)", n, statuses(out), outcomeOf(out))
			}
			if len(out) != 1 {
				t.Fatalf("got %d answers %v, want one %d", len(out), statuses(out), c.status)
			}
			wantProblem(t, out[0].reply(), c.status, "")
			if n := ledgerRows(t, db); n != 0 {
				t.Fatalf("the ledger has %d rows", n)
			}
		})
	}
	for _, version := range []string{"HTTP/1.1", "HTTP/1.0"} {
		if out := rawExchange(t, g, "POST"+strings.Replace(rest, "%s", version, 1), 3*time.Second); len(out) != 1 || out[0].status != http.StatusOK {
			t.Fatalf("%s: %v, want 200", version, statuses(out))
		}
	}
	if n := up.count("evt_version"); n != 1 {
		t.Fatalf("the upstream got evt_version %d times, want the HTTP/1.1 delivery once (then a replay)", n)
	}
}

// A request line without a version ("POST /hooks") is what fasthttp serves
// as HTTP/1.0 without saying so; a proxy in front would not read it so.
func TestRequestLineWithoutVersionIsRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	const head = "Host: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_noversion\r\nContent-Length: 2\r\n"
	const bare = "POST /hooks\r\n" + head + "Connection: close\r\n\r\n{}"
	const v11 = "POST /hooks HTTP/1.1\r\n" + head + "\r\n{}"
	const v10 = "POST /hooks HTTP/1.0\r\n" + head + "Connection: keep-alive\r\n\r\n{}"
	for _, c := range []struct {
		name, raw string
		want      []int
	}{
		{"alone", bare, []int{http.StatusBadRequest}},
		{"after an HTTP/1.1 request on its connection", v11 + bare, []int{http.StatusOK, http.StatusBadRequest}},
		{"after an HTTP/1.0 request, whose answer closes the connection", v10 + bare, []int{http.StatusOK}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := rawExchange(t, g, c.raw, 3*time.Second)
			if got := statuses(out); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("answers %v, want %v", got, c.want)
			}
			if last := out[len(out)-1]; last.status == http.StatusBadRequest {
				wantProblem(t, last.reply(), http.StatusBadRequest, "")
			}
		})
	}
	if n := up.count("evt_noversion"); n != 1 {
		t.Fatalf("the upstream got evt_noversion %d times, want once (the versioned delivery; then replays)", n)
	}
	if n := ledgerRows(t, db); n != 1 {
		t.Fatalf("the ledger has %d rows, want 1", n)
	}
}
