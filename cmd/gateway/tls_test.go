package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// keyPair writes a self-signed certificate for name and its key.
func keyPair(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
	return certFile, keyFile
}

// gateway check validates the TLS section: a good pair passes and is
// printed; a key of another certificate, a missing file and ACME without
// domains are each listed with their key path, and the exit code is 1.
func TestCheckValidatesTLS(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := keyPair(t, dir, "a.example")
	_, keyB := keyPair(t, dir, "b.example")
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "server:\n  tls: {cert_file: "+certA+", key_file: "+keyA+"}\n  redirect_listen: \":8081\"\n"+demoRoutes)
	code, out, errOut := runCLI(t, nil, "check", "-config", good)
	if code != 0 || !strings.Contains(out, "cert_file: "+certA) || !strings.Contains(out, "min_version: \"1.2\"") {
		t.Fatalf("good TLS: exit %d\n%s\n%s", code, out, errOut)
	}

	for _, tc := range []struct{ name, server, want string }{
		{"mismatched key", "tls: {cert_file: " + certA + ", key_file: " + keyB + "}", "server.tls: cert_file"},
		{"missing file", "tls: {cert_file: " + filepath.Join(dir, "nope.crt") + ", key_file: " + keyA + "}", "server.tls.cert_file"},
		{"acme without domains", "tls: {acme: {email: ops@example.com}}", "server.tls.acme.domains"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			writeFile(t, bad, "server:\n  "+tc.server+"\n"+demoRoutes)
			code, _, errOut := runCLI(t, nil, "check", "-config", bad)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 1 with %q in:\n%s", code, tc.want, errOut)
			}
		})
	}
}

// gateway migrate creates the ACME storage tables when certificates are
// kept in the PostgreSQL ledger.
func TestMigrateCreatesTLSStorage(t *testing.T) {
	dsn := testenv.Postgres(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, cfg, "server:\n  tls: {acme: {domains: [hooks.example.com]}}\nstore: {driver: postgres, dsn: \""+dsn+"\", auto_migrate: false}\n"+demoRoutes)
	if code, _, errOut := runCLI(t, nil, "migrate", "-config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errOut)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, table := range []string{"hookstamp_tls_storage", "hookstamp_tls_locks"} {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatalf("%s after migrate: %v", table, err)
		}
	}
}
