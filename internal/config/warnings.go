package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Warnings are what the configuration allows but an operator should hear
// of before it costs events: `gateway check` prints them and serve logs
// them at start. now dates the certificate checks.
func (c *Config) Warnings(now time.Time) []string {
	w := slices.Clone(c.envWarnings)
	for i, r := range c.Routes {
		w = append(w, routeWarnings(index("routes", i), r)...)
	}
	if msg := certWarning(c.Server.TLS, now); msg != "" {
		w = append(w, msg)
	}
	if n := len(c.Admin.Token); n > 0 && n < MinAdminToken {
		w = append(w, fmt.Sprintf("admin.token: %d bytes is short: wrong tokens are slowed down per address, not across many, and the token redelivers and deletes events; use 32 random bytes (openssl rand -hex 32)", n))
	}
	return w
}

// MinAdminToken is the admin.token length, in bytes, below which Warnings
// warns. A refusal would stop gateways whose shorter tokens served until
// now.
const MinAdminToken = 16

func routeWarnings(p string, r Route) []string {
	var w []string
	if pr, ok := LookupPreset(r.Preset); ok && r.Retention < pr.Retention {
		w = append(w, fmt.Sprintf("%s.retention: %s is shorter than preset %s's %s, which outlasts the provider's retries (%s): a retry after the record is swept is forwarded again",
			p, r.Retention, r.Preset, pr.Retention, pr.RetryWindow))
	}
	var notFinal []string
	for _, s := range []int{200, 201, 202, 204} {
		if !r.Record.IsFinal(s) {
			notFinal = append(notFinal, fmt.Sprint(s))
		}
	}
	if len(notFinal) > 0 {
		again := "a provider's retry of an event so answered is forwarded again"
		if r.Delivery == DeliveryAsync {
			again = "an event so answered is delivered again, up to async.max_attempts times"
		}
		w = append(w, fmt.Sprintf("%s.record.statuses: the upstream's %s would not be final: %s; list \"2xx\" unless that is meant",
			p, strings.Join(notFinal, ", "), again))
	}
	if a := r.Async; r.StoresRequests() && a.MaxAttempts > 1 && a.MaxAge <= r.Upstream.Timeout {
		w = append(w, fmt.Sprintf("%s.async.max_age: %s is not longer than upstream.timeout (%s): an attempt that fails only at its timeout leaves the delivery dead after one of its %d attempts",
			p, a.MaxAge, r.Upstream.Timeout, a.MaxAttempts))
	}
	if kind, other := bodyKinds(r); kind != "" {
		w = append(w, fmt.Sprintf("%s.fingerprint.fields: every field is read from a %s body, but the route's key from a %s body: no delivery carries the fields, so a reused key with another event is replayed, not refused",
			p, other, kind))
	}
	return w
}

// bodyKinds returns the body format the route's key is read from, and the
// other one, when every fingerprint field reads that other format; "" when
// they agree or either reads more than the body.
func bodyKinds(r Route) (key, fields string) {
	if r.Fingerprint.Mode != FingerprintFields || len(r.Fingerprint.Fields) == 0 || len(r.Key.Sources) == 0 {
		return "", ""
	}
	key = r.Key.Sources[0].Kind
	for _, s := range r.Key.Sources {
		if s.Kind != key || (key != SourceJSON && key != SourceForm) {
			return "", ""
		}
	}
	fields = SourceForm
	if key == SourceForm {
		fields = SourceJSON
	}
	for _, f := range r.Fingerprint.Fields {
		if !strings.HasPrefix(f, fields+":") {
			return "", ""
		}
	}
	return key, fields
}

// certWarning tells of a configured certificate that has expired or soon
// will: clients refuse it, and providers' deliveries fail until it is
// replaced (serve reloads it when the file changes).
func certWarning(t TLS, now time.Time) string {
	if t.CertFile == "" || t.KeyFile == "" {
		return ""
	}
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil || len(pair.Certificate) == 0 {
		return "" // an error of validation
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return ""
	}
	switch left := cert.NotAfter.Sub(now); {
	case left <= 0:
		return fmt.Sprintf("server.tls.cert_file: the certificate expired at %s: clients refuse it", cert.NotAfter.UTC().Format(time.RFC3339))
	case left < 14*24*time.Hour:
		return fmt.Sprintf("server.tls.cert_file: the certificate expires at %s, in %s", cert.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Hour))
	}
	return ""
}
