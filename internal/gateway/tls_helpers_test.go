package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA is a certificate authority of the test's own, which its clients
// trust.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(tb testing.TB) *testCA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hookstamp test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// files writes a leaf issued as issue does to tls.crt and tls.key in a
// directory of the test's, and returns their paths.
func (ca *testCA) files(tb testing.TB, serial int64, notBefore, notAfter time.Time, names ...string) (certFile, keyFile string) {
	tb.Helper()
	dir := tb.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(tb, serial, notBefore, notAfter, names...)
	writeAtomic(tb, certFile, c)
	writeAtomic(tb, keyFile, k)
	return certFile, keyFile
}

// issue returns the PEM certificate and key of a leaf for names (DNS
// names or IP addresses), valid from notBefore to notAfter, with serial.
func (ca *testCA) issue(tb testing.TB, serial int64, notBefore, notAfter time.Time, names ...string) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writeAtomic replaces path with data in one rename, as a certificate
// tool does.
func writeAtomic(tb testing.TB, path string, data []byte) {
	tb.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// servedCert opens a new TLS connection to addr and returns the leaf
// certificate the server presented (verified against roots for
// serverName) and the connection's state.
func servedCert(tb testing.TB, addr, serverName string, roots *x509.CertPool) (*x509.Certificate, tls.ConnectionState) {
	tb.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		tb.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.PeerCertificates[0], st
}

// tryServedCert is servedCert for polling: a failed handshake is an error.
func tryServedCert(addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: serverName, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// httpsClient trusts roots and sends serverName as SNI; it keeps no idle
// connection, so that each request shows the certificate served now.
func httpsClient(roots *x509.CertPool, serverName string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName},
		DisableKeepAlives: true,
	}}
}

// deliverWith POSTs a JSON webhook with c.
func deliverWith(tb testing.TB, c *http.Client, url, body string, hdr ...string) reply {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// logTap is a logger whose lines at info and above go to the test log
// and are kept, so that a test can wait for one.
type logTap struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	tb   testing.TB
	done bool // the test has ended: background lines are only kept
}

// newLogTap must be called before the gateway starts: its cleanup, which
// stops writing to the test log, then runs after the gateway's shutdown.
func newLogTap(tb testing.TB) (*logTap, *slog.Logger) {
	t := &logTap{tb: tb}
	tb.Cleanup(func() { t.mu.Lock(); t.done = true; t.mu.Unlock() })
	return t, slog.New(slog.NewTextHandler(t, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (t *logTap) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		t.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return t.buf.Write(p)
}

func (t *logTap) contains(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Contains(t.buf.String(), s)
}

// get sends a GET with the default client and returns status and body.
func get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	resp, err := client.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
