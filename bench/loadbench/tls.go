package loadbench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// benchCert is the TLS gateway's certificate: a self-signed ECDSA P-256
// certificate for 127.0.0.1 (what an ACME CA issues by default), written
// into dir, and the pool that trusts it.
type benchCert struct {
	certFile, keyFile string
	pool              *x509.CertPool
}

func writeBenchCert(dir string) (*benchCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hookstamp bench"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &benchCert{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), pool: x509.NewCertPool()}
	if err := os.WriteFile(c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	c.pool.AddCert(cert)
	return c, nil
}

// serverYAML is the server.tls section of the gateway's configuration.
func (c *benchCert) serverYAML() string {
	return "  tls:\n    cert_file: \"" + c.certFile + "\"\n    key_file: \"" + c.keyFile + "\"\n"
}

// NewHTTPSTarget is NewHTTPTarget over TLS, trusting roots. With
// closeEach every request is sent on a new connection, so that each pays
// a full handshake, as from a provider that does not keep connections.
func NewHTTPSTarget(addr string, mix *Mix, roots *x509.CertPool, closeEach bool) *HTTPTarget {
	t := NewHTTPTarget(addr, mix)
	t.client.IsTLS = true
	t.client.TLSConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	t.url = "https://" + addr + "/hook"
	t.closeEach = closeEach
	return t
}
