package forward_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// rawUpstream serves each connection with answer, which gets every request
// (its body read into body) and writes whatever it likes to c; it returns
// whether to keep the connection open. It counts connections and requests.
type rawUpstream struct {
	addr  string
	conns atomic.Int64
	reqs  atomic.Int64
}

func newRawUpstream(tb testing.TB, answer func(c net.Conn, req *http.Request, body []byte) (keep bool)) *rawUpstream {
	tb.Helper()
	return newRawUpstreamOver(tb, nil, answer)
}

// newRawUpstreamOver is newRawUpstream serving each connection through
// wrap (a TLS server, say); answer gets the wrapped connection.
func newRawUpstreamOver(tb testing.TB, wrap func(net.Conn) net.Conn, answer func(c net.Conn, req *http.Request, body []byte) (keep bool)) *rawUpstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &rawUpstream{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			u.conns.Add(1)
			wg.Go(func() {
				if wrap != nil {
					c = wrap(c)
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					u.reqs.Add(1)
					if !answer(c, req, body) {
						return
					}
				}
			})
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

func okAnswer(c net.Conn, _ *http.Request, _ []byte) bool {
	_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	return err == nil
}

// An upstream that closes a keep-alive connection while it is idle (its
// own keep-alive timeout is shorter than the gateway's) must not cost a
// delivery: the pooled connection is found closed before anything is
// written on it, and the delivery goes out once on a new connection. The
// Transport noticed this with its read loop; without the pool's peek the
// delivery would be written into a closed connection and fail as an
// ambiguous ErrNoAnswer.
func TestDoSkipsIdleConnectionTheUpstreamClosed(t *testing.T) {
	var served atomic.Int64
	u := newRawUpstream(t, func(c net.Conn, req *http.Request, body []byte) bool {
		okAnswer(c, req, body)
		served.Add(1)
		return false // close right after answering, without Connection: close
	})
	f := newForwarder(t, forward.Options{})
	for i := range 20 {
		r := post("http://"+u.addr+"/hook", "idle")
		resp, err := f.Do(context.Background(), r)
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if string(resp.Body) != "ok" {
			t.Fatalf("delivery %d: body %q", i, resp.Body)
		}
		// Let the FIN arrive before the next delivery looks at the pool.
		testenv.Eventually(t, 5*time.Second, "the delivery served", func() bool { return served.Load() == int64(i+1) })
		time.Sleep(5 * time.Millisecond)
	}
	if n := u.reqs.Load(); n != 20 {
		t.Errorf("upstream read %d requests, want 20", n)
	}
	if n := u.conns.Load(); n != 20 {
		t.Errorf("%d connections opened, want 20 (none reused after the upstream closed it)", n)
	}
}

// Answers framed in every way HTTP/1.1 allows are read whole, and the
// connection is reused only when the answer had its own framing.
func TestDoResponseFraming(t *testing.T) {
	cases := []struct {
		name      string
		raw       string
		body      string
		reuse     bool
		status    int
		hopHeader bool
	}{
		{"content-length", "HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello", "hello", true, 201, false},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", "hello", true, 200, false},
		{"no body by status", "HTTP/1.1 204 No Content\r\n\r\n", "", true, 204, false},
		{"interim answers first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", true, 200, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", false, 200, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
				_, err := io.WriteString(conn, c.raw)
				return err == nil && c.reuse
			})
			f := newForwarder(t, forward.Options{})
			for i := range 2 {
				resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "framing"))
				if err != nil {
					t.Fatalf("Do %d: %v", i, err)
				}
				if resp.Status != c.status || string(resp.Body) != c.body {
					t.Fatalf("Do %d: %d %q, want %d %q", i, resp.Status, resp.Body, c.status, c.body)
				}
				if _, ok := resp.Header["Connection"]; ok {
					t.Errorf("hop-by-hop Connection header kept: %v", resp.Header)
				}
			}
			want := int64(2)
			if c.reuse {
				want = 1
			}
			if n := u.conns.Load(); n != want {
				t.Errorf("%d connections for 2 deliveries, want %d", n, want)
			}
		})
	}
	t.Run("until close", func(t *testing.T) {
		u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\n\r\nuntil close")
			return false
		})
		f := newForwarder(t, forward.Options{})
		resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "eof"))
		if err != nil || string(resp.Body) != "until close" {
			t.Fatalf("Do = %v, %v; want the body up to the close", resp, err)
		}
	})
}

