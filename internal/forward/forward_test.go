package forward_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seen is one request as the upstream received it.
type seen struct {
	Method, RequestURI, Host string
	Header                   http.Header
	Body                     []byte
	ContentLength            int64
	TransferEncoding         []string
}

// upstream is a loopback HTTP server that records every request it receives
// (after reading its whole body) and counts the connections opened to it.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []seen
	conns atomic.Int64
}

// newUpstream starts an upstream answering with handle; nil answers 200 "ok".
func newUpstream(tb testing.TB, handle http.HandlerFunc) *upstream {
	tb.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			tb.Errorf("upstream: read body: %v", err)
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{r.Method, r.RequestURI, r.Host, r.Header.Clone(), body, r.ContentLength, r.TransferEncoding})
		u.mu.Unlock()
		if handle == nil {
			_, _ = io.WriteString(w, "ok")
			return
		}
		handle(w, r)
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Start()
	tb.Cleanup(u.Close)
	return u
}

// requests returns a copy of the requests received so far.
func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

// count is how many received requests carried X-Test-Id: id.
func (u *upstream) count(id string) int {
	n := 0
	for _, r := range u.requests() {
		if r.Header.Get("X-Test-Id") == id {
			n++
		}
	}
	return n
}

func newForwarder(tb testing.TB, opts forward.Options) *forward.Forwarder {
	tb.Helper()
	f := forward.New(opts)
	tb.Cleanup(f.Close)
	return f
}

// hangUp closes the connection under w without answering.
func hangUp(tb testing.TB, w http.ResponseWriter) {
	tb.Helper()
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		tb.Errorf("hijack: %v", err)
		return
	}
	_ = c.Close()
}

func post(url, id string) *forward.Request {
	return &forward.Request{
		Method:    http.MethodPost,
		URL:       url,
		Header:    http.Header{"X-Test-Id": {id}, "Content-Type": {"application/json"}},
		Body:      []byte(`{"id":"` + id + `"}`),
		KeyHeader: "Idempotency-Key",
		Key:       id,
		Timeout:   5 * time.Second,
	}
}

func TestDoPreservesRequest(t *testing.T) {
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	body := []byte("\x00binary\r\n body\xff")
	resp, err := f.Do(context.Background(), &forward.Request{
		Method: http.MethodPut,
		URL:    forward.JoinURL(u.URL+"/in", "/sub/a%2Fb", "a=1&b=%2F&a=2"),
		Header: http.Header{
			"Content-Type": {"application/octet-stream"},
			"X-Multi":      {"one", "two"},
			"User-Agent":   {"Stripe/1.0"},
		},
		Body:     body,
		ClientIP: "203.0.113.7",
		Proto:    "https",
		Host:     "gateway.example",
		Timeout:  5 * time.Second,
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if resp.Status != http.StatusOK || string(resp.Body) != "ok" {
		t.Fatalf("response = %d %q, want 200 ok", resp.Status, resp.Body)
	}
	reqs := u.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	checks := []struct{ name, got, want string }{
		{"method", got.Method, http.MethodPut},
		{"request URI", got.RequestURI, "/in/sub/a%2Fb?a=1&b=%2F&a=2"},
		{"body", string(got.Body), string(body)},
		{"content length", strconv.FormatInt(got.ContentLength, 10), strconv.Itoa(len(body))},
		{"host", got.Host, strings.TrimPrefix(u.URL, "http://")},
		{"X-Forwarded-Host", got.Header.Get("X-Forwarded-Host"), "gateway.example"},
		{"X-Forwarded-Proto", got.Header.Get("X-Forwarded-Proto"), "https"},
		{"X-Forwarded-For", got.Header.Get("X-Forwarded-For"), "203.0.113.7"},
		{"Content-Type", got.Header.Get("Content-Type"), "application/octet-stream"},
		{"X-Multi", strings.Join(got.Header.Values("X-Multi"), "|"), "one|two"},
		{"User-Agent", got.Header.Get("User-Agent"), "Stripe/1.0"},
		{"Accept-Encoding (never added)", got.Header.Get("Accept-Encoding"), ""},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("upstream saw %q, want %q", c.got, c.want)
			}
		})
	}
}

