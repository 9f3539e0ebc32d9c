// Package ingress is hookstamp's HTTP front door: the server, route
// matching, body limit, signature, key and fingerprint, and the HTTP answer
// to the state machine's Result.
package ingress

import (
	"sort"
	"strconv"
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
	// Path is matched exactly, or as a prefix when Prefix is true (then it
	// ends in "/").
	Path   string
	Prefix bool
	// Methods are deduplicated; other methods pass through untouched.
	Methods []string
	// Policy drives the state machine for this route.
	Policy *idempotency.Policy
	// Handshake, on an async route, reports a provider's handshake, which
	// is forwarded synchronously under SyncPolicy: the provider reads the
	// upstream's own answer. nil: none.
	Handshake  func(Request) bool
	SyncPolicy *idempotency.Policy
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
	// SourceHeader names the header identifying the sender; "" means the
	// client IP.
	SourceHeader string
	// StoreRequests keeps each delivery's request with its record and
	// records its forwards as attempts (record.request).
	StoreRequests bool
}

func (r *Route) dedups(method string) bool {
	for _, m := range r.Methods {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// router finds the route for a request: exact paths first, then the
// longest matching prefix (SPEC §1). Of the routes whose path matches, the
// most specific that deduplicates the method serves it; a method none
// claims goes to the most specific path's first route, which passes it
// through.
type router struct {
	exact    map[string][]*Route
	prefixes [][]*Route // routes sharing one prefix, longest prefix first
}

func newRouter(routes []*Route) *router {
	rt := &router{exact: make(map[string][]*Route)}
	byPrefix := map[string]int{}
	for _, r := range routes {
		if !r.Prefix {
			rt.exact[r.Path] = append(rt.exact[r.Path], r)
			continue
		}
		if i, ok := byPrefix[r.Path]; ok {
			rt.prefixes[i] = append(rt.prefixes[i], r)
			continue
		}
		byPrefix[r.Path] = len(rt.prefixes)
		rt.prefixes = append(rt.prefixes, []*Route{r})
	}
	sort.SliceStable(rt.prefixes, func(i, j int) bool { return len(rt.prefixes[i][0].Path) > len(rt.prefixes[j][0].Path) })
	return rt
}

// match returns the route for method on path and, for a prefix route, the
// rest of the path after the prefix.
func (rt *router) match(method, path string) (*Route, string) {
	var fallback *Route // the most specific path's route, for a passthrough
	var fallbackRest string
	consider := func(rs []*Route, rest string) *Route {
		if r := byMethod(rs, method); r != nil {
			return r
		}
		if fallback == nil {
			fallback, fallbackRest = rs[0], rest
		}
		return nil
	}
	if rs, ok := rt.exact[path]; ok {
		if r := consider(rs, ""); r != nil {
			return r, ""
		}
	}
	for _, rs := range rt.prefixes {
		prefix := rs[0].Path
		rest, ok := strings.CutPrefix(path, prefix)
		if !ok {
			// "/hooks/*" also serves "/hooks" itself.
			if path != strings.TrimSuffix(prefix, "/") {
				continue
			}
			rest = ""
		}
		if r := consider(rs, rest); r != nil {
			return r, rest
		}
	}
	return fallback, fallbackRest
}

// byMethod picks, of routes on one path, the one that deduplicates method,
// or nil.
func byMethod(rs []*Route, method string) *Route {
	for _, r := range rs {
		if r.dedups(method) {
			return r
		}
	}
	return nil
}

// escapingRest reports why a prefix route's rest of the path is refused, or
// "" when it may be forwarded. The upstream may decode the rest again, drop
// ";" parameters (Tomcat, Spring) or read "\" as "/" (IIS), and then
// resolve dot segments the gateway never saw as such: "..;/admin" would
// reach outside upstream.url. So the rest, unescaped until nothing changes,
// may hold no segment that is "." or ".." once its ";" parameters are
// dropped, and no backslash or NUL; one still escaped after maxUnescapes
// rounds is refused (each round costs a pass over the rest).
func escapingRest(rest string) string {
	for round := 0; ; round++ {
		next := unescapeLenient(rest)
		if next == rest {
			break
		}
		if round == maxUnescapes {
			return "the path after the route's prefix is percent-encoded more than " + strconv.Itoa(maxUnescapes) + " times over"
		}
		rest = next
	}
	if strings.ContainsAny(rest, "\\\x00") {
		return "the path after the route's prefix holds a backslash or a NUL byte"
	}
	for seg := range strings.SplitSeq(rest, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return "the path after the route's prefix holds a dot segment (\".\" or \"..\", escaped or with \";\" parameters), which the upstream could resolve outside upstream.url"
		}
	}
	return ""
}

// maxUnescapes is how many times over escapingRest decodes a rest: more
// than any chain of proxies and frameworks decodes a path.
const maxUnescapes = 4

// unescapeLenient decodes the %XX escapes of s, leaving a "%" that starts
// none as it is.
func unescapeLenient(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
