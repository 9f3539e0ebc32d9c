package tlscert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func pair(tb testing.TB, serial int64, notAfter time.Time, names ...string) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(tb testing.TB, path string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// reload keeps the last good pair through a missing file (warned once,
// not at every read), a key of another certificate (an error, once per
// content), and takes a good new pair at the next read.
func TestFileSourceKeepsTheLastGoodPair(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	now := time.Now()
	c1, k1 := pair(t, 1, now.Add(time.Hour), "a.example")
	write(t, certFile, c1)
	write(t, keyFile, k1)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := newFileSource(certFile, keyFile, time.Hour, log)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 { return s.current().Leaf.SerialNumber.Int64() }

	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.reload()
	}
	if n := strings.Count(logs.String(), "unreadable"); n != 1 || serial() != 1 {
		t.Fatalf("missing file: %d warnings, serving %d; want 1 warning and serial 1 kept\n%s", n, serial(), logs.String())
	}

	c2, k2 := pair(t, 2, now.Add(2*time.Hour), "a.example")
	write(t, certFile, c2)
	write(t, keyFile, k2)
	s.reload()
	if serial() != 2 {
		t.Fatalf("serving %d after a new pair, want 2", serial())
	}

	// Rotated file by file (certbot's links): a look between the two
	// finds a key that is not the certificate's, and says nothing yet.
	c3, k3 := pair(t, 3, now.Add(3*time.Hour), "a.example")
	write(t, keyFile, k3)
	s.reload()
	write(t, certFile, c3)
	s.reload()
	if n := strings.Count(logs.String(), "do not load"); n != 0 || serial() != 3 {
		t.Fatalf("a pair rotated file by file: %d errors, serving %d; want none and serial 3\n%s", n, serial(), logs.String())
	}

	_, other := pair(t, 4, now.Add(time.Hour), "b.example")
	write(t, keyFile, other)
	s.reload()
	s.reload()
	s.reload()
	if n := strings.Count(logs.String(), "do not load"); n != 1 || serial() != 3 {
		t.Fatalf("mismatched key: %d errors, serving %d; want 1 error and serial 3 kept\n%s", n, serial(), logs.String())
	}
	if !strings.Contains(logs.String(), "private key does not match public key") {
		t.Fatalf("the error does not say why:\n%s", logs.String())
	}
}

func TestFilesReadyAndExpiry(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	notAfter := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c, k := pair(t, 1, notAfter, "a.example", "b.example")
	write(t, certFile, c)
	write(t, keyFile, k)
	clock := notAfter.Add(-time.Minute)
	m, err := New(Options{CertFile: certFile, KeyFile: keyFile, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(context.Background()); err != nil {
		t.Fatalf("Ready a minute before expiry: %v", err)
	}
	if e := m.Expiry(); len(e) != 2 || !e["a.example"].Equal(notAfter) || !e["b.example"].Equal(notAfter) {
		t.Fatalf("Expiry = %v", e)
	}
	clock = notAfter.Add(time.Second)
	if err := m.Ready(context.Background()); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("Ready after expiry = %v, want ErrNoCertificate", err)
	}

	write(t, keyFile, []byte("garbage"))
	if _, err := New(Options{CertFile: certFile, KeyFile: keyFile}); err == nil {
		t.Fatal("New accepted an unusable pair")
	}
}