func TestDoAddsNoUserAgent(t *testing.T) {
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	if _, err := f.Do(context.Background(), post(u.URL, "ua")); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if vs, ok := u.requests()[0].Header["User-Agent"]; ok {
		t.Errorf("upstream saw User-Agent %q, want none (the client sent none)", vs)
	}
}

func TestDoEmptyBody(t *testing.T) {
	cases := []struct {
		method string
	}{{http.MethodPost}, {http.MethodGet}, {http.MethodDelete}}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			u := newUpstream(t, nil)
			f := newForwarder(t, forward.Options{})
			r := post(u.URL, "empty")
			r.Method, r.Body = c.method, nil
			if _, err := f.Do(context.Background(), r); err != nil {
				t.Fatalf("Do: %v", err)
			}
			got := u.requests()[0]
			if got.Method != c.method || len(got.Body) != 0 {
				t.Errorf("upstream saw %s with %d body bytes, want %s with none", got.Method, len(got.Body), c.method)
			}
		})
	}
}

func TestDoStripsHopByHopHeaders(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "secret")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("Upgrade", "h2c")
		h.Set("X-Resp-End", "kept")
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("Content-Encoding", "gzip")
		_, _ = w.Write([]byte("\x1f\x8bnot really gzip"))
	})
	f := newForwarder(t, forward.Options{})
	resp, err := f.Do(context.Background(), &forward.Request{
		Method: http.MethodPost,
		URL:    u.URL,
		Header: http.Header{
			"Connection":          {"X-Hop-A, x-hop-b"},
			"X-Hop-A":             {"1"},
			"X-Hop-B":             {"2"},
			"Keep-Alive":          {"timeout=5"},
			"Proxy-Authorization": {"Basic c2VjcmV0"},
			"Proxy-Connection":    {"keep-alive"},
			"Te":                  {"trailers"},
			"Trailer":             {"X-Sum"},
			"Transfer-Encoding":   {"chunked"},
			"Upgrade":             {"websocket"},
			"X-End":               {"kept"},
		},
		Body:    []byte("body"),
		Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	got := u.requests()[0].Header
	reqChecks := []struct{ name, want string }{
		{"Connection", ""}, {"X-Hop-A", ""}, {"X-Hop-B", ""}, {"Keep-Alive", ""},
		{"Proxy-Authorization", ""}, {"Proxy-Connection", ""}, {"Te", ""}, {"Trailer", ""},
		{"Transfer-Encoding", ""}, {"Upgrade", ""}, {"X-End", "kept"},
	}
	for _, c := range reqChecks {
		t.Run("request/"+c.name, func(t *testing.T) {
			if v := got.Get(c.name); v != c.want {
				t.Errorf("upstream saw %s: %q, want %q", c.name, v, c.want)
			}
		})
	}
	respChecks := []struct{ name, want string }{
		{"Connection", ""}, {"X-Resp-Hop", ""}, {"Keep-Alive", ""}, {"Proxy-Authenticate", ""},
		{"Upgrade", ""}, {"X-Resp-End", "kept"}, {"Set-Cookie", "a=1|b=2"}, {"Content-Encoding", "gzip"},
	}
	for _, c := range respChecks {
		t.Run("response/"+c.name, func(t *testing.T) {
			if v := strings.Join(resp.Header.Values(c.name), "|"); v != c.want {
				t.Errorf("response %s: %q, want %q", c.name, v, c.want)
			}
		})
	}
	if string(resp.Body) != "\x1f\x8bnot really gzip" {
		t.Errorf("response body %q, want the upstream's bytes untouched", resp.Body)
	}
}

// Headers an answer names in Connection are hop-by-hop (RFC 9110 §7.6.1)
// also when Connection says "close" too: http.ReadResponse deletes a
// Connection header carrying "close" before the forwarder reads it, so
// the headers it named passed on to the provider, and into records.
func TestDoStripsHeadersNamedBesideClose(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Connection", "close, X-Resp-Hop")
		h.Add("Connection", "X-Other-Hop")
		h.Set("X-Resp-Hop", "secret")
		h.Set("X-Other-Hop", "secret")
		h.Set("X-Resp-End", "kept")
		_, _ = w.Write([]byte("ok"))
	})
	f := newForwarder(t, forward.Options{})
	resp, err := f.Do(context.Background(), &forward.Request{
		Method: http.MethodPost, URL: u.URL, Body: []byte("body"), Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	for name, want := range map[string]string{"Connection": "", "X-Resp-Hop": "", "X-Other-Hop": "", "X-Resp-End": "kept"} {
		if v := resp.Header.Get(name); v != want {
			t.Errorf("response %s: %q, want %q", name, v, want)
		}
	}
	if string(resp.Body) != "ok" {
		t.Errorf("response body %q, want \"ok\"", resp.Body)
	}
}

func TestDoReplacesForwardingAndKeyHeaders(t *testing.T) {
	spoofed := http.Header{
		"X-Forwarded-For":   {"6.6.6.6", "7.7.7.7"},
		"x-forwarded-proto": {"ftp"}, // not canonical, as a careless caller might copy it
		"X-Forwarded-Host":  {"evil.example"},
		"Forwarded":         {"for=6.6.6.6"},
		"idempotency-key":   {"client-chosen"},
		"X-Test-Id":         {"fwd"},
	}
	cases := []struct {
		name string
		req  forward.Request
		want map[string][]string // nil value: header absent
	}{
		{
			name: "set fresh",
			req: forward.Request{ClientIP: "203.0.113.7", Proto: "https", Host: "gw.example",
				KeyHeader: "Idempotency-Key", Key: "evt_1"},
			want: map[string][]string{
				"X-Forwarded-For": {"203.0.113.7"}, "X-Forwarded-Proto": {"https"},
				"X-Forwarded-Host": {"gw.example"}, "Forwarded": nil, "Idempotency-Key": {"evt_1"},
			},
		},
		{
			name: "other key header",
			req:  forward.Request{ClientIP: "203.0.113.7", KeyHeader: "X-Dedup-Key", Key: "evt_2"},
			want: map[string][]string{
				"X-Forwarded-For": {"203.0.113.7"}, "X-Dedup-Key": {"evt_2"},
				"Idempotency-Key": {"client-chosen"}, "X-Forwarded-Proto": nil, "X-Forwarded-Host": nil,
			},
		},
		{
			name: "nothing to set",
			req:  forward.Request{},
			want: map[string][]string{
				"X-Forwarded-For": nil, "X-Forwarded-Proto": nil, "X-Forwarded-Host": nil,
				"Forwarded": nil, "Idempotency-Key": {"client-chosen"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, nil)
			f := newForwarder(t, forward.Options{})
			r := c.req
			r.Method, r.URL, r.Header, r.Timeout = http.MethodPost, u.URL, spoofed, 5*time.Second
			if _, err := f.Do(context.Background(), &r); err != nil {
				t.Fatalf("Do: %v", err)
			}
			got := u.requests()[0].Header
			for name, want := range c.want {
				if v := got.Values(name); fmt.Sprint(v) != fmt.Sprint(want) { // nil and empty print alike
					t.Errorf("upstream saw %s: %q, want %q", name, v, want)
				}
			}
		})
	}
	//lint:ignore SA1008 the caller's own non-canonical entry, checked unchanged
	if spoofed.Get("X-Forwarded-For") != "6.6.6.6" || spoofed["idempotency-key"][0] != "client-chosen" {
		t.Errorf("Do modified the caller's header: %v", spoofed)
	}
}

func TestDoInjectsTrace(t *testing.T) {
	type traceKey struct{}
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{InjectTrace: func(ctx context.Context, h http.Header) {
		h.Set("Traceparent", ctx.Value(traceKey{}).(string))
	}})
	r := post(u.URL, "trace")
	r.Header.Set("Traceparent", "00-provider-provider-01")
	ctx := context.WithValue(context.Background(), traceKey{}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := f.Do(ctx, r); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := u.requests()[0].Header.Values("Traceparent"); len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("upstream saw traceparent %q, want the gateway's", got)
	}
}