// A body cut short after a final head — a connection reset, a malformed
// chunk, the time running out — is never a shorter body, and not "no
// answer" either: the upstream answered, and may have acted. Reported as
// no answer, the provider's retry would be forwarded again; the status
// stands, the body omitted.
func TestDoBodyCutShortKeepsTheStatus(t *testing.T) {
	for name, raw := range map[string]string{
		"chunked, reset":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
		"until close, reset":    "HTTP/1.1 200 OK\r\n\r\nhel",
		"content-length, reset": "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\nhel",
		"malformed chunk":       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
		"slow body":             "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhel",
	} {
		t.Run(name, func(t *testing.T) {
			u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
				_, _ = io.WriteString(conn, raw)
				if name == "slow body" {
					time.Sleep(time.Second) // past the forward's timeout
				}
				time.Sleep(20 * time.Millisecond)
				_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
				return false
			})
			f := newForwarder(t, forward.Options{})
			r := post("http://"+u.addr+"/x", "cut")
			r.Timeout = 300 * time.Millisecond
			resp, err := f.Do(context.Background(), r)
			if !forward.HeadOnly(resp, err) || forward.Ambiguous(err) || !errors.Is(err, forward.ErrUnreadableAnswer) {
				t.Fatalf("Do = %+v, %v; want the status alone (HeadOnly), not ambiguous", resp, err)
			}
			if want := map[bool]int{true: 201, false: 200}[strings.HasPrefix(raw, "HTTP/1.1 201")]; resp.Status != want || resp.Body != nil {
				t.Errorf("answer %d, body %q; want %d without a body", resp.Status, resp.Body, want)
			}
		})
	}
}

// With MaxConnsPerHost busy, a delivery waits for a connection; if its
// time runs out first, nothing was sent: ErrUnreachable.
func TestDoWaitsForAConnection(t *testing.T) {
	release := make(chan struct{})
	u := newRawUpstream(t, func(conn net.Conn, req *http.Request, body []byte) bool {
		if req.Header.Get("X-Test-Id") == "slow" {
			<-release
		}
		return okAnswer(conn, req, body)
	})
	f := newForwarder(t, forward.Options{MaxConnsPerHost: 1})
	slow := make(chan error, 1)
	go func() {
		_, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "slow"))
		slow <- err
	}()
	testenv.Eventually(t, 5*time.Second, "one request at the upstream", func() bool { return u.reqs.Load() == 1 })
	r := post("http://"+u.addr+"/x", "waits")
	r.Timeout = 50 * time.Millisecond
	if _, err := f.Do(context.Background(), r); !errors.Is(err, forward.ErrUnreachable) || forward.Ambiguous(err) {
		t.Fatalf("Do while the only connection is busy = %v, want ErrUnreachable", err)
	}
	next := make(chan error, 1)
	go func() {
		_, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "next"))
		next <- err
	}()
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("slow delivery: %v", err)
	}
	if err := <-next; err != nil {
		t.Fatalf("delivery after the connection was freed: %v", err)
	}
	if n, c := u.reqs.Load(), u.conns.Load(); n != 2 || c != 1 {
		t.Errorf("upstream read %d requests on %d connections, want 2 on 1", n, c)
	}
}

// The request goes out as written: request line, Host, Content-Length (for
// an empty POST too), the headers, and a GET's body if it has one.
func TestDoRequestOnTheWire(t *testing.T) {
	got := make(chan string, 2)
	u := newRawUpstream(t, func(c net.Conn, req *http.Request, body []byte) bool {
		got <- req.Method + " " + req.RequestURI + " host=" + req.Host + " cl=" + req.Header.Get("Content-Length") +
			" te=" + strings.Join(req.TransferEncoding, ",") + " body=" + string(body) + " ua=" + strings.Join(req.Header.Values("User-Agent"), ",")
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		return err == nil
	})
	f := newForwarder(t, forward.Options{})
	empty := post("http://"+u.addr+"/a/b?c=d", "wire")
	empty.Body = nil
	if _, err := f.Do(context.Background(), empty); err != nil {
		t.Fatal(err)
	}
	if g, want := <-got, "POST /a/b?c=d host="+u.addr+" cl=0 te= body= ua="; g != want {
		t.Errorf("empty POST on the wire: %q, want %q", g, want)
	}
	get := post("http://"+u.addr+"/g", "wire")
	get.Method, get.Body = http.MethodGet, []byte("q")
	if _, err := f.Do(context.Background(), get); err != nil {
		t.Fatal(err)
	}
	if g, want := <-got, "GET /g host="+u.addr+" cl=1 te= body=q ua="; g != want {
		t.Errorf("GET with a body on the wire: %q, want %q", g, want)
	}
}

