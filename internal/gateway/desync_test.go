package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A body that ends, with the connection, before its Content-Length is a
// delivery cut short (the provider's client timed out or crashed mid-send,
// a network cut): it is not the event. Past fasthttp's 8 KiB prefetch the
// body stream reported the early end as a plain io.EOF, so the first 12000
// of 20000 bytes were forwarded, fingerprinted and recorded as the
// delivery, and the provider's retry with the whole body was refused as a
// key reused with another body (422 mismatch): the event never reached the
// upstream whole.
func TestBodyCutShortByCloseIsNoDelivery(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	g := startGateway(t, gwConfig(t, up.URL, db, "", ""))
	full := `{"id":"evt_cut","pad":"` + strings.Repeat("p", 20000) + `"}`
	rows := int64(0)
	for _, sent := range []int{8500, 12000} { // past the prefetch, in one read and in several
		t.Run(fmt.Sprint(sent), func(t *testing.T) {
			key := fmt.Sprintf("evt_cut_%d", sent)
			conn := dialRaw(t, g, 5*time.Second)
			head := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: %s\r\nContent-Length: %d\r\n\r\n", key, len(full))
			if _, err := conn.Write([]byte(head + full[:sent])); err != nil {
				t.Fatal(err)
			}
			_ = conn.CloseWrite() // the sender is gone
			replies := readReplies(conn)
			if n := up.count(key); n != 0 {
				body, _, _ := up.lastRequest()
				t.Fatalf("a body cut at %d of %d bytes reached the upstream %d time(s) (%d bytes; answers %v %q)",
					sent, len(full), n, len(body), statuses(replies), outcomeOf(replies))
			}
			if n := ledgerRows(t, db); n != rows {
				t.Fatalf("a body cut short was recorded: the ledger has %d rows, want %d", n, rows)
			}
			for _, r := range replies {
				wantProblem(t, r.reply(), 400, "")
			}
			// The provider's retry, whole, is the delivery.
			wantOutcome(t, send(t, g, "/hooks", full, "X-Event-Id", key), 200, "forwarded")
			if body, _, _ := up.lastRequest(); body != full || up.count(key) != 1 {
				t.Fatalf("the upstream got the retry %d time(s), last body %d bytes, want once and %d bytes", up.count(key), len(body), len(full))
			}
			if rec := lookup(t, g, "hooks", key); rec == nil || rec.Response.Status != 200 {
				t.Fatalf("the whole retry was not recorded")
			}
			rows++
		})
	}
}

// fasthttp (v1.51) unfolds an obs-folded header line in its read buffer in
// place, and then skips as many bytes as the unfolded header is long: the
// last two bytes of what was buffered, per fold, are read again. A body
// that arrived after the header was forwarded and recorded with those
// bytes in front of it and its own last bytes cut ("\r\n{\"amount\":10"
// for {"amount":100}); bytes already buffered were read again as the start
// of the connection's next request, which was refused (501) or, crafted,
// read as a request nobody sent. RFC 9112 §5.2 lets a server refuse
// obs-fold with 400: the request is refused and its connection closed.
func TestFoldedHeaderLineIsRefused(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	const body = `{"amount":100}`
	cases := []struct{ name, fold string }{
		{"space", "X-Note: a=b\r\n c=d\r\n"},
		{"tab", "X-Note: a=b\r\n\tc=d\r\n"},
		{"bare LF", "X-Note: a=b\n c=d\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, next := "evt_fold_"+c.name, "evt_after_fold_"+c.name
			conn := dialRaw(t, g, 5*time.Second)
			br := bufio.NewReader(conn)
			head := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: %s\r\n%sContent-Length: %d\r\n\r\n", key, c.fold, len(body))
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the body arrives after the header was read
			if _, err := io.WriteString(conn, body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if n := up.count(key); n != 0 {
				fwd, _, _ := up.lastRequest()
				t.Errorf("the folded request reached the upstream %d time(s) with body %q, sent %q (answer %d %s)",
					n, fwd, body, resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
			}
			wantProblem(t, reply{status: resp.StatusCode, header: resp.Header, body: got}, http.StatusBadRequest, "")
			if !resp.Close {
				// Kept open, the connection must carry the next request
				// as sent.
				next := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: %s\r\nContent-Length: 2\r\n\r\n{}", next)
				if _, err := io.WriteString(conn, next); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer to the next request: %v", err)
				}
				resp.Body.Close()
				t.Errorf("the connection stayed open after the refusal; the next request got %d", resp.StatusCode)
			}
			// The provider's retry, unfolded, is the delivery.
			wantOutcome(t, send(t, g, "/hooks", body, "X-Event-Id", key, "X-Note", "a=b c=d"), 200, "forwarded")
			if fwd, _, _ := up.lastRequest(); fwd != body || up.count(key) != 1 {
				t.Errorf("the retry reached the upstream %d time(s), body %q, want once with %q", up.count(key), fwd, body)
			}
		})
	}
}