// Whatever the upstream answers is a Response, not an error, and is never
// acted upon: a 503 is relayed (the caller releases), a 302 is not followed.
func TestDoReturnsUpstreamStatus(t *testing.T) {
	cases := []struct {
		status             int
		header, value, msg string
	}{
		{http.StatusServiceUnavailable, "Retry-After", "30", "busy"},
		{http.StatusFound, "Location", "/elsewhere", "moved"},
		{http.StatusNotFound, "Content-Type", "text/plain", "no such order"},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(c.header, c.value)
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.msg)
			})
			f := newForwarder(t, forward.Options{})
			resp, err := f.Do(context.Background(), post(u.URL, "s"))
			if err != nil {
				t.Fatalf("Do: %v, want the %d as a response", err, c.status)
			}
			if resp.Status != c.status || string(resp.Body) != c.msg || resp.Header.Get(c.header) != c.value {
				t.Errorf("response = %d %q %v, want %d %q with %s", resp.Status, resp.Body, resp.Header, c.status, c.msg, c.header)
			}
			if n := len(u.requests()); n != 1 {
				t.Errorf("upstream got %d requests, want 1", n)
			}
		})
	}
}

func TestDoTimeout(t *testing.T) {
	cases := []struct {
		name   string
		handle http.HandlerFunc
	}{
		{"no headers", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		// A body that never finishes after its head is an answer cut
		// short (TestDoBodyCutShortKeepsTheStatus).
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, c.handle)
			f := newForwarder(t, forward.Options{})
			r := post(u.URL, "slow")
			r.Timeout = 100 * time.Millisecond
			_, err := f.Do(context.Background(), r)
			if !errors.Is(err, forward.ErrTimeout) {
				t.Fatalf("Do error = %v, want ErrTimeout", err)
			}
			if !forward.Ambiguous(err) || forward.StatusFor(err) != http.StatusGatewayTimeout {
				t.Errorf("Ambiguous = %v, StatusFor = %d; want true, 504", forward.Ambiguous(err), forward.StatusFor(err))
			}
			if n := u.count("slow"); n != 1 {
				t.Errorf("upstream got %d requests, want 1", n)
			}
		})
	}
}

