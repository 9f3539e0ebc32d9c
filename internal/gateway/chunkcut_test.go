package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A chunked body is complete only with its last chunk (RFC 9112 §7.1): one
// whose connection ends before it — at a chunk boundary, after the header
// alone, or after the last chunk but before the blank line that ends its
// trailer section — is a delivery cut short (a proxy streaming the body of
// a client that aborted, a network cut). fasthttp's body stream reports the
// connection's end at a chunk boundary as the body's end: the first chunk
// was forwarded and recorded done, and the provider's whole resend refused
// 422 mismatch for the whole retention. Nothing of it is forwarded or
// recorded; the provider's resend is the delivery.
func TestChunkedBodyCutShortIsNoDelivery(t *testing.T) {
	t.Parallel()
	const full = `{"amount": 42, "currency": "eur"}`
	head := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
	withLength := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: %s\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(full))
	cases := []struct{ name, head, sent string }{
		{"at a chunk boundary", head, "d\r\n" + full[:13] + "\r\n"},
		{"after two chunks", head, "d\r\n" + full[:13] + "\r\n4\r\n" + full[13:17] + "\r\n"},
		{"after the header alone", head, ""},
		{"after the last chunk's size line", head, "d\r\n" + full[:13] + "\r\n0\r\n"},
		{"inside the trailer section", head, fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Checksum: 1\r\n", len(full), full)},
		// The same for a body with a Content-Length (README: "one whose
		// connection ends before its Content-Length 400 (nothing of it
		// is forwarded)"), within the server's prefetch.
		{"before a Content-Length, after the header alone", withLength, ""},
		{"before a Content-Length, mid-body", withLength, full[:13]},
	}
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		g := startGateway(t, s.config(t, up.URL, "", ""))
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				for _, closing := range []string{"half-close", "close"} {
					key := fmt.Sprintf("evt_chunkcut_%d_%s", i, closing)
					open0, used0 := g.server.Conns() // the client's pooled connections
					conn := dialRaw(t, g, 5*time.Second)
					if _, err := conn.Write([]byte(fmt.Sprintf(c.head, key) + c.sent)); err != nil {
						t.Fatal(err)
					}
					if closing == "close" {
						// The sender is gone before any answer: once the
						// gateway has read the request, and closed the
						// connection, it has dealt with it.
						testenv.Eventually(t, 15*time.Second, "the request read", func() bool { _, used := g.server.Conns(); return used > used0 })
						_ = conn.Close()
						testenv.Eventually(t, 15*time.Second, "the connection closed", func() bool { open, _ := g.server.Conns(); return open <= open0 })
					} else {
						_ = conn.CloseWrite()
						replies := readReplies(conn)
						if len(replies) != 1 {
							t.Fatalf("%s: got %d answers %v, want one 400", closing, len(replies), statuses(replies))
						}
						wantProblem(t, replies[0].reply(), 400, "")
					}
					if n := up.count(key); n != 0 {
						body, _, _ := up.lastRequest()
						t.Fatalf("%s: a body cut short reached the upstream %d time(s), last body %q", closing, n, body)
					}
					wantNoRecord(t, g, "hooks", key)
					// The provider's resend, whole, is the delivery.
					wantOutcome(t, send(t, g, "/hooks", full, "X-Event-Id", key), 200, "forwarded")
					if body, _, _ := up.lastRequest(); body != full || up.count(key) != 1 {
						t.Fatalf("the resend reached the upstream %d time(s), last body %q, want once with %q", up.count(key), body, full)
					}
					if rec := lookup(t, g, "hooks", key); rec.State != idempotency.StateDone || rec.Status != 200 {
						t.Fatalf("the resend was recorded %s %d, want done 200", rec.State, rec.Status)
					}
				}
			})
		}
		// A whole chunked body followed by a half-close is a delivery.
		conn := dialRaw(t, g, 5*time.Second)
		if _, err := conn.Write([]byte(fmt.Sprintf(head, "evt_chunk_whole") + chunked(full, 5))); err != nil {
			t.Fatal(err)
		}
		_ = conn.CloseWrite()
		if replies := readReplies(conn); len(replies) != 1 || replies[0].status != 200 {
			t.Fatalf("a whole chunked body, then a half-close: %v, want one 200", statuses(replies))
		}
		if body, _, _ := up.lastRequest(); body != full || up.count("evt_chunk_whole") != 1 {
			t.Fatalf("the whole body reached the upstream %d time(s) as %q", up.count("evt_chunk_whole"), body)
		}
	})
}

// wantNoRecord fails unless the ledger holds nothing for route and key.
func wantNoRecord(tb testing.TB, g *Gateway, route, key string) {
	tb.Helper()
	rec, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: route, Key: key})
	if !errors.Is(err, idempotency.ErrNotFound) {
		tb.Fatalf("the ledger holds %s/%s: %+v (err %v), want nothing", route, key, rec, err)
	}
}
