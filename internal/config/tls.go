package config

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"net/url"
	"strings"
)

// TLS versions accepted by server.tls.min_version.
const (
	TLS12 = "1.2"
	TLS13 = "1.3"
)

// TLSVersion maps server.tls.min_version to its crypto/tls constant (0 for
// an unknown one, which Validate refuses).
func TLSVersion(v string) uint16 {
	switch v {
	case TLS12:
		return tls.VersionTLS12
	case TLS13:
		return tls.VersionTLS13
	}
	return 0
}

// validateTLS checks server.tls and server.redirect_listen. The files are
// read here, so that `gateway check` finds an unreadable file or a key that
// does not match its certificate before serve does.
func (c *Config) validateTLS(errs *Errors) {
	s := c.Server
	t := s.TLS
	oneOf(errs, "server.tls.min_version", t.MinVersion, TLS12, TLS13)
	files := t.CertFile != "" || t.KeyFile != ""
	switch {
	case files && t.ACME.Enabled():
		errs.add("server.tls", "cert_file/key_file and acme are exclusive: set one")
	case files:
		validateTLSFiles(errs, t)
	case t.ACME.Enabled():
		validateACME(errs, t.ACME)
	}
	if s.RedirectListen == "" {
		return
	}
	switch err := checkHostPort(s.RedirectListen); {
	case err != nil:
		errs.add("server.redirect_listen", "%v", err)
	case !t.Enabled():
		errs.add("server.redirect_listen", "needs server.tls: it redirects to https")
	}
}

func validateTLSFiles(errs *Errors, t TLS) {
	if t.CertFile == "" {
		errs.add("server.tls.cert_file", "required with key_file")
	}
	if t.KeyFile == "" {
		errs.add("server.tls.key_file", "required with cert_file")
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		var pe *fs.PathError
		switch {
		case errors.As(err, &pe) && pe.Path == t.KeyFile:
			errs.add("server.tls.key_file", "%v", err)
		case errors.As(err, &pe):
			errs.add("server.tls.cert_file", "%v", err)
		default:
			// Bad PEM in either file, or a key that is not the
			// certificate's: crypto/tls says which.
			errs.add("server.tls", "cert_file %q and key_file %q: %v", t.CertFile, t.KeyFile, err)
		}
	}
}

func validateACME(errs *Errors, a ACME) {
	if len(a.Domains) == 0 {
		errs.add("server.tls.acme.domains", "at least one domain is required")
	}
	seen := map[string]bool{}
	for i, d := range a.Domains {
		p := index("server.tls.acme.domains", i)
		switch {
		case strings.HasPrefix(d, "*."):
			errs.add(p, "%q: wildcard names need the DNS-01 challenge, which hookstamp does not answer", d)
		case !isDomainName(d):
			errs.add(p, "%q is not a domain name", d)
		case seen[strings.ToLower(d)]:
			errs.add(p, "%q is listed twice", d)
		}
		seen[strings.ToLower(d)] = true
	}
	if a.Email != "" && (!strings.Contains(a.Email, "@") || strings.ContainsAny(a.Email, " \t<>")) {
		errs.add("server.tls.acme.email", "%q is not an email address", a.Email)
	}
	if a.CA != "" {
		u, err := url.Parse(a.CA)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			errs.add("server.tls.acme.ca", "%q is not an https:// URL (an ACME directory, e.g. https://acme-v02.api.letsencrypt.org/directory)", a.CA)
		}
	}
}

// isDomainName accepts a DNS name of letters, digits and hyphens in dot
// separated labels, none starting or ending with a hyphen, as ACME CAs do
// for certificates.
func isDomainName(s string) bool {
	return !strings.HasSuffix(s, ".") && dnsLabels(s, func(label string) bool {
		return label[0] != '-' && label[len(label)-1] != '-' && !strings.Contains(label, "_")
	})
}

// dnsLabels reports whether s, at most 253 bytes, is dot-separated labels
// of 1 to 63 letters, digits, hyphens and underscores, each accepted by ok.
func dnsLabels(s string, ok func(label string) bool) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || !ok(label) {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