func TestDoUnreachable(t *testing.T) {
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()

	var tlsCount atomic.Int64
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { tlsCount.Add(1) }))
	defer untrusted.Close()

	cases := []struct {
		name string
		url  string
	}{
		{"connection refused", refusedURL},
		{"TLS handshake failure", untrusted.URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newForwarder(t, forward.Options{})
			_, err := f.Do(context.Background(), post(c.url, "x"))
			if !errors.Is(err, forward.ErrUnreachable) {
				t.Fatalf("Do error = %v, want ErrUnreachable", err)
			}
			if forward.Ambiguous(err) || forward.StatusFor(err) != http.StatusBadGateway {
				t.Errorf("Ambiguous = %v, StatusFor = %d; want false, 502", forward.Ambiguous(err), forward.StatusFor(err))
			}
		})
	}
	if n := tlsCount.Load(); n != 0 {
		t.Errorf("TLS upstream handled %d requests, want 0", n)
	}
}

// A forward that times out while waiting for a connection sent nothing: it
// is unreachable, not ambiguous, even though its Timeout expired.
func TestDoTimeoutBeforeSendingIsUnreachable(t *testing.T) {
	release := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	f := newForwarder(t, forward.Options{MaxConnsPerHost: 1})

	first := make(chan error, 1)
	go func() {
		_, err := f.Do(context.Background(), post(u.URL, "first"))
		first <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the first delivery at the upstream", func() bool { return u.count("first") == 1 })

	r := post(u.URL, "second")
	r.Timeout = 100 * time.Millisecond
	_, err := f.Do(context.Background(), r)
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first Do: %v", err)
	}
	if !errors.Is(err, forward.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || forward.Ambiguous(err) {
		t.Fatalf("Do error = %v, want unambiguous ErrUnreachable with DeadlineExceeded", err)
	}
	if n := u.count("second"); n != 0 {
		t.Errorf("upstream got %d requests, want 0", n)
	}
}

// The upstream reads a delivery, then closes its (reused, keep-alive)
// connection without answering. net/http would replay such a request on a
// new connection if it considered it replayable; Do must not, whatever the
// method, body or idempotency header.
func TestDoNeverResendsAfterConnectionCut(t *testing.T) {
	cases := []struct {
		name   string
		method string
		body   []byte
		header string
	}{
		{"POST body Idempotency-Key", http.MethodPost, []byte(`{"a":1}`), "Idempotency-Key"},
		{"POST empty Idempotency-Key", http.MethodPost, nil, "Idempotency-Key"},
		{"POST body X-Idempotency-Key", http.MethodPost, []byte(`{"a":1}`), "X-Idempotency-Key"},
		{"GET empty", http.MethodGet, nil, ""},
		{"PUT body", http.MethodPut, []byte("x"), "Idempotency-Key"},
	}
	const rounds = 50
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Cut") != "" {
					hangUp(t, w)
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			f := newForwarder(t, forward.Options{})
			for i := range rounds {
				warm := post(u.URL, fmt.Sprintf("warm-%d", i))
				if _, err := f.Do(context.Background(), warm); err != nil {
					t.Fatalf("round %d: warm-up Do: %v", i, err)
				}
				id := fmt.Sprintf("cut-%d", i)
				r := post(u.URL, id)
				r.Method, r.Body, r.KeyHeader = c.method, c.body, c.header
				r.Header.Set("X-Cut", "1")
				_, err := f.Do(context.Background(), r)
				if !errors.Is(err, forward.ErrNoAnswer) || !forward.Ambiguous(err) || forward.StatusFor(err) != http.StatusBadGateway {
					t.Fatalf("round %d: Do error = %v, want ambiguous ErrNoAnswer (502)", i, err)
				}
				if n := u.count(id); n != 1 {
					t.Fatalf("round %d: upstream got the delivery %d times, want 1", i, n)
				}
				// One connection per round: the cut request reused the warm-up's.
				if n := u.conns.Load(); n != int64(i+1) {
					t.Fatalf("round %d: %d connections opened, want %d", i, n, i+1)
				}
			}
		})
	}
}

