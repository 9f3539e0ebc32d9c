package tlscert

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
)

const acmeTLS1 = acmez.ACMETLS1Protocol

// acmeSource obtains and renews the certificates of domains with
// certmagic, in a cache of its own (certmagic's package defaults are left
// alone: tests run several gateways in one process).
type acmeSource struct {
	domains []string
	log     *slog.Logger
	cache   *certmagic.Cache
	cfg     *certmagic.Config
	issuer  *certmagic.ACMEIssuer
}

func newACME(a ACME, log *slog.Logger) (*acmeSource, error) {
	if len(a.Domains) == 0 {
		return nil, fmt.Errorf("server.tls.acme.domains: at least one domain is required")
	}
	if a.Storage == nil {
		return nil, fmt.Errorf("tls: ACME without a storage")
	}
	// Certmagic keeps certificates under lower-case names: looked up as
	// configured, a capital letter would find none (never ready).
	domains := make([]string, len(a.Domains))
	for i, d := range a.Domains {
		domains[i] = strings.ToLower(d)
	}
	s := &acmeSource{domains: domains, log: log}
	zl := zapLogger(log.With("component", "certmagic"))
	s.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return s.cfg, nil },
		RenewCheckInterval: a.RenewCheckInterval,
		Logger:             zl,
	})
	s.cfg = certmagic.New(s.cache, certmagic.Config{
		Storage:           a.Storage,
		Logger:            zl,
		DefaultServerName: domains[0], // a client that sends no SNI (dialled by IP address)
		OCSP:              certmagic.OCSPConfig{DisableStapling: true},
		OnEvent:           s.onEvent,
		ShouldEmitFunc:    func(ev string) bool { return ev == "cert_obtained" || ev == "cert_failed" },
	})
	s.issuer = certmagic.NewACMEIssuer(s.cfg, certmagic.ACMEIssuer{
		CA:           a.CA,
		Email:        a.Email,
		Agreed:       true,
		TrustedRoots: a.TrustedRoots,
		Logger:       zl,
	})
	s.cfg.Issuers = []certmagic.Issuer{s.issuer}
	return s, nil
}

// start points the challenges at the bound listeners, then manages the
// certificates. Certmagic tries to bind a challenge's port itself and,
// finding it taken, relies on whoever holds it: our listeners, so the
// ports must be theirs (with ":0" in the configuration, the kernel's).
func (s *acmeSource) start(ctx context.Context, ln Listeners) error {
	host, tlsPort, err := hostPort(ln.TLS)
	if err != nil {
		return fmt.Errorf("tls: listener %q: %w", ln.TLS, err)
	}
	s.issuer.ListenHost, s.issuer.AltTLSALPNPort = host, tlsPort
	s.issuer.DisableHTTPChallenge = ln.Redirect == ""
	if ln.Redirect != "" {
		if _, s.issuer.AltHTTPPort, err = hostPort(ln.Redirect); err != nil {
			return fmt.Errorf("tls: redirect listener %q: %w", ln.Redirect, err)
		}
	}
	if err := s.cfg.ManageAsync(ctx, s.domains); err != nil {
		return fmt.Errorf("tls: manage certificates of %v: %w", s.domains, err)
	}
	return nil
}

func (s *acmeSource) close() { s.cache.Stop() }

func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	return h, n, err
}

// leaf is the certificate served for domain now, nil when there is none.
func (s *acmeSource) leaf(domain string) *x509.Certificate {
	var best *x509.Certificate
	for _, c := range s.cache.AllMatchingCertificates(domain) {
		if c.Leaf != nil && (best == nil || c.Leaf.NotAfter.After(best.NotAfter)) {
			best = c.Leaf
		}
	}
	return best
}

// onEvent logs obtained, renewed and failed certificates (certmagic's own
// logs are at debug level, see zapLogger).
func (s *acmeSource) onEvent(ctx context.Context, event string, data map[string]any) error {
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtained":
		msg := "tls certificate obtained"
		if renewal {
			msg = "tls certificate renewed"
		}
		s.log.InfoContext(ctx, msg, "domain", data["identifier"], "issuer", data["issuer"])
	case "cert_failed":
		msg := "tls certificate could not be obtained; retrying"
		if renewal {
			msg = "tls certificate could not be renewed; retrying, the current one is served meanwhile"
		}
		s.log.ErrorContext(ctx, msg, "domain", data["identifier"], "err", fmt.Sprint(data["error"]))
	}
	return nil
}