// A header value that cannot be written (CR/LF) is refused before anything
// is sent.
func TestDoRefusesUnwritableHeader(t *testing.T) {
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	r := post(u.URL, "crlf")
	r.Header.Set("X-Evil", "a\r\nX-Injected: 1")
	if _, err := f.Do(context.Background(), r); !errors.Is(err, forward.ErrUnreachable) {
		t.Fatalf("Do = %v, want ErrUnreachable", err)
	}
	if n := len(u.requests()); n != 0 {
		t.Errorf("upstream got %d requests, want 0", n)
	}
}

// An answer declared larger than MaxResponseBody is refused at once, from
// its headers: the forwarder does not download the body it will not keep
// (here the upstream would never finish sending it).
func TestDoTooLargeIsNotDownloaded(t *testing.T) {
	for name, head := range map[string]string{
		"content-length": "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n",
		"chunked":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + strings.Repeat("a", 2048) + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			hold := make(chan struct{})
			defer close(hold)
			u := newRawUpstream(t, func(c net.Conn, _ *http.Request, _ []byte) bool {
				_, _ = io.WriteString(c, head)
				<-hold // the rest never comes
				return false
			})
			f := newForwarder(t, forward.Options{MaxResponseBody: 1024})
			r := post("http://"+u.addr+"/x", "huge")
			r.Timeout = time.Minute
			done := make(chan error, 1)
			go func() {
				_, err := f.Do(context.Background(), r)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, forward.ErrResponseTooLarge) {
					t.Fatalf("Do = %v, want ErrResponseTooLarge", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Do still reading a body it will not keep after 10s")
			}
		})
	}
}

// An answer whose headers never end is cut off after 1 MiB, not read into
// unbounded memory. Its status line came whole: the upstream answered, and
// Do returns that status and the header fields that fit, as for a body
// too large (ErrResponseTooLarge, not ambiguous). A head that passes
// 1 MiB before any final status line is no answer (ErrNoAnswer).
func TestDoEndlessHeaders(t *testing.T) {
	for _, c := range []struct {
		name, start string
		want        error
	}{
		{"final status", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", forward.ErrResponseTooLarge},
		{"interim status only", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n", forward.ErrNoAnswer},
	} {
		t.Run(c.name, func(t *testing.T) {
			hold := make(chan struct{})
			defer close(hold)
			u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
				if _, err := io.WriteString(conn, c.start); err != nil {
					return false
				}
				line := "X-Pad: " + strings.Repeat("p", 1000) + "\r\n"
				for range 2000 { // 2 MB of headers
					if _, err := io.WriteString(conn, line); err != nil {
						return false
					}
				}
				<-hold
				return false
			})
			f := newForwarder(t, forward.Options{})
			resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "endless"))
			if !errors.Is(err, c.want) {
				t.Fatalf("Do = %+v, %v, want %v", resp, err, c.want)
			}
			if c.want == forward.ErrResponseTooLarge {
				if forward.Ambiguous(err) || resp == nil || resp.Status != http.StatusOK ||
					resp.Header.Get("Content-Type") != "application/json" || len(resp.Header.Values("X-Pad")) < 900 {
					t.Fatalf("Do = %+v, %v, want status 200 with the fields that fit", resp, err)
				}
			}
		})
	}
}

// A 204 that announces a body (RFC 9110 §8.6 forbids it) is read without
// one, but its connection is not pooled: the announced bytes, if they come
// after the idle check, would be read as the next delivery's answer, and
// that delivery, processed by the upstream, would fail as no answer. A 204
// with "Content-Length: 0", as many servers send, keeps its connection.
func TestDoNoReuseAfterA204AnnouncingABody(t *testing.T) {
	for _, c := range []struct {
		name, head, late string
		conns            int64
	}{
		{"content-length", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", "hello", 2},
		{"chunked", "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", 2},
		{"content-length 0", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			lateBodyAfterBodyless(t, http.MethodPost, c.head, c.late, http.StatusNoContent, c.conns)
		})
	}
}

// A 304 has no body either (RFC 9110 §15.4.5), and its Content-Length or
// Transfer-Encoding describe content only for a conditional GET (§8.6).
// A 304 to a delivery that announces a body is the 204 case above: its
// late bytes must not be left for the next delivery on the connection. To
// a GET, such a 304 is how caches answer, and its connection is kept.
func TestDoNoReuseAfterA304AnnouncingABody(t *testing.T) {
	for _, c := range []struct {
		name, method, head, late string
		conns                    int64
	}{
		{"content-length", http.MethodPost, "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "hello", 2},
		{"chunked", http.MethodPost, "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", 2},
		{"content-length 0", http.MethodPost, "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n", "", 1},
		{"conditional GET", http.MethodGet, "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			lateBodyAfterBodyless(t, c.method, c.head, c.late, http.StatusNotModified, c.conns)
		})
	}
}

