package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const acmeDomain = "gw.hookstamp.test"

// acmeConfig is a gateway on listen and redirect ("" = none) getting its
// certificate for acmeDomain from pebble, with the ledger (and so the
// ACME storage) store: "sqlite" in a temporary directory, or a
// PostgreSQL DSN.
func acmeConfig(tb testing.TB, p *pebbleCA, up *upstream, listen, redirect, store, screen string) *config.Config {
	tb.Helper()
	storeYAML := fmt.Sprintf("  driver: sqlite\n  dsn: %q\n", dbPath(tb))
	if store != "sqlite" {
		storeYAML = fmt.Sprintf("  driver: postgres\n  dsn: %q\n", store)
	}
	y := fmt.Sprintf(`
server:
  listen: %q
  redirect_listen: %q
  shutdown_timeout: 5s
  tls:
    acme:
      domains: [%s]
      email: ops@hookstamp.test
      ca: %q
admin:
  listen: "127.0.0.1:0"
store:
%s  sweep_interval: 1h
screen:
  driver: %s
routes:
  - name: hooks
    path: /hooks
    upstream: {url: %q, timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
`, listen, redirect, acmeDomain, p.DirectoryURL, storeYAML, screen, up.URL+"/up")
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// waitForCertificate polls until g serves a certificate for acmeDomain
// that the providers' roots (Pebble's) verify, and returns its serial.
func waitForCertificate(tb testing.TB, g *Gateway, p *pebbleCA) string {
	tb.Helper()
	var serial string
	testenv.Eventually(tb, 60*time.Second, "a certificate from Pebble", func() bool {
		leaf, err := tryServedCert(g.Addr(), acmeDomain, p.IssuedRoots)
		if err != nil {
			return false
		}
		serial = fmt.Sprintf("%x", leaf.SerialNumber)
		return true
	})
	return serial
}

// The gateway obtains its certificate from a real ACME server, answering
// the challenge itself: TLS-ALPN-01 on its delivery listener, or HTTP-01
// on its redirect listener. Then a delivery over HTTPS is forwarded and
// its repeat replayed, /readyz is ready and the expiry is a metric.
func TestACMECertificateFromPebble(t *testing.T) {
	for _, tc := range []struct {
		name      string
		redirect  bool
		challenge string
	}{
		{"tls-alpn-01", false, "tls-alpn-01"},
		{"http-01", true, "http-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listenPort, redirectPort := testenv.FreePort(t), testenv.FreePort(t)
			tlsPort := listenPort
			if tc.redirect {
				tlsPort = testenv.FreePort(t) // nothing there: only HTTP-01 can succeed
			}
			p := startPebble(t, redirectPort, tlsPort)
			up := newUpstream(t)
			redirect := ""
			if tc.redirect {
				redirect = fmt.Sprintf("127.0.0.1:%d", redirectPort)
			}
			_, log := newLogTap(t)
			cfg := acmeConfig(t, p, up, fmt.Sprintf("127.0.0.1:%d", listenPort), redirect, "sqlite", "memory")
			g := startGatewayWith(t, cfg, Options{Logger: log, ACMERoots: p.ServerRoots})

			serial := waitForCertificate(t, g, p)
			if issued := p.issued(); !slices.Equal(issued, []string{serial}) {
				t.Fatalf("Pebble issued %v; the gateway serves %s", issued, serial)
			}
			if by := p.validatedBy(); !slices.Equal(by, []string{tc.challenge}) {
				t.Fatalf("authorizations validated by %v, want [%s]", by, tc.challenge)
			}

			hc := httpsClient(p.IssuedRoots, acmeDomain)
			first := deliverWith(t, hc, g.URL()+"/hooks", `{"amount":5}`, "X-Event-Id", "evt-acme")
			wantOutcome(t, first, http.StatusOK, "forwarded")
			again := deliverWith(t, hc, g.URL()+"/hooks", `{"amount":5}`, "X-Event-Id", "evt-acme")
			wantOutcome(t, again, http.StatusOK, "replayed")
			sameReply(t, first, again)
			if up.total.Load() != 1 {
				t.Fatalf("upstream received %d deliveries, want 1", up.total.Load())
			}
			if status, body := get(t, "http://"+g.AdminAddr()+"/readyz"); status != http.StatusOK {
				t.Fatalf("/readyz %d %s with a certificate", status, body)
			}
			_, metrics := get(t, "http://"+g.AdminAddr()+"/metrics")
			if m := expiryLine.FindStringSubmatch(metrics); m == nil || m[1] != acmeDomain {
				t.Fatalf("no expiry metric for %s:\n%s", acmeDomain, grepLines(metrics, "tls"))
			}
		})
	}
}