// The hazard TestDoNeverResendsAfterConnectionCut guards against: a plain
// net/http request with a rewindable body and an Idempotency-Key header is
// sent twice. If this starts failing, net/http changed; the guard stays.
func TestStdlibResendsReplayableRequest(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Cut") != "" {
			hangUp(t, w)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	send := func(id string, cut bool) error {
		req, err := http.NewRequest(http.MethodPost, u.URL, bytes.NewReader([]byte("{}")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Test-Id", id)
		req.Header.Set("Idempotency-Key", id)
		if cut {
			req.Header.Set("X-Cut", "1")
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := send("warm", false); err != nil {
		t.Fatal(err)
	}
	if err := send("cut", true); err == nil {
		t.Fatal("cut request succeeded, want an error")
	}
	if n := u.count("cut"); n != 2 {
		t.Errorf("upstream got the stdlib request %d times, want 2 (one silent retry)", n)
	}
}

// A connection cut in the middle of an answer's body leaves the answer:
// its status, without the body.
func TestDoConnectionCutMidResponse(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "partial")
		_ = http.NewResponseController(w).Flush()
		hangUp(t, w)
	})
	f := newForwarder(t, forward.Options{})
	resp, err := f.Do(context.Background(), post(u.URL, "mid"))
	if !forward.HeadOnly(resp, err) || forward.Ambiguous(err) || resp.Status != http.StatusOK || resp.Body != nil {
		t.Fatalf("Do = %+v, %v; want the 200 without its body, not ambiguous", resp, err)
	}
	if n := u.count("mid"); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

func TestDoCanceledByCaller(t *testing.T) {
	t.Run("after sending", func(t *testing.T) {
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		f := newForwarder(t, forward.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if !testenv.Poll(5*time.Second, func() bool { return u.count("bye") == 1 }) {
				t.Error("the delivery did not reach the upstream within 5s")
			}
			cancel()
		}()
		_, err := f.Do(ctx, post(u.URL, "bye"))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, forward.ErrNoAnswer) || !forward.Ambiguous(err) {
			t.Fatalf("Do error = %v, want context.Canceled and ambiguous ErrNoAnswer", err)
		}
	})
	t.Run("before sending", func(t *testing.T) {
		u := newUpstream(t, nil)
		f := newForwarder(t, forward.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.Do(ctx, post(u.URL, "never"))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, forward.ErrUnreachable) || forward.Ambiguous(err) {
			t.Fatalf("Do error = %v, want context.Canceled and ErrUnreachable", err)
		}
		if n := u.count("never"); n != 0 {
			t.Errorf("upstream got %d requests, want 0", n)
		}
	})
}

func TestDoResponseBodyLimit(t *testing.T) {
	const limit = 1024
	cases := []struct {
		name    string
		size    int
		chunked bool
		wantErr error
	}{
		{"at the limit", limit, false, nil},
		{"at the limit, chunked", limit, true, nil},
		{"over, Content-Length", limit + 1, false, forward.ErrResponseTooLarge},
		{"over, chunked", 4 * limit, true, forward.ErrResponseTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("a"), c.size)
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Size", strconv.Itoa(c.size))
				if !c.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(c.size))
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(body[:1]) // force chunking without Content-Length
				_ = http.NewResponseController(w).Flush()
				_, _ = w.Write(body[1:])
			})
			f := newForwarder(t, forward.Options{MaxResponseBody: limit})
			resp, err := f.Do(context.Background(), post(u.URL, "big"))
			if !errors.Is(err, c.wantErr) || (err != nil) != (c.wantErr != nil) {
				t.Fatalf("Do error = %v, want %v", err, c.wantErr)
			}
			if resp == nil || resp.Status != http.StatusCreated || resp.Header.Get("X-Size") != strconv.Itoa(c.size) {
				t.Fatalf("response = %+v, want status 201 and headers even when too large", resp)
			}
			if err == nil && !bytes.Equal(resp.Body, body) {
				t.Errorf("body has %d bytes, want %d", len(resp.Body), len(body))
			}
			if forward.Ambiguous(err) {
				t.Errorf("Ambiguous(%v) = true, want false: the upstream answered", err)
			}
		})
	}
}

