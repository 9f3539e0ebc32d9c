package forward_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/forward"
)

// coalescingConn holds back writes while hold is set, so that two TLS
// records leave in one TCP segment and the client's TLS layer reads both.
type coalescingConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *coalescingConn) setHold() { c.mu.Lock(); c.hold = true; c.mu.Unlock() }

func (c *coalescingConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// Bytes an upstream sends after its answer (here a second, unasked answer)
// never answer the next delivery on that connection, over http or https:
// over https they sit in the TLS layer's read-ahead, where a peek at the
// socket does not see them.
func TestStrayBytesAfterAnswerNeverAnswerTheNextDelivery(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	scfg := ts.TLS.Clone()
	ccfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	ts.Close()
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			wrap := func(c net.Conn) net.Conn { return &coalescingConn{Conn: c} }
			if scheme == "https" {
				wrap = func(c net.Conn) net.Conn { return tls.Server(&coalescingConn{Conn: c}, scfg) }
			}
			var u *rawUpstream
			u = newRawUpstreamOver(t, wrap, func(c net.Conn, _ *http.Request, _ []byte) bool {
				if u.reqs.Load() > 1 {
					_, err := io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 6\r\n\r\nfailed")
					return err == nil
				}
				// The answer and a stray one, as two TLS records in one TCP
				// segment: the client's TLS layer reads both at once.
				cc, ok := c.(*coalescingConn)
				if tc, isTLS := c.(*tls.Conn); isTLS {
					cc, ok = tc.NetConn().(*coalescingConn)
				}
				if !ok {
					return false
				}
				cc.setHold()
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
				return cc.flush() == nil
			})
			f := forward.New(forward.Options{TLSConfig: ccfg})
			defer f.Close()
			r := &forward.Request{Method: "POST", URL: scheme + "://" + u.addr + "/x",
				Body: []byte("{}"), Timeout: 2 * time.Second}
			resp, err := f.Do(context.Background(), r)
			if err != nil || string(resp.Body) != "first" {
				t.Fatalf("first delivery: %+v %v", resp, err)
			}
			time.Sleep(20 * time.Millisecond) // the stray answer arrives
			resp, err = f.Do(context.Background(), r)
			if err != nil {
				t.Fatalf("second delivery: %v", err)
			}
			if resp.Status != 500 || string(resp.Body) != "failed" {
				t.Fatalf("second delivery answered %d %q, want the upstream's 500 \"failed\": a stray answer was taken for it",
					resp.Status, resp.Body)
			}
		})
	}
}

// An upstream that refuses a large delivery from its headers and closes
// without reading the body makes the write fail; its answer is still the
// answer, not "no answer" (which would hold the key or have the provider
// retry a delivery the upstream refused).
func TestEarlyAnswerToALargeDeliveryIsTheAnswer(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		maxBody      int64
		body         string // "" when only the status stands
	}{
		{"whole", "HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!", 0, "too big!"},
		{"its body over MaxResponseBody", "HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!", 4, ""},
		{"its body cut short", "HTTP/1.1 413 Content Too Large\r\nContent-Length: 80\r\nConnection: close\r\n\r\ntoo big!", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) { earlyAnswer(t, c.answer, c.maxBody, c.body) })
	}
}

func earlyAnswer(t *testing.T, answer string, maxBody int64, wantBody string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close() // the body unread: closing resets the connection
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = io.WriteString(c, answer)
		time.Sleep(50 * time.Millisecond)
	})
	f := forward.New(forward.Options{MaxResponseBody: maxBody})
	defer f.Close()
	r := &forward.Request{Method: "POST", URL: "http://" + ln.Addr().String() + "/x",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(strings.Repeat("a", 16<<20)), Timeout: 5 * time.Second}
	resp, err := f.Do(context.Background(), r)
	if wantBody == "" {
		if !forward.HeadOnly(resp, err) || resp.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("Do = %+v, %v (ambiguous %v); want the upstream's 413 alone", resp, err, forward.Ambiguous(err))
		}
		return
	}
	if err != nil {
		t.Fatalf("Do = %v (ambiguous %v); want the upstream's 413", err, forward.Ambiguous(err))
	}
	if resp.Status != http.StatusRequestEntityTooLarge || string(resp.Body) != wantBody {
		t.Fatalf("Do = %d %q, want 413 %q", resp.Status, resp.Body, wantBody)
	}
}