// A domain configured with capitals is obtained, served and, once it is,
// ready: certmagic keeps it under its lower-case name.
func TestACMEDomainWithCapitalsBecomesReady(t *testing.T) {
	port := testenv.FreePort(t)
	p := startPebble(t, testenv.FreePort(t), port)
	_, log := newLogTap(t)
	cfg := acmeConfig(t, p, newUpstream(t), fmt.Sprintf("127.0.0.1:%d", port), "", "sqlite", "memory")
	cfg.Server.TLS.ACME.Domains = []string{strings.ToUpper(acmeDomain[:2]) + acmeDomain[2:]}
	g := startGatewayWith(t, cfg, Options{Logger: log, ACMERoots: p.ServerRoots})
	waitForCertificate(t, g, p)
	testenv.Eventually(t, 10*time.Second, "/readyz ready", func() bool {
		status, _ := get(t, "http://"+g.AdminAddr()+"/readyz")
		return status == http.StatusOK
	})
	if _, metrics := get(t, "http://"+g.AdminAddr()+"/metrics"); !strings.Contains(metrics, `domain="`+acmeDomain+`"`) {
		t.Errorf("no expiry metric for %s:\n%s", acmeDomain, grepLines(metrics, "tls"))
	}
}

// Before a certificate is obtained, /readyz says the listener has none.
func TestACMEReadyzWithoutCertificate(t *testing.T) {
	listenPort := testenv.FreePort(t)
	// Pebble validates on ports where nothing listens: no certificate.
	p := startPebble(t, testenv.FreePort(t), testenv.FreePort(t))
	cfg := acmeConfig(t, p, newUpstream(t), fmt.Sprintf("127.0.0.1:%d", listenPort), "", "sqlite", "memory")
	tap, log := newLogTap(t)
	g := startGatewayWith(t, cfg, Options{Logger: log, ACMERoots: p.ServerRoots})
	status, body := get(t, "http://"+g.AdminAddr()+"/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, acmeDomain+": no usable certificate") {
		t.Fatalf("/readyz %d %s; want 503 naming %s without a certificate", status, body, acmeDomain)
	}
	testenv.Eventually(t, 30*time.Second, "the failed order logged", func() bool {
		return tap.contains("tls certificate could not be obtained")
	})
}

// Two replicas on one PostgreSQL database share one ACME account and one
// certificate: Pebble issues it once, both serve it, and a delivery
// forwarded through one is replayed through the other.
func TestACMEReplicasShareOneCertificate(t *testing.T) {
	dsn := testenv.Postgres(t)
	listenA, redirectA := testenv.FreePort(t), testenv.FreePort(t)
	p := startPebble(t, redirectA, listenA)
	up := newUpstream(t)
	_, logA := newLogTap(t)
	_, logB := newLogTap(t)
	cfgA := acmeConfig(t, p, up, fmt.Sprintf("127.0.0.1:%d", listenA), fmt.Sprintf("127.0.0.1:%d", redirectA), dsn, "none")
	cfgB := acmeConfig(t, p, up, "127.0.0.1:0", "127.0.0.1:0", dsn, "none")
	a := startGatewayWith(t, cfgA, Options{Logger: logA, ACMERoots: p.ServerRoots})
	b := startGatewayWith(t, cfgB, Options{Logger: logB, ACMERoots: p.ServerRoots})

	serialA, serialB := waitForCertificate(t, a, p), waitForCertificate(t, b, p)
	if serialA != serialB {
		t.Fatalf("replicas serve different certificates: %s and %s", serialA, serialB)
	}
	if issued := p.issued(); len(issued) != 1 || issued[0] != serialA {
		t.Fatalf("Pebble issued %v, want one certificate (%s)", issued, serialA)
	}
	if n := p.accounts(); n != 1 {
		t.Fatalf("%d ACME accounts registered, want 1 shared", n)
	}

	hc := httpsClient(p.IssuedRoots, acmeDomain)
	first := deliverWith(t, hc, a.URL()+"/hooks", `{"amount":9}`, "X-Event-Id", "evt-shared")
	wantOutcome(t, first, http.StatusOK, "forwarded")
	again := deliverWith(t, hc, b.URL()+"/hooks", `{"amount":9}`, "X-Event-Id", "evt-shared")
	wantOutcome(t, again, http.StatusOK, "replayed")
	sameReply(t, first, again)
	if up.total.Load() != 1 {
		t.Fatalf("upstream received %d deliveries, want 1", up.total.Load())
	}
}

// A certificate nearing its end is renewed in the background and the new
// one served to new connections, without a restart; the renewal is
// logged, and a failure to obtain one is logged too.
func TestACMERenewalServedAndLogged(t *testing.T) {
	listenPort := testenv.FreePort(t)
	p := startPebbleValidity(t, testenv.FreePort(t), listenPort, 24*time.Second)
	tap, log := newLogTap(t)
	cfg := acmeConfig(t, p, newUpstream(t), fmt.Sprintf("127.0.0.1:%d", listenPort), "", "sqlite", "memory")
	g := startGatewayWith(t, cfg, Options{Logger: log, ACMERoots: p.ServerRoots, ACMERenewCheck: 500 * time.Millisecond})

	first := waitForCertificate(t, g, p)
	testenv.Eventually(t, 60*time.Second, "a renewed certificate on a new connection", func() bool {
		leaf, err := tryServedCert(g.Addr(), acmeDomain, p.IssuedRoots)
		return err == nil && fmt.Sprintf("%x", leaf.SerialNumber) != first
	})
	if !tap.contains("tls certificate obtained") || !tap.contains("tls certificate renewed") {
		t.Fatal("the first certificate and its renewal were not both logged")
	}
	if n := len(p.issued()); n < 2 {
		t.Fatalf("Pebble issued %d certificates, want the first and its renewal", n)
	}
}
