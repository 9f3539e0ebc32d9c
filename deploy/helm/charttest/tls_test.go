package charttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// selfSigned is a certificate and key for name, PEM-encoded.
func selfSigned(t *testing.T, name string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// TLS from files, the README's example: a kubernetes.io/tls Secret
// mounted where the configuration reads it, for the replicas and for the
// migration Job (`gateway migrate` loads the configuration, files
// included), on a pod that may bind 443.
func TestTLSFromSecret(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(readmeBlock(t, "<!-- charttest: tls-secret-values -->"), &vals); err != nil {
		t.Fatalf("README TLS values: %v", err)
	}
	vals = mergeValues(vals, map[string]any{"migration": map[string]any{"enabled": true}})
	crt, key := selfSigned(t, "hooks.example.com")
	existing := map[string]map[string]string{"hooks-tls": {"tls.crt": crt, "tls.key": key}}
	r := mustRender(t, vals)
	eff := checkInvariants(t, r, existing)
	if !strings.HasSuffix(eff.Server.TLS.CertFile, "/etc/hookstamp-tls/tls.crt") { // rooted by podFiles
		t.Errorf("effective server.tls.cert_file %q", eff.Server.TLS.CertFile)
	}
	checkMigrationJob(t, r, existing, "postgres://hookstamp@")
	if got := readinessPath(t, r); got != "/readyz?optional=screen" {
		t.Errorf("readiness %s: with certificate files, an expired one takes the replica out", got)
	}
}

// ACME, the README's example: the CA's HTTP-01 challenge reaches
// server.redirect_listen through the pod and the Service, and a replica
// waiting for its first certificate is ready, or the Service would never
// send the CA to it.
func TestTLSWithACME(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(readmeBlock(t, "<!-- charttest: tls-acme-values -->"), &vals); err != nil {
		t.Fatalf("README ACME values: %v", err)
	}
	r := mustRender(t, vals)
	eff := checkInvariants(t, r, nil) // the redirect port, the readiness with tls optional
	if eff.Server.RedirectListen != ":80" || len(eff.Server.TLS.ACME.Domains) != 1 {
		t.Fatalf("effective server %+v", eff.Server)
	}
	if got := readinessPath(t, r); !strings.Contains(got, "tls") {
		t.Errorf("readiness %s waits for the first certificate", got)
	}
	for _, s := range r.Services {
		if s.Name == releaseName+"-hookstamp" && s.Spec.PublishNotReadyAddresses {
			t.Error("the delivery Service publishes replicas not ready: draining ones would get deliveries")
		}
	}
}

func readinessPath(t *testing.T, r *rendered) string {
	t.Helper()
	return gatewayContainer(t, r.deployment(t)).ReadinessProbe.HTTPGet.Path
}

func TestTLSRefusedValues(t *testing.T) {
	checkRefused(t, "", []refusal{
		{"certificate on no volume", `config: {server: {listen: ":8443", tls: {cert_file: /etc/hookstamp/tls.crt, key_file: /etc/hookstamp/tls.key}}}`,
			`config.server.tls.cert_file: "/etc/hookstamp/tls.crt" is on no volume the pod mounts`},
		{"key on no volume", `{tls: {secretName: t}, config: {server: {listen: ":8443", tls: {cert_file: /etc/hookstamp-tls/tls.crt, key_file: /keys/tls.key}}}}`,
			`config.server.tls.key_file: "/keys/tls.key" is on no volume the pod mounts`},
		{"one Service port for both listeners", `config: {server: {listen: ":443", redirect_listen: ":80", tls: {acme: {domains: [h.example.com]}}}}`,
			"service.port and service.redirectPort are both 80"},
		{"redirect on loopback", `{service: {port: 443}, config: {server: {listen: ":443", redirect_listen: "127.0.0.1:80", tls: {acme: {domains: [h.example.com]}}}}}`,
			`config.server.redirect_listen: "127.0.0.1:80" must listen on every interface`},
	})
}

// Certificate files from a volume of the operator's (a CSI driver, a
// projected volume): extraVolumes and extraVolumeMounts.
func TestTLSFromExtraVolume(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`
service: {port: 443}
extraVolumes: [{name: certs, secret: {secretName: vault-certs}}]
extraVolumeMounts: [{name: certs, mountPath: /certs, readOnly: true}]
config:
  server:
    listen: ":8443"
    tls: {cert_file: /certs/chain.pem, key_file: /certs/key.pem}
`, &vals); err != nil {
		t.Fatal(err)
	}
	crt, key := selfSigned(t, "hooks.example.com")
	checkInvariants(t, mustRender(t, vals), map[string]map[string]string{"vault-certs": {"chain.pem": crt, "key.pem": key}})
}
