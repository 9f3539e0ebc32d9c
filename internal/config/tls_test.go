package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate and its key into dir and returns their
// paths.
func selfSigned(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// oneRoute is a configuration of one route keyed by a header.
const oneRoute = `
routes:
  - name: a
    path: /a
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
`

func TestTLSAccepted(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, "a.example")
	c := mustLoad(t, "server:\n  tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n  redirect_listen: \":80\"\n"+oneRoute)
	if !c.Server.TLS.Enabled() || c.Server.TLS.MinVersion != TLS12 || TLSVersion(c.Server.TLS.MinVersion) != tls.VersionTLS12 {
		t.Fatalf("files: %+v", c.Server.TLS)
	}
	c = mustLoad(t, "server:\n  tls: {acme: {domains: [hooks.example.com], email: ops@example.com}, min_version: \"1.3\"}\n"+oneRoute)
	if !c.Server.TLS.ACME.Enabled() || TLSVersion(c.Server.TLS.MinVersion) != tls.VersionTLS13 {
		t.Fatalf("acme: %+v", c.Server.TLS)
	}
	if c := mustLoad(t, oneRoute); c.Server.TLS.Enabled() {
		t.Fatal("TLS on by default")
	}
}

// gateway check finds what serve would refuse: files missing or
// unreadable, a key that is not the certificate's, ACME without domains.
func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := selfSigned(t, dir, "a.example")
	_, keyB := selfSigned(t, dir, "b.example")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	tests := []struct{ name, server, path, want string }{
		{"cert without key", "tls: {cert_file: " + certA + "}", "server.tls.key_file", "required with cert_file"},
		{"key without cert", "tls: {key_file: " + keyA + "}", "server.tls.cert_file", "required with key_file"},
		{"unreadable cert", "tls: {cert_file: " + missing + ", key_file: " + keyA + "}", "server.tls.cert_file", "no such file"},
		{"key of another certificate", "tls: {cert_file: " + certA + ", key_file: " + keyB + "}", "server.tls", "private key does not match public key"},
		{"cert not PEM", "tls: {cert_file: " + garbage + ", key_file: " + keyA + "}", "server.tls", "failed to find any PEM data"},
		{"files and acme", "tls: {cert_file: " + certA + ", key_file: " + keyA + ", acme: {domains: [a.example]}}", "server.tls", "exclusive"},
		{"acme without domains", "tls: {acme: {email: ops@example.com}}", "server.tls.acme.domains", "at least one domain"},
		{"wildcard", "tls: {acme: {domains: [\"*.example.com\"]}}", "server.tls.acme.domains[0]", "DNS-01"},
		{"not a domain", "tls: {acme: {domains: [example.com, \"bad_name\"]}}", "server.tls.acme.domains[1]", "not a domain name"},
		{"duplicate domain", "tls: {acme: {domains: [a.example, A.example]}}", "server.tls.acme.domains[1]", "listed twice"},
		{"bad email", "tls: {acme: {domains: [a.example], email: nobody}}", "server.tls.acme.email", "not an email"},
		{"http CA", "tls: {acme: {domains: [a.example], ca: \"http://ca.example/dir\"}}", "server.tls.acme.ca", "not an https:// URL"},
		{"unknown min_version", "tls: {cert_file: " + certA + ", key_file: " + keyA + ", min_version: \"1.1\"}", "server.tls.min_version", `unknown value "1.1"`},
		{"redirect without tls", "redirect_listen: \":80\"", "server.redirect_listen", "needs server.tls"},
		{"redirect on listen", "listen: \":8443\"\n  redirect_listen: \":8443\"\n  tls: {acme: {domains: [a.example]}}", "server.redirect_listen", "both take port 8443"},
		{"redirect not host:port", "redirect_listen: \"80\"\n  tls: {acme: {domains: [a.example]}}", "server.redirect_listen", "not host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := mustFail(t, "server:\n  "+tc.server+"\n"+oneRoute)
			for _, e := range errs {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.want) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.want, errs)
		})
	}
}
