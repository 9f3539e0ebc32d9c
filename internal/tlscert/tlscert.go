// Package tlscert gives the delivery listener its certificate: from PEM
// files that are reloaded when they change, or obtained and renewed from an
// ACME CA with certmagic, the HTTP-01 and TLS-ALPN-01 challenges answered
// by the gateway's own listeners. It also serves the plain-HTTP redirect
// listener and reports what the certificates' expiry and readiness are.
package tlscert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/caddyserver/certmagic"
)

// ErrNoCertificate is Ready's answer when a name has no certificate that
// is valid now: none obtained yet, or the one held has expired.
var ErrNoCertificate = errors.New("no usable certificate")

// Options configure a Manager: CertFile and KeyFile, or ACME.
type Options struct {
	// CertFile and KeyFile are PEM files, read again every ReloadInterval.
	CertFile, KeyFile string
	// ReloadInterval is how often the files are read for a change (1s
	// when 0).
	ReloadInterval time.Duration
	// ACME, when not nil, obtains the certificates instead.
	ACME *ACME
	// MinVersion is the oldest TLS version accepted (tls.VersionTLS12 when 0).
	MinVersion uint16
	// Logger receives reloads, renewals and failures (slog.Default when nil).
	Logger *slog.Logger
	// Now is the clock of Ready and Expiry (time.Now when nil).
	Now func() time.Time
}

// ACME configures automatic certificates.
type ACME struct {
	// Domains are the certificate's names.
	Domains []string
	// Email is the account's contact.
	Email string
	// CA is the directory URL ("" = Let's Encrypt).
	CA string
	// Storage keeps the account, certificates and challenge tokens;
	// replicas sharing one share them all.
	Storage certmagic.Storage
	// TrustedRoots verify the CA's own HTTPS certificate (nil = the
	// system's roots).
	TrustedRoots *x509.CertPool
	// RenewCheckInterval is how often certificates are checked for
	// renewal (certmagic's default, 10 minutes, when 0; tests: short-lived
	// certificates).
	RenewCheckInterval time.Duration
}

// Manager holds the delivery listener's certificate.
type Manager struct {
	o     Options
	log   *slog.Logger
	files *fileSource // one of files and acme is set
	acme  *acmeSource
}

// New loads the certificate files (an unusable pair is an error) or
// prepares ACME; Start begins reloading or obtaining.
func New(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MinVersion == 0 {
		o.MinVersion = tls.VersionTLS12
	}
	m := &Manager{o: o, log: o.Logger.With("component", "tls")}
	var err error
	if o.ACME != nil {
		m.acme, err = newACME(*o.ACME, m.log)
	} else {
		m.files, err = newFileSource(o.CertFile, o.KeyFile, o.ReloadInterval, m.log)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// TLSConfig is the delivery listener's configuration: HTTP/1.1 only (and
// acme-tls/1 for the TLS-ALPN-01 challenge), min_version, and the
// certificate held now at each handshake.
func (m *Manager) TLSConfig() *tls.Config {
	c := &tls.Config{MinVersion: m.o.MinVersion, NextProtos: []string{"http/1.1"}}
	if m.acme != nil {
		c.GetCertificate = m.acme.cfg.GetCertificate
		c.NextProtos = append(c.NextProtos, acmeTLS1)
	} else {
		c.GetCertificate = m.files.getCertificate
	}
	return c
}

// Listeners are the addresses the gateway's listeners are bound to.
type Listeners struct {
	// TLS is server.listen's: the TLS-ALPN-01 challenge is answered there.
	TLS string
	// Redirect is server.redirect_listen's, which answers the HTTP-01
	// challenge; "" turns HTTP-01 off.
	Redirect string
}

// Start reloads the files until ctx is done, or begins obtaining and
// renewing the ACME certificates in the background, the challenges
// answered by the listeners bound at ln.
func (m *Manager) Start(ctx context.Context, ln Listeners) error {
	if m.acme != nil {
		return m.acme.start(ctx, ln)
	}
	go m.files.watch(ctx)
	return nil
}

// Close stops the ACME maintenance.
func (m *Manager) Close() {
	if m.acme != nil {
		m.acme.close()
	}
}

// Expiry is when the certificate of each name expires.
func (m *Manager) Expiry() map[string]time.Time {
	out := map[string]time.Time{}
	if m.acme != nil {
		for _, d := range m.acme.domains {
			if leaf := m.acme.leaf(d); leaf != nil {
				out[d] = leaf.NotAfter
			}
		}
		return out
	}
	leaf := m.files.current().Leaf
	for _, n := range leafNames(leaf) {
		out[n] = leaf.NotAfter
	}
	return out
}

// Ready returns nil when every name has a certificate valid now, else an
// error wrapping ErrNoCertificate that names the first without one.
func (m *Manager) Ready(context.Context) error {
	now := m.o.Now()
	if m.acme != nil {
		for _, d := range m.acme.domains {
			if leaf := m.acme.leaf(d); leaf == nil || !validAt(leaf, now) {
				return fmt.Errorf("%s: %w", d, ErrNoCertificate)
			}
		}
		return nil
	}
	if leaf := m.files.current().Leaf; !validAt(leaf, now) {
		return fmt.Errorf("%s is valid from %s to %s: %w", m.o.CertFile, leaf.NotBefore.Format(time.RFC3339),
			leaf.NotAfter.Format(time.RFC3339), ErrNoCertificate)
	}
	return nil
}

// validAt reports whether leaf is valid at now.
func validAt(leaf *x509.Certificate, now time.Time) bool {
	return !now.Before(leaf.NotBefore) && !now.After(leaf.NotAfter)
}

// leafNames are the names a certificate is for: its DNS and IP SANs, or
// its common name when it has none.
func leafNames(leaf *x509.Certificate) []string {
	names := append([]string(nil), leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	return names
}
