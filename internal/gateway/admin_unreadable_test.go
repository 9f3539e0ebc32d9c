package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A request the admin listener's HTTP server cannot read was answered by
// net/http itself, with a plain-text "400 Bad Request": a path that is not
// validly percent-encoded above all, where every other admin answer is a
// problem document. It is one now, with the same status, and nothing is
// done.
func TestAdminUnreadableRequestIsAProblem(t *testing.T) {
	s := newSetup(t)
	g := s.start(t)
	want(t, deliver(t, g, "/hooks", `{"id":"evt_kept"}`), http.StatusOK, "forwarded")
	for _, c := range []struct {
		name, head string
		status     int
	}{
		{"bad escape in the key", "DELETE /admin/routes/hooks/records/evt_kept%zz HTTP/1.1\r\n", http.StatusBadRequest},
		{"bad escape in the route", "GET /admin/routes/ho%zzoks/held HTTP/1.1\r\n", http.StatusBadRequest},
		{"escape cut short", "DELETE /admin/routes/hooks/records/evt_kept%2 HTTP/1.1\r\n", http.StatusBadRequest},
		{"header too large", "GET /admin/stats HTTP/1.1\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n", http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", g.AdminAddr(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			go fmt.Fprintf(conn, "%sHost: admin\r\nAuthorization: Bearer %s\r\n\r\n", c.head, adminToken)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var p struct {
				Title, Detail string
				Status        int
			}
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(body, &p) != nil || p.Status != c.status || p.Title == "" || p.Detail == "" {
				t.Fatalf("got %d %q %q, want a %d problem document", resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status)
			}
		})
	}
	if a := adminDo(t, g, http.MethodGet, recordURL("hooks", "evt_kept"), ""); a.status != http.StatusOK {
		t.Fatalf("the record is gone: %d %s", a.status, a.body)
	}
}
