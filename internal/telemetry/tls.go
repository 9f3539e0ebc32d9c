package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metricTLSExpiry is scraped as hookstamp_tls_certificate_expiry_seconds.
const metricTLSExpiry = "hookstamp.tls.certificate.expiry"

// certExpiry is what hookstamp_tls_certificate_expiry_seconds reads at
// each collection: when each domain's certificate expires.
type certExpiry struct {
	expiry func() map[string]time.Time
	now    func() time.Time
}

func registerTLSExpiry(m metric.Meter, ms *metrics) error {
	_, err := m.Float64ObservableGauge(metricTLSExpiry, metric.WithUnit("s"),
		metric.WithDescription("Seconds until the delivery listener's certificate for the domain expires (negative once expired)."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			ms.mu.Lock()
			ce := ms.certs
			ms.mu.Unlock()
			if ce.expiry == nil {
				return nil
			}
			now := ce.now()
			for domain, at := range ce.expiry() {
				o.Observe(at.Sub(now).Seconds(), metric.WithAttributeSet(attribute.NewSet(attribute.String("domain", domain))))
			}
			return nil
		}))
	if err != nil {
		return fmt.Errorf("telemetry: instrument %s: %w", metricTLSExpiry, err)
	}
	return nil
}

// ObserveCertificates makes every collection of
// hookstamp_tls_certificate_expiry_seconds ask expiry when each domain's
// certificate expires, and report the seconds left from now (time.Now when
// nil).
func (t *Telemetry) ObserveCertificates(expiry func() map[string]time.Time, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.m.certs = certExpiry{expiry: expiry, now: now}
}
