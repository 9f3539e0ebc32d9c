package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// tlsFilesGateway starts a gateway serving HTTPS with the certificate
// files certFile and keyFile, reloaded every 20ms, with an admin
// listener; server is YAML added to the server section.
func tlsFilesGateway(tb testing.TB, up *upstream, certFile, keyFile, server string) (*Gateway, *logTap) {
	tb.Helper()
	tap, log := newLogTap(tb)
	cfg := routesConfig(tb, dbPath(tb), `  tls:
    cert_file: `+strconvQuote(certFile)+`
    key_file: `+strconvQuote(keyFile)+"\n"+server, "", `  - name: hooks
    path: /hooks
    upstream: {url: "`+up.URL+`/up", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
`, nil)
	cfg.Admin.Listen = "127.0.0.1:0"
	return startGatewayWith(tb, cfg, Options{Logger: log, TLSReloadInterval: 20 * time.Millisecond}), tap
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// A delivery over HTTPS goes through the whole pipeline (forwarded once,
// the upstream told it came over https, the repeat replayed); a renewed
// certificate written over the files is served to new connections without
// a restart; a corrupt one is logged and the last good one kept.
func TestTLSFilesServedReloadedAndCorruptKept(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	now := time.Now()
	c1, k1 := ca.issue(t, 101, now.Add(-time.Hour), now.Add(time.Hour), "hooks.example.test", "127.0.0.1")
	writeAtomic(t, certFile, c1)
	writeAtomic(t, keyFile, k1)
	up := newUpstream(t)
	g, tap := tlsFilesGateway(t, up, certFile, keyFile, "")
	if !strings.HasPrefix(g.URL(), "https://") {
		t.Fatalf("URL %s: want https", g.URL())
	}

	if leaf, _ := servedCert(t, g.Addr(), "hooks.example.test", ca.pool); leaf.SerialNumber.Int64() != 101 {
		t.Fatalf("served serial %d, want 101", leaf.SerialNumber)
	}
	hc := httpsClient(ca.pool, "hooks.example.test")
	first := deliverWith(t, hc, g.URL()+"/hooks", `{"amount":1}`, "X-Event-Id", "evt-1")
	wantOutcome(t, first, http.StatusOK, "forwarded")
	if p := up.lastHeader().Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("upstream got X-Forwarded-Proto %q, want https", p)
	}
	again := deliverWith(t, hc, g.URL()+"/hooks", `{"amount":1}`, "X-Event-Id", "evt-1")
	wantOutcome(t, again, http.StatusOK, "replayed")
	sameReply(t, first, again)
	if up.total.Load() != 1 {
		t.Fatalf("upstream received %d deliveries, want 1", up.total.Load())
	}

	c2, k2 := ca.issue(t, 102, now.Add(-time.Minute), now.Add(2*time.Hour), "hooks.example.test", "127.0.0.1")
	writeAtomic(t, keyFile, k2)
	writeAtomic(t, certFile, c2)
	testenv.Eventually(t, 5*time.Second, "the renewed certificate on a new connection", func() bool {
		leaf, _ := servedCert(t, g.Addr(), "hooks.example.test", ca.pool)
		return leaf.SerialNumber.Int64() == 102
	})
	wantOutcome(t, deliverWith(t, hc, g.URL()+"/hooks", `{}`, "X-Event-Id", "evt-2"), http.StatusOK, "forwarded")

	writeAtomic(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"))
	testenv.Eventually(t, 5*time.Second, "the corrupt certificate logged", func() bool {
		return tap.contains("do not load; still serving the previous certificate")
	})
	if leaf, _ := servedCert(t, g.Addr(), "hooks.example.test", ca.pool); leaf.SerialNumber.Int64() != 102 {
		t.Fatalf("after a corrupt replacement served serial %d, want 102 kept", leaf.SerialNumber)
	}
	wantOutcome(t, deliverWith(t, hc, g.URL()+"/hooks", `{}`, "X-Event-Id", "evt-2"), http.StatusOK, "replayed")
	if up.total.Load() != 2 {
		t.Fatalf("upstream received %d deliveries, want 2", up.total.Load())
	}
}

// min_version is enforced, and the listener speaks HTTP/1.1 only, even to
// a client that prefers h2.
func TestTLSMinVersionAndHTTP1Only(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.files(t, 7, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1")
	up := newUpstream(t)
	for _, tc := range []struct {
		name, server string
		refused      uint16 // a client with this as its highest version is refused
		accepted     uint16
	}{
		{"default 1.2", "", tls.VersionTLS11, tls.VersionTLS12},
		{"1.3", "    min_version: \"1.3\"\n", tls.VersionTLS12, tls.VersionTLS13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := tlsFilesGateway(t, up, certFile, keyFile, tc.server)
			dial := func(max uint16) (tls.ConnectionState, error) {
				conn, err := tls.Dial("tcp", g.Addr(), &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS10,
					MaxVersion: max, NextProtos: []string{"h2", "http/1.1"}})
				if err != nil {
					return tls.ConnectionState{}, err
				}
				defer conn.Close()
				return conn.ConnectionState(), nil
			}
			if _, err := dial(tc.refused); err == nil {
				t.Fatalf("a client of at most %s was accepted", tls.VersionName(tc.refused))
			}
			st, err := dial(tc.accepted)
			if err != nil {
				t.Fatalf("a client of %s was refused: %v", tls.VersionName(tc.accepted), err)
			}
			if st.NegotiatedProtocol != "http/1.1" {
				t.Fatalf("negotiated %q, want http/1.1", st.NegotiatedProtocol)
			}
			if conn, err := tls.Dial("tcp", g.Addr(), &tls.Config{RootCAs: ca.pool, NextProtos: []string{"h2"}}); err == nil {
				conn.Close()
				t.Fatal("a client offering only h2 was accepted")
			}
		})
	}
}

