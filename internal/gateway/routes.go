package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/ingress"
)

// buildRoutes turns validated route configuration into ready-to-serve
// routes: compiled extractors, fingerprinters, verifiers and policies.
func buildRoutes(cfg *config.Config) ([]*ingress.Route, error) {
	routes := make([]*ingress.Route, 0, len(cfg.Routes))
	for i := range cfg.Routes {
		rc := &cfg.Routes[i]
		r, err := buildRoute(rc)
		if err != nil {
			return nil, fmt.Errorf("routes[%d] (%s): %w", i, rc.Name, err)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func buildRoute(rc *config.Route) (*ingress.Route, error) {
	parts, err := rc.Build()
	if err != nil {
		return nil, err
	}
	final := parts.Final
	keep := make([]string, 0, len(rc.Record.Headers))
	for _, h := range rc.Record.Headers {
		keep = append(keep, http.CanonicalHeaderKey(h))
	}
	r := &ingress.Route{
		Name:    rc.Name,
		Path:    rc.MatchPath(), // requests are matched on their decoded path
		Methods: rc.Methods,
		Policy: &idempotency.Policy{
			Route:            rc.Name,
			Shadow:           rc.Mode == config.ModeShadow,
			RejectInflight:   rc.Inflight == config.InflightReject,
			WaitTimeout:      rc.WaitTimeout,
			ReplayOnMismatch: rc.Fingerprint.OnMismatch == config.OnMismatchReplay,
			Final:            func(s int) bool { return !idempotency.NeverFinal(s) && final(s) },
			KeepHeaders:      keep,
			MaxBody:          int(rc.Record.MaxBody),
			HoldAmbiguous:    rc.Record.Ambiguous == config.AmbiguousHold,
			Retention:        rc.Retention,
			UpstreamTimeout:  rc.Upstream.Timeout,
		},
		Extractor:       parts.Extractor,
		Fingerprinter:   parts.Fingerprinter,
		Verifier:        parts.Verifier,
		KeyRequired:     rc.Key.Required,
		MaxKeyLength:    rc.Key.MaxLength,
		UpstreamURL:     escapedURL(rc.Upstream.URL),
		UpstreamTimeout: rc.Upstream.Timeout,
		KeyHeader:       rc.Upstream.KeyHeader,
		SourceHeader:    rc.SourceHeader(),
		StoreRequests:   rc.StoresRequests(),
	}
	preset, _ := config.LookupPreset(rc.Preset)
	if preset.Resend != "" {
		r.Policy.Resend = []byte(preset.Resend)
	}
	if rc.Delivery == config.DeliveryAsync {
		async(r, rc, preset.Handshake)
	}
	if rc.IsPrefix() {
		r.Prefix = true
	}
	return r, nil
}

// escapedURL is upstream.url with its path escaped ("/my hooks/" →
// "/my%20hooks/"), as validation parsed it. A prefix route appends the
// rest of the request path, escaped as the sender escaped it ("a%2Fb", one
// segment), to the raw base: a base path holding a byte a path cannot
// carry raw (a space, UTF-8, "|") would make the forwarder's URL parser
// discard the joined path's escapes and re-escape it from its decoded
// form, turning "a%2Fb" into the two segments "a/b".
func escapedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s // validated: cannot happen
	}
	return u.String()
}

// async makes r a store-and-forward route (SPEC §10), its provider's
// handshakes, if any, forwarded synchronously.
func async(r *ingress.Route, rc *config.Route, handshake *config.HeaderMatch) {
	sync := *r.Policy
	ack := &idempotency.Response{Status: rc.Async.Ack.Status, Body: []byte(rc.Async.Ack.Body)}
	if rc.Async.Ack.Body != "" {
		ack.Headers = map[string]string{"Content-Type": rc.Async.Ack.ContentType}
	}
	r.Policy.Ack = ack
	if handshake == nil {
		return
	}
	r.SyncPolicy = &sync
	name, value := handshake.Name, []byte(handshake.Value)
	r.Handshake = func(req ingress.Request) bool { return bytes.EqualFold(req.Header(name), value) }
}