func TestDoConcurrentForwards(t *testing.T) {
	const n = 200
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := f.Do(context.Background(), post(u.URL, fmt.Sprintf("c-%d", i)))
			if err == nil && resp.Status != http.StatusOK {
				err = fmt.Errorf("status %d", resp.Status)
			}
			if err != nil {
				errs <- fmt.Errorf("forward %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts := map[string]int{}
	for _, r := range u.requests() {
		counts[r.Header.Get("X-Test-Id")]++
	}
	for i := range n {
		if c := counts[fmt.Sprintf("c-%d", i)]; c != 1 {
			t.Errorf("delivery c-%d reached the upstream %d times, want 1", i, c)
		}
	}
	if len(counts) != n {
		t.Errorf("upstream saw %d distinct deliveries, want %d", len(counts), n)
	}
}

func TestStatusForAndAmbiguous(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("forward POST h: %w: EOF", err) }
	cases := []struct {
		name          string
		err           error
		wantStatus    int
		wantAmbiguous bool
	}{
		{"nil", nil, 0, false},
		{"unreachable", wrap(forward.ErrUnreachable), http.StatusBadGateway, false},
		{"timeout", wrap(forward.ErrTimeout), http.StatusGatewayTimeout, true},
		{"no answer", wrap(forward.ErrNoAnswer), http.StatusBadGateway, true},
		{"too large", wrap(forward.ErrResponseTooLarge), http.StatusBadGateway, false},
		{"other", errors.New("forward: build request: bad method"), http.StatusBadGateway, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := forward.StatusFor(c.err); got != c.wantStatus {
				t.Errorf("StatusFor = %d, want %d", got, c.wantStatus)
			}
			if got := forward.Ambiguous(c.err); got != c.wantAmbiguous {
				t.Errorf("Ambiguous = %v, want %v", got, c.wantAmbiguous)
			}
		})
	}
}

