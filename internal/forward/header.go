package forward

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// hopByHop are never forwarded, in either direction (RFC 9110 §7.6.1), nor
// are the headers Connection names.
var hopByHop = []string{
	"Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Proxy-Connection", // non-standard, sent by old clients
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// forwarding are the headers describing earlier hops: the gateway sets
// X-Forwarded-* itself, and a client must not spoof or contradict them.
var forwarding = []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"}

// proxySet are the headers a proxy in front writes about the request as
// it received it (its port, path prefix, TLS, the client's address, the
// URL before a rewrite), besides the X-Forwarded-* prefix as a whole.
// Frameworks behind a proxy believe them (Rack's X-Forwarded-Ssl, Spring's
// and Werkzeug's X-Forwarded-Prefix and -Port): from a peer that is not a
// trusted proxy they are a sender's claim, and are dropped, as nginx and
// Traefik drop them.
var proxySet = []string{
	"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip",
	"Fastly-Client-Ip", "X-Original-Url", "X-Original-Uri", "X-Rewrite-Url", "X-Original-Host",
	"Front-End-Https", "X-Url-Scheme",
}

// removeProxySet deletes the headers of proxySet and every X-Forwarded-*
// field (with "_" for "-" too: CGI-style upstreams read both spellings as
// one), in place. h's names are canonical.
func removeProxySet(h http.Header) {
	for name := range h {
		dashed := textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(name, "_", "-"))
		if strings.HasPrefix(dashed, "X-Forwarded-") || slices.Contains(proxySet, dashed) {
			delete(h, name)
		}
	}
}

// removeHopByHop deletes the hop-by-hop headers of h, in place.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
}

// removeInvalidNames deletes the fields of an answer whose names are not
// HTTP tokens ("Transfer-Encoding ", "X Bad"), in place. net/http reads
// them, uncanonicalised, so the hop-by-hop removal misses them, and
// passed on to the provider, one such name is a framing header to a
// lenient reader.
func removeInvalidNames(h http.Header) {
	for name := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			delete(h, name)
		}
	}
}

// removeUnderscoreTwins deletes the key or forwarding headers spelled with
// "_" for "-" (X_Forwarded_For): CGI-style upstreams read both spellings as
// one variable.
func removeUnderscoreTwins(h http.Header, keyHeader string) {
	for name := range h {
		if strings.IndexByte(name, '_') < 0 {
			continue
		}
		dashed := strings.ReplaceAll(name, "_", "-")
		if keyHeader != "" && strings.EqualFold(dashed, keyHeader) {
			delete(h, name)
			continue
		}
		for _, f := range forwarding {
			if strings.EqualFold(dashed, f) {
				delete(h, name)
			}
		}
	}
}

// outgoingHeader builds the upstream request's header from r, leaving
// r.Header untouched: canonical names, hop-by-hop and forwarding headers
// and Expect removed, X-Forwarded-* and the key header set.
func outgoingHeader(r *Request) http.Header {
	h := make(http.Header, len(r.Header)+4)
	for name, values := range r.Header {
		name = textproto.CanonicalMIMEHeaderKey(name)
		if prev, ok := h[name]; ok { // the same name spelled twice by the caller
			h[name] = append(prev[:len(prev):len(prev)], values...)
			continue
		}
		h[name] = values // shared with the caller, never modified in place
	}
	removeHopByHop(h)
	// Expect was met by the gateway; an upstream answering it with 417
	// would have that recorded and replayed.
	delete(h, "Expect")
	for _, name := range forwarding {
		delete(h, name)
	}
	removeUnderscoreTwins(h, r.KeyHeader)
	if !r.TrustedPeer {
		removeProxySet(h)
	}
	setIf(h, "X-Forwarded-For", r.ClientIP)
	setIf(h, "X-Forwarded-Proto", r.Proto)
	setIf(h, "X-Forwarded-Host", r.Host)
	if r.KeyHeader != "" {
		// The gateway's word on the delivery's identity: a sender's own
		// value never passes, even on a passthrough.
		h.Del(r.KeyHeader)
		if r.Key != "" {
			h.Set(r.KeyHeader, r.Key)
		}
	}
	return h
}

func setIf(h http.Header, name, value string) {
	if value != "" {
		h[name] = []string{value}
	}
}