// A delivery behind a folded one on a keep-alive connection (a
// provider's pool, a balancer's) is read from its own bytes, never from
// the folded one's: the folded one's last two bytes, read again once per
// fold, used to start the next request line ("}}POST"), which was refused
// with 501 and never forwarded.
func TestNothingIsReadBehindAFoldedLine(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	conn := dialRaw(t, g, 5*time.Second)
	br := bufio.NewReader(conn)
	folded := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_folded\r\n" +
		"X-Note: a=b\r\n c=d\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := io.WriteString(conn, folded); err != nil {
		t.Fatal(err)
	}
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, first.Body)
	first.Body.Close()
	if first.StatusCode != http.StatusBadRequest || up.count("evt_folded") != 0 {
		t.Errorf("the folded request: got %d %s (forwarded %d times), want 400 and nothing forwarded",
			first.StatusCode, first.Header.Get("Hookstamp-Outcome"), up.count("evt_folded"))
	}
	next := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_next\r\nContent-Length: 2\r\n\r\n{}"
	_, _ = io.WriteString(conn, next) // fails once the gateway closed the connection
	if resp, err := http.ReadResponse(br, nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || up.count("evt_next") != 1 {
			t.Errorf("the delivery behind the folded one got %d %s and reached the upstream %d times",
				resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), up.count("evt_next"))
		}
	} else if !first.Close {
		t.Errorf("no answer to the next request on a connection kept open: %v", err)
	}
}

// A trailer line folded over two lines has fasthttp misplace the bytes
// after it as a folded header line does (see TestFoldedHeaderLineIsRefused),
// and trailers are read with the body, after the header was checked: a
// request pipelined behind such a body was misread (never answered). A
// connection whose request had trailer fields, which no webhook sends, is
// closed after the answer, so that nothing behind it is read.
func TestNothingIsReadBehindAFoldedTrailer(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	conn := dialRaw(t, g, 3*time.Second)
	first := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_trailer_fold\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: a\r\n b\r\n\r\n"
	behind := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_behind_trailer\r\nContent-Length: 13\r\n\r\n{\"amount\":10}"
	if _, err := io.WriteString(conn, first+behind); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || up.count("evt_trailer_fold") != 1 {
		t.Fatalf("the chunked delivery: got %d %s, forwarded %d times", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), up.count("evt_trailer_fold"))
	}
	// The request behind is answered as sent, or not read at all (the
	// connection closed; the sender sends it again on another one).
	next, err := http.ReadResponse(br, nil)
	switch {
	case err == nil:
		next.Body.Close()
		if body, _, _ := up.lastRequest(); next.StatusCode != http.StatusOK || up.count("evt_behind_trailer") != 1 || body != `{"amount":10}` {
			t.Errorf("the request behind: got %d %s, forwarded %d times, last body %q",
				next.StatusCode, next.Header.Get("Hookstamp-Outcome"), up.count("evt_behind_trailer"), body)
		}
		if next.Close {
			return
		}
		// And so is the one after it, sent later on the same connection.
		later := "POST /hooks HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Event-Id: evt_later\r\nContent-Length: 2\r\n\r\n{}"
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(conn, later)
		last, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a request on a connection kept open: %v", err)
		}
		last.Body.Close()
		if last.StatusCode != http.StatusOK || up.count("evt_later") != 1 {
			t.Errorf("the request after: got %d %s, forwarded %d times", last.StatusCode, last.Header.Get("Hookstamp-Outcome"), up.count("evt_later"))
		}
	case !resp.Close:
		t.Errorf("the request behind was never answered on a connection kept open (%v); forwarded %d times",
			err, up.count("evt_behind_trailer"))
	}
}

// dialRaw opens a raw connection to g, closed when the test ends, that
// gives up after d: for requests net/http would not send.
func dialRaw(t *testing.T, g interface{ Addr() string }, d time.Duration) *net.TCPConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(d))
	return conn.(*net.TCPConn)
}