func TestJoinURL(t *testing.T) {
	cases := []struct {
		name, base, suffix, query, want string
	}{
		{"exact", "http://u:9000/billing/stripe", "", "", "http://u:9000/billing/stripe"},
		{"exact with query", "http://u/in", "", "a=1&b=%2F", "http://u/in?a=1&b=%2F"},
		{"exact keeps base query", "http://u/in?tenant=7", "", "", "http://u/in?tenant=7"},
		{"both queries", "http://u/in?tenant=7", "", "a=1", "http://u/in?tenant=7&a=1"},
		{"prefix", "http://u/in", "/a/b", "", "http://u/in/a/b"},
		{"prefix, base trailing slash", "http://u/in/", "/a", "", "http://u/in/a"},
		{"prefix, no slashes", "http://u/in", "a", "", "http://u/in/a"},
		{"prefix, base slash only", "http://u/in/", "a", "", "http://u/in/a"},
		{"prefix keeps trailing slash", "http://u/in", "/a/", "", "http://u/in/a/"},
		{"prefix of bare host", "http://u", "/a", "", "http://u/a"},
		{"prefix of root", "http://u/", "/a", "", "http://u/a"},
		{"prefix, suffix is slash", "http://u/in", "/", "", "http://u/in/"},
		{"prefix keeps encoding", "http://u/in", "/a%2Fb/c%20d", "q=%26", "http://u/in/a%2Fb/c%20d?q=%26"},
		{"prefix with base query", "http://u/in?t=1", "/a", "b=2", "http://u/in/a?t=1&b=2"},
		{"fragment dropped", "http://u/in#frag", "/a", "", "http://u/in/a"},
		// upstream.url's parameters win: an application reading the last of
		// a repeated parameter must not read the sender's.
		{"sender's parameter of a configured name dropped", "http://u/qs?tenant=acme&api_key=K3Y", "",
			"tenant=evil&x=1&api_key=x", "http://u/qs?tenant=acme&api_key=K3Y&x=1"},
		{"configured name escaped by the sender", "http://u/qs?api_key=K3Y", "", "api%5Fkey=x&b=2", "http://u/qs?api_key=K3Y&b=2"},
		{"configured name as an array", "http://u/qs?tenant=acme", "", "tenant[]=evil&tenant%5B0%5D=evil", "http://u/qs?tenant=acme"},
		{"another key of a configured map", "http://u/qs?filter[tenant]=acme", "", "filter[status]=open&filter[tenant]=evil&filter=evil", "http://u/qs?filter[tenant]=acme&filter[status]=open"},
		{"configured name as PHP reads it", "http://u/qs?api_key=K3Y", "", "api.key=x&api+key=y", "http://u/qs?api_key=K3Y"},
		{"configured name after a semicolon", "http://u/qs?tenant=acme", "", "a=1;tenant=evil&b=2", "http://u/qs?tenant=acme&b=2"},
		{"configured name without a value", "http://u/qs?debug", "", "debug=1&a=1", "http://u/qs?debug&a=1"},
		{"names differ in case", "http://u/qs?tenant=acme", "", "Tenant=x", "http://u/qs?tenant=acme&Tenant=x"},
		{"every sender parameter dropped", "http://u/qs?tenant=acme", "/a", "tenant=evil", "http://u/qs/a?tenant=acme"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := forward.JoinURL(c.base, c.suffix, c.query); got != c.want {
				t.Errorf("JoinURL(%q, %q, %q) = %q, want %q", c.base, c.suffix, c.query, got, c.want)
			}
		})
	}
}