// lateBodyAfterBodyless sends a first delivery (method) that the upstream
// answers with head, then, a moment later, late on the same connection,
// and a second delivery: it must get the upstream's own 200 "ok", over
// conns connections in all.
func lateBodyAfterBodyless(t *testing.T, method, head, late string, status int, conns int64) {
	t.Helper()
	u := newRawUpstream(t, func(conn net.Conn, req *http.Request, _ []byte) bool {
		if req.URL.Path != "/first" {
			return okAnswer(conn, req, nil)
		}
		if _, err := io.WriteString(conn, head); err != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond) // the next delivery is written by now
		_, err := io.WriteString(conn, late)
		return err == nil
	})
	f := newForwarder(t, forward.Options{})
	first := post("http://"+u.addr+"/first", "a")
	first.Method = method
	resp, err := f.Do(context.Background(), first)
	if err != nil || resp.Status != status || len(resp.Body) != 0 {
		t.Fatalf("first delivery: %+v %v; want %d without body", resp, err, status)
	}
	resp, err = f.Do(context.Background(), post("http://"+u.addr+"/next", "b"))
	if err != nil || resp.Status != http.StatusOK || string(resp.Body) != "ok" {
		t.Fatalf("next delivery: %+v %v (ambiguous %v); want the upstream's 200 \"ok\"", resp, err, forward.Ambiguous(err))
	}
	if n := u.conns.Load(); n != conns {
		t.Errorf("%d connections for 2 deliveries, want %d", n, conns)
	}
}

// A final answer whose head net/http refuses is still the upstream's
// answer: its status and valid fields come back without a body, not as
// "no answer", which would release the key (or hold it) and forward the
// provider's retry after the upstream acted. An interim answer followed by
// nothing stays no answer.
func TestDoUnreadableFinalHeadIsAnAnswer(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		status       int
	}{
		{"a control byte in a field", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok", 200},
		{"a field without a colon", "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nnot a field\r\nContent-Length: 2\r\n\r\nok", 201},
		{"two Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", 200},
		{"an unknown transfer coding", "HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 422},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
				_, _ = io.WriteString(conn, c.answer)
				return false
			})
			f := newForwarder(t, forward.Options{})
			resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "payout"))
			if !errors.Is(err, forward.ErrUnreadableAnswer) || forward.Ambiguous(err) || !forward.HeadOnly(resp, err) {
				t.Fatalf("Do = %+v, %v; want the answer's head, ErrUnreadableAnswer, not ambiguous", resp, err)
			}
			if resp.Status != c.status || resp.Header.Get("Content-Type") != "application/json" || resp.Body != nil {
				t.Fatalf("answer %d %v %q, want %d with its valid fields and no body", resp.Status, resp.Header, resp.Body, c.status)
			}
		})
	}
	t.Run("an interim answer, then nothing", func(t *testing.T) {
		u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
			_, _ = io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
			return false
		})
		f := newForwarder(t, forward.Options{})
		if resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "payout")); !errors.Is(err, forward.ErrNoAnswer) || resp != nil {
			t.Fatalf("Do = %+v, %v; want no answer", resp, err)
		}
	})
}

// An answer's field whose name is not an HTTP token ("Transfer-Encoding "
// with its space) is dropped: net/http leaves such names uncanonicalised,
// so the hop-by-hop removal would miss it, and the provider's client
// might read it as the framing header it spells.
func TestDoDropsAnswerFieldsWithInvalidNames(t *testing.T) {
	u := newRawUpstream(t, func(conn net.Conn, _ *http.Request, _ []byte) bool {
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nX Bad: 1\r\nTransfer-Encoding : chunked\r\nX-Good: 2\r\nContent-Length: 2\r\n\r\nok")
		return false
	})
	f := newForwarder(t, forward.Options{})
	resp, err := f.Do(context.Background(), post("http://"+u.addr+"/x", "payout"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range resp.Header {
		if strings.ContainsAny(name, " \t") {
			t.Errorf("field %q passed on", name)
		}
	}
	if resp.Header.Get("X-Good") != "2" || string(resp.Body) != "ok" {
		t.Fatalf("answer %v %q, want X-Good and the body", resp.Header, resp.Body)
	}
}
