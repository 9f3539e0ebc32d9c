package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A control character in a framing field (Transfer-Encoding,
// Content-Length, Host, Connection) is refused as in any other field:
// fasthttp keeps those fields out of the walk that found control
// characters, and the framing check trimmed them as white space, so
// "Transfer-Encoding: \x0cchunked" was read as chunked where a proxy in
// front may read it otherwise (a desync).
func TestControlCharacterInFramingFieldIsRefused(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	const body = `{"id":"evt_ctl"}`
	chunkedBody := chunked(body, 5)
	head := "POST /hooks HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
	cases := []struct{ name, fields, body string }{
		{"form feed before chunked", "Host: gw\r\nTransfer-Encoding: \x0cchunked\r\n", chunkedBody},
		{"vertical tab after chunked", "Host: gw\r\nTransfer-Encoding: chunked\x0b\r\n", chunkedBody},
		{"form feed inside the coding list", "Host: gw\r\nTransfer-Encoding: \x0c, chunked\r\n", chunkedBody},
		{"vertical tab before a length", "Host: gw\r\nContent-Length: \x0b16\r\n", body},
		{"form feed after a length", fmt.Sprintf("Host: gw\r\nContent-Length: %d\x0c\r\n", len(body)), body},
		{"form feed in Host", fmt.Sprintf("Host: \x0cgw\r\nContent-Length: %d\r\n", len(body)), body},
		{"vertical tab in Connection", fmt.Sprintf("Host: gw\r\nConnection: \x0bkeep-alive\r\nContent-Length: %d\r\n", len(body)), body},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, rows := up.total.Load(), ledgerRows(t, db)
			out := rawExchange(t, g, head+c.fields+"\r\n"+c.body, 3*time.Second)
			if n := up.total.Load() - before; n != 0 {
				got, _, _ := up.lastRequest()
				t.Fatalf("forwarded %d time(s) (answers %v), the upstream got %q", n, statuses(out), got)
			}
			if len(out) != 1 {
				t.Fatalf("got %d answers %v, want one 400", len(out), statuses(out))
			}
			wantProblem(t, out[0].reply(), http.StatusBadRequest, "")
			if n := ledgerRows(t, db) - rows; n != 0 {
				t.Fatalf("%d ledger rows were written", n)
			}
		})
	}
	// Spaces and tabs around the value are optional white space.
	ok := head + "Host: gw\r\nTransfer-Encoding: \t chunked \t\r\n\r\n" + chunkedBody
	if out := rawExchange(t, g, ok, 3*time.Second); len(out) != 1 || out[0].status != 200 {
		t.Fatalf("chunked between spaces and tabs: %v, want 200", statuses(out))
	}
	if got, _, _ := up.lastRequest(); got != body || up.count("evt_ctl") != 1 {
		t.Fatalf("the upstream got %q %d time(s)", got, up.count("evt_ctl"))
	}
}