func BenchmarkDo1KiB(b *testing.B) {
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"received":true}`)
	}))
	defer u.Close()
	f := newForwarder(b, forward.Options{})
	r := post(u.URL, "bench")
	r.Body = bytes.Repeat([]byte("x"), 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(r.Body)))
	for b.Loop() {
		if _, err := f.Do(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

// Credentials in upstream.url go to the upstream as Basic auth, in place of
// an Authorization the provider sent; without them the provider's passes.
func TestDoURLCredentialsAreBasicAuth(t *testing.T) {
	var got []string
	var mu sync.Mutex
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer u.Close()
	f := newForwarder(t, forward.Options{})
	withCreds := strings.Replace(u.URL, "http://", "http://app:p%40ss@", 1)
	for _, target := range []string{withCreds + "/x", u.URL + "/x"} {
		r := post(target, "auth")
		r.Header.Set("Authorization", "Basic cHJvdmlkZXI6c2VjcmV0")
		if _, err := f.Do(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("app:p@ss")), "Basic cHJvdmlkZXI6c2VjcmV0"}
	if !slices.Equal(got, want) {
		t.Fatalf("Authorization received %q, want %q", got, want)
	}
}

// An https upstream that requires a client certificate refuses a gateway
// presenting none in its TLS layer: its application never sees the
// request, so it is ErrUnreachable (never ambiguous: not held). Under
// TLS 1.3 the refusal arrives after the request was written, and it was
// taken for an upstream that received the request and gave no answer.
func TestDoTLSClientCertRefusedIsUnreachable(t *testing.T) {
	for name, maxVersion := range map[string]uint16{"TLS1.2": tls.VersionTLS12, "TLS1.3": tls.VersionTLS13} {
		t.Run(name, func(t *testing.T) {
			var got atomic.Int64
			u := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Add(1)
				_, _ = io.WriteString(w, "ok")
			}))
			u.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, MaxVersion: maxVersion}
			u.StartTLS()
			defer u.Close()
			f := newForwarder(t, forward.Options{TLSConfig: u.Client().Transport.(*http.Transport).TLSClientConfig})
			_, err := f.Do(context.Background(), post(u.URL, "mtls"))
			if got.Load() != 0 {
				t.Fatalf("the upstream's handler ran")
			}
			if !errors.Is(err, forward.ErrUnreachable) || forward.Ambiguous(err) {
				t.Fatalf("Do = %v (ambiguous %v), want ErrUnreachable", err, forward.Ambiguous(err))
			}
		})
	}
}

func TestDoTLS(t *testing.T) {
	var cuts atomic.Int64
	u := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Cut") != "" {
			cuts.Add(1)
			hangUp(t, w)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer u.Close()
	f := newForwarder(t, forward.Options{TLSConfig: u.Client().Transport.(*http.Transport).TLSClientConfig})

	resp, err := f.Do(context.Background(), post(u.URL, "warm"))
	if err != nil || string(resp.Body) != "ok" {
		t.Fatalf("Do over TLS: %v", err)
	}
	r := post(u.URL, "cut")
	r.Header.Set("X-Cut", "1")
	_, err = f.Do(context.Background(), r)
	if !errors.Is(err, forward.ErrNoAnswer) {
		t.Fatalf("Do error = %v, want ErrNoAnswer", err)
	}
	if n := cuts.Load(); n != 1 {
		t.Errorf("upstream got the delivery %d times, want 1", n)
	}
}

// TestDoDropsUnderscoreTwinsOfGatewayHeaders: CGI-style upstreams (WSGI,
// Rack, PHP) read X_Forwarded_For as X-Forwarded-For, so a sender's field
// spelling a forwarding header or the key header with "_" never passes;
// other fields with "_" do.
func TestDoDropsUnderscoreTwinsOfGatewayHeaders(t *testing.T) {
	u := newUpstream(t, nil)
	f := newForwarder(t, forward.Options{})
	r := forward.Request{
		Method: http.MethodPost, URL: u.URL, Timeout: 5 * time.Second,
		ClientIP: "203.0.113.7", Proto: "https", Host: "gw.example", KeyHeader: "Idempotency-Key", Key: "evt_1",
		Header: http.Header{
			"X_Forwarded_For":   {"6.6.6.6"},
			"X_Forwarded_Proto": {"ftp"},
			"x_forwarded_host":  {"evil.example"},
			"Idempotency_Key":   {"client-chosen"},
			"X_Custom_Id":       {"kept"},
		},
	}
	if _, err := f.Do(context.Background(), &r); err != nil {
		t.Fatalf("Do: %v", err)
	}
	kept := false
	for name, v := range u.requests()[0].Header {
		dashed := strings.ReplaceAll(name, "_", "-")
		switch {
		case strings.Contains(name, "_") && strings.EqualFold(dashed, "X-Custom-Id"):
			kept = true
		case strings.Contains(name, "_"):
			t.Errorf("upstream saw the sender's %s: %q", name, v)
		}
	}
	if !kept {
		t.Errorf("X_Custom_Id was dropped: %v", u.requests()[0].Header)
	}
}

// An Expect field is the provider's request to the gateway, which has
// read the whole body before forwarding: passed on, an expectation the
// upstream's server does not know is answered 417 before the application
// sees the delivery (Go's net/http does so for anything but 100-continue),
// and that 4xx would be recorded as the delivery's final answer and
// replayed to every retry — the event never reaching the application.
func TestDoDropsExpect(t *testing.T) {
	for _, expect := range []string{"100-continue", "x-unknown"} {
		t.Run(expect, func(t *testing.T) {
			u := newUpstream(t, nil)
			f := newForwarder(t, forward.Options{})
			resp, err := f.Do(context.Background(), &forward.Request{
				Method:  http.MethodPost,
				URL:     u.URL,
				Header:  http.Header{"Expect": {expect}, "Content-Type": {"application/json"}},
				Body:    []byte(`{"id":"evt_expect"}`),
				Timeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			reqs := u.requests()
			if resp.Status != http.StatusOK || len(reqs) != 1 {
				t.Fatalf("Expect: %s: answer %d, the application saw %d requests; want 200 and 1", expect, resp.Status, len(reqs))
			}
			if v := reqs[0].Header.Get("Expect"); v != "" {
				t.Fatalf("upstream saw Expect %q, want none", v)
			}
		})
	}
}
