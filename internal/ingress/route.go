// Package ingress is hookstamp's HTTP front door: the Fiber server, route
// matching, the body limit, signature verification, key and fingerprint
// extraction, and turning the state machine's Result into the HTTP answer
// (RFC 9457 problem documents for the answers hookstamp makes itself).
package ingress

import (
	"sort"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/verify"
)

// Verifier checks a delivery's signature before anything is claimed.
type Verifier interface {
	Verify(r verify.Request) error
}

// Route is one configured webhook endpoint, ready to serve. main builds it
// from the configuration.
type Route struct {
	// Name namespaces keys (the record identity is route name + key).
	Name string
	// Path is matched exactly, or as a prefix when Prefix is true (the
	// configured path ended in "/*"; Path then holds the part before "*",
	// ending in "/").
	Path   string
	Prefix bool
	// Methods are deduplicated; other methods pass through untouched.
	Methods []string
	// Policy drives the state machine for this route.
	Policy *idempotency.Policy
	// Verifier is nil when the route verifies no signature.
	Verifier Verifier
	// Extractor finds the key; Fingerprinter digests what the delivery means.
	Extractor     *extract.Extractor
	Fingerprinter *extract.Fingerprinter
	// KeyRequired: no key → 400 missing_key; otherwise passthrough.
	KeyRequired  bool
	MaxKeyLength int
	// UpstreamURL, UpstreamTimeout and KeyHeader describe the forward.
	UpstreamURL     string
	UpstreamTimeout time.Duration
	KeyHeader       string
	// SourceHeader names the header identifying the sender
	// (routes[].source: header:NAME); empty means the client IP.
	SourceHeader string
}

func (r *Route) dedups(method string) bool {
	for _, m := range r.Methods {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// router finds the route for a path: exact paths first, then the longest
// matching prefix.
type router struct {
	exact    map[string]*Route
	prefixes []*Route // longest first
}

func newRouter(routes []*Route) *router {
	rt := &router{exact: make(map[string]*Route)}
	for _, r := range routes {
		if r.Prefix {
			rt.prefixes = append(rt.prefixes, r)
		} else {
			rt.exact[r.Path] = r
		}
	}
	sort.SliceStable(rt.prefixes, func(i, j int) bool { return len(rt.prefixes[i].Path) > len(rt.prefixes[j].Path) })
	return rt
}

// match returns the route and, for a prefix route, the rest of the path
// after the prefix.
func (rt *router) match(path string) (*Route, string) {
	if r, ok := rt.exact[path]; ok {
		return r, ""
	}
	for _, r := range rt.prefixes {
		if strings.HasPrefix(path, r.Path) {
			return r, path[len(r.Path):]
		}
		// "/hooks/*" also serves "/hooks" itself.
		if path == strings.TrimSuffix(r.Path, "/") {
			return r, ""
		}
	}
	return nil, ""
}