// server.redirect_listen sends every plain-HTTP request to the same path
// and query on https, with a 308 that keeps a POST a POST.
func TestRedirectListenerSendsToHTTPS(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.files(t, 7, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1")
	up := newUpstream(t)
	g, _ := tlsFilesGateway(t, up, certFile, keyFile, "  redirect_listen: \"127.0.0.1:0\"\n")
	noFollow := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	_, port := splitPort(g.Addr())
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.RedirectAddr()+"/hooks?a=1&b=%2F", strings.NewReader(`{}`))
	req.Host = "hooks.example.test:8080"
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "https://hooks.example.test:" + strconv.Itoa(port) + "/hooks?a=1&b=%2F"
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("redirect %d to %q, want 308 to %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	if up.total.Load() != 0 {
		t.Fatalf("the upstream received %d requests through the redirect listener", up.total.Load())
	}
}

var expiryLine = regexp.MustCompile(`(?m)^hookstamp_tls_certificate_expiry_seconds\{[^}]*domain="([^"]+)"[^}]*\} (\S+)$`)

// /readyz reports a listener whose certificate has expired, and
// hookstamp_tls_certificate_expiry_seconds says how long each name's
// certificate has left (negative once expired).
func TestTLSReadinessAndExpiryMetric(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Time
		status              int
	}{
		{"valid", now.Add(-time.Hour), now.Add(90 * time.Minute), http.StatusOK},
		{"expired", now.Add(-time.Hour), now.Add(-10 * time.Minute), http.StatusServiceUnavailable},
		{"not yet valid", now.Add(time.Hour), now.Add(90 * time.Minute), http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certFile, keyFile := ca.files(t, 9, tc.notBefore, tc.notAfter, "hooks.example.test")
			g, _ := tlsFilesGateway(t, newUpstream(t), certFile, keyFile, "")
			status, body := get(t, "http://"+g.AdminAddr()+"/readyz")
			if status != tc.status || !strings.Contains(body, `"tls"`) {
				t.Fatalf("/readyz %d %s; want %d with a tls member", status, body, tc.status)
			}
			if tc.status != http.StatusOK && !strings.Contains(body, "no usable certificate") {
				t.Fatalf("/readyz %s does not say why", body)
			}
			_, metrics := get(t, "http://"+g.AdminAddr()+"/metrics")
			m := expiryLine.FindStringSubmatch(metrics)
			if m == nil || m[1] != "hooks.example.test" {
				t.Fatalf("no hookstamp_tls_certificate_expiry_seconds for hooks.example.test in /metrics:\n%s", grepLines(metrics, "tls"))
			}
			v, _ := strconv.ParseFloat(m[2], 64)
			if want := time.Until(tc.notAfter).Seconds(); math.Abs(v-want) > 60 {
				t.Fatalf("expiry %v s, want about %v s", v, want)
			}
		})
	}
}

// SIGTERM over TLS: a connection that completed its handshake but never
// sent a request does not hold the drain for read_timeout (it is closed),
// and a request half sent over TLS when shutdown began is still answered
// and recorded.
func TestTLSShutdownClosesConnectionsWithoutRequest(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.files(t, 7, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1")
	up := newUpstream(t)
	cfg := routesConfig(t, dbPath(t), "  read_timeout: 30s\n  tls: {cert_file: "+strconvQuote(certFile)+", key_file: "+strconvQuote(keyFile)+"}\n", "", `  - name: hooks
    path: /hooks
    upstream: {url: "`+up.URL+`/up", timeout: 2s}
    key: {sources: [{json: id}]}
`, nil)
	g := startGateway(t, cfg)
	dial := func() *tls.Conn {
		conn, err := tls.Dial("tcp", g.Addr(), &tls.Config{RootCAs: ca.pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	idle, half := dial(), dial()
	start := time.Now()
	shutdownMidRequest(t, g, half, "evt_tls_half")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v (a TLS connection without a request held it?)", d)
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("the TLS connection without a request is still open after shutdown")
	}
	if up.total.Load() != 1 {
		t.Fatalf("upstream received %d deliveries, want 1", up.total.Load())
	}
	g.closeAll()
}

// A provider misconfigured to send plain HTTP to the HTTPS listener is
// told so (400, a problem body), as Go's own server does, rather than
// seeing its connection closed without a word; nothing is forwarded.
func TestTLSPlainHTTPIsToldSo(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.files(t, 9, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "hooks.example.test")
	up := newUpstream(t)
	g, _ := tlsFilesGateway(t, up, certFile, keyFile, "")
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_plain\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to plain HTTP on the TLS port: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "HTTPS listener") {
		t.Errorf("plain HTTP on the TLS port: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if n := up.count("evt_plain"); n != 0 {
		t.Errorf("upstream received %d copies, want none", n)
	}
}
