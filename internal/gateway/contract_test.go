package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// rawUpstream is an upstream that answers every request with resp,
// written verbatim, and closes the connection.
func rawUpstream(tb testing.TB, resp string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, resp)
			}(c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// SPEC §1/§2: a HEAD the route does not deduplicate passes through, and
// its answer is the upstream's. A HEAD answer's Content-Length is the
// length of the body a GET would get (RFC 9110 §8.6); the gateway dropped
// it (fasthttp framed the empty body instead).
func TestHeadPassthroughKeepsUpstreamContentLength(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "{}")
			return
		}
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("Content-Length", "4096")
		w.WriteHeader(http.StatusOK)
	})
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	r := sendMethod(t, g, http.MethodHead, "/hooks", "")
	wantOutcome(t, r, http.StatusOK, "passthrough")
	if got := r.header.Get("Content-Length"); got != "4096" {
		t.Fatalf("HEAD answer Content-Length = %q, want the upstream's 4096; headers %v", got, r.header)
	}
	// The connection still serves the next request (no body was expected).
	wantOutcome(t, send(t, g, "/hooks", `{"id":"after_head"}`), http.StatusOK, "forwarded")
}

// A status line whose code is below 100 is no HTTP answer (RFC 9110 §15).
// Passed on, "000" reached the provider as 200 (fasthttp's default for a
// zero status): a success for a delivery the upstream never acknowledged,
// so the provider never retried it; "099" broke the provider's client.
// SPEC §2 released: 502 when the upstream failed.
func TestStatusBelow100IsNoAnswer(t *testing.T) {
	for _, code := range []string{"000", "099"} {
		t.Run(code, func(t *testing.T) {
			u := rawUpstream(t, "HTTP/1.1 "+code+" Odd\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
			g := startGateway(t, gwConfig(t, u, dbPath(t), "", ""))
			req, err := http.NewRequest(http.MethodPost, g.URL()+"/hooks", strings.NewReader(`{"id":"odd"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("the provider could not read the answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Hookstamp-Outcome") != "released" ||
				resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %q %s, want 502 released problem", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"), b)
			}
		})
	}
}

// SPEC §4: forwarded requests keep their end-to-end headers. fasthttp
// rebuilt Cookie from its parse: lines merged into one, spaces moved and
// quotes stripped, so the upstream read another cookie value.
func TestCookieLinesForwardedAsSent(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, gwConfig(t, up.URL, dbPath(t), "", ""))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"id":"cookie_1"}`
	fmt.Fprintf(conn, "POST /hooks HTTP/1.1\r\nHost: gw\r\nCookie: sess=\"a b\";theme=dark\r\ncookie: lang=en\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{`sess="a b";theme=dark`, "lang=en"}
	if got := up.lastHeader().Values("Cookie"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("upstream got Cookie %q, want %q as sent", got, want)
	}
}
