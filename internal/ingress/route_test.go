package ingress

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestRouterMatch(t *testing.T) {
	rt := newRouter([]*Route{
		{Name: "exact", Path: "/webhooks/stripe"},
		{Name: "hooks", Path: "/hooks/", Prefix: true},
		{Name: "shop", Path: "/hooks/shop/", Prefix: true},
	})
	cases := []struct {
		path, route, rest string
	}{
		{"/webhooks/stripe", "exact", ""},
		{"/webhooks/stripe/", "", ""},
		{"/webhooks/stripex", "", ""},
		{"/hooks/a/b", "hooks", "a/b"},
		{"/hooks", "hooks", ""},
		{"/hooks/", "hooks", ""},
		{"/hooks/shop/orders", "shop", "orders"},
		{"/hooks/shopping", "hooks", "shopping"},
		{"/other", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			r, rest := rt.match("POST", tc.path)
			got := ""
			if r != nil {
				got = r.Name
			}
			if got != tc.route || rest != tc.rest {
				t.Fatalf("match(%q) = %q, %q; want %q, %q", tc.path, got, rest, tc.route, tc.rest)
			}
		})
	}
}

// Routes on one path with different methods (SPEC §1: matched by path and
// method): each method goes to the route that deduplicates it; a method
// none claims goes to the first configured route, which passes it through.
func TestRouterMatchesMethod(t *testing.T) {
	rt := newRouter([]*Route{
		{Name: "post", Path: "/hooks", Methods: []string{"POST"}},
		{Name: "put", Path: "/hooks", Methods: []string{"PUT"}},
		{Name: "p-post", Path: "/p/", Prefix: true, Methods: []string{"POST"}},
		{Name: "p-patch", Path: "/p/", Prefix: true, Methods: []string{"PATCH"}},
	})
	cases := []struct{ method, path, route, rest string }{
		{"POST", "/hooks", "post", ""},
		{"PUT", "/hooks", "put", ""},
		{"GET", "/hooks", "post", ""},
		{"POST", "/p/x", "p-post", "x"},
		{"PATCH", "/p/x", "p-patch", "x"},
		{"PATCH", "/p", "p-patch", ""},
		{"DELETE", "/p/x", "p-post", "x"},
	}
	for _, tc := range cases {
		r, rest := rt.match(tc.method, tc.path)
		if r == nil || r.Name != tc.route || rest != tc.rest {
			t.Errorf("match(%s %s) = %v, %q; want %q, %q", tc.method, tc.path, r, rest, tc.route, tc.rest)
		}
	}
}

func TestRouteDedupsOnlyItsMethods(t *testing.T) {
	r := &Route{Methods: []string{"POST", "PUT"}}
	for m, want := range map[string]bool{"POST": true, "put": true, "GET": false, "DELETE": false} {
		if got := r.dedups(m); got != want {
			t.Errorf("dedups(%s) = %v, want %v", m, got, want)
		}
	}
}

func TestSafeDetailEchoesNothingRaw(t *testing.T) {
	in := "bad key \r\nSet-Cookie: x=1\x00\xff" + strings.Repeat("a", 500)
	out := safeDetail(in)
	if strings.ContainsAny(out, "\r\n\x00") || len(out) > 200 {
		t.Fatalf("safeDetail kept control bytes or length: %q (%d)", out, len(out))
	}
	for _, r := range out {
		if r < 0x20 || r >= 0x7f {
			t.Fatalf("non-printable %q in %q", r, out)
		}
	}
}

func TestEscapedRest(t *testing.T) {
	cases := []struct {
		name, decoded, raw, rest, want string
	}{
		{"escaped slash stays one segment", "/hooks/files/a/b", "/hooks/files/a%2Fb", "files/a/b", "files/a%2Fb"},
		{"escapes kept as sent", "/hooks/a b/%", "/hooks/a%20b/%25", "a b/%", "a%20b/%25"},
		{"escaped prefix", "/hooks/a/b", "/hook%73/a%2fb", "a/b", "a%2fb"},
		{"dot segments resolved, rest escaped anew", "/hooks/c d", "/hooks/x/../c%20d", "c d", "c%20d"},
		{"doubled slash normalized", "/hooks/a/b", "/hooks//a%2Fb", "a/b", "a/b"},
		{"unescaped non-ASCII", "/hooks/ü/x", "/hooks/ü/x", "ü/x", "%C3%BC/x"},
		{"escaped slash beside a raw |", "/hooks/files/a/b|c", "/hooks/files/a%2Fb|c", "files/a/b|c", "files/a%2Fb%7Cc"},
		{"escaped slash beside raw UTF-8", "/hooks/für/a/b", "/hooks/für/a%2Fb", "für/a/b", "f%C3%BCr/a%2Fb"},
		{"escaped slash beside a raw space", "/hooks/a b/c/d", "/hooks/a b/c%2Fd", "a b/c/d", "a%20b/c%2Fd"},
		{"no rest", "/hooks", "/hooks", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := escapedRest(tc.rest, []byte(tc.decoded), []byte(tc.raw)); got != tc.want {
				t.Fatalf("escapedRest(%q, %q, %q) = %q, want %q", tc.rest, tc.decoded, tc.raw, got, tc.want)
			}
		})
	}
}

// A prefix route's rest (decoded once, as matched) is refused when an
// upstream that decodes again, drops ";" parameters or reads "\" as "/"
// would find a dot segment in it; names that merely hold dots or ";" pass.
func TestEscapingRest(t *testing.T) {
	cases := []struct {
		name, rest string
		refused    bool
	}{
		{"dot-dot with a parameter", "..;/..;/admin/secret", true},
		{"dot-dot with an empty parameter deeper in", "a/..;/b", true},
		{"dot with a parameter", ".;x/admin", true},
		{"escaped semicolon", "..%3B/x", true},
		{"double-escaped dots", "%2e%2e/admin", true},
		{"triple-escaped dots", "%25252e%25252e/admin", true},
		{"a name escaped five times over", "%2525252541", true},
		{"a name escaped four times over", "%25252541", false},
		{"double-escaped slash around dots", "a%2F..%2Fadmin", true},
		{"backslash", "..\\admin", true},
		{"backslash in a name", "a\\b", true},
		{"escaped backslash", "a%5Cb", true},
		{"NUL", "a\x00b", true},
		{"parameter on a name", "a;b", false},
		{"dot inside a name", "a.b", false},
		{"three dots", "...", false},
		{"dots after the parameter", "a;..", false},
		{"dots begin a name", "..a/.b", false},
		{"escaped slash", "files/a%2Fb", false},
		{"malformed escape", "a%zz/%", false},
		{"empty", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := escapingRest(tc.rest); (got != "") != tc.refused {
				t.Fatalf("escapingRest(%q) = %q, want refused %v", tc.rest, got, tc.refused)
			}
		})
	}
}

// A query is passed on as sent, escapes kept, with the bytes a request
// line cannot carry raw escaped (fasthttp accepts "?a=1 2": written
// upstream as it is, the request line broke and the upstream's 400 was
// recorded as the event's answer).
func TestEscapeRawQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"":                "",
		"a=1&b=%20x+y&c=": "a=1&b=%20x+y&c=",
		"a=1 2":           "a=1%202",
		"q=/path?x=1":     "q=/path?x=1",
		"bad=%zz&ok=%2F":  "bad=%25zz&ok=%2F",
		"u=\xc3\xbc|\x7f": "u=%C3%BC%7C%7F",
		"end=%":           "end=%25",
	} {
		if got := escapeRaw([]byte(raw), true); got != want {
			t.Errorf("escapeRaw(%q, query) = %q, want %q", raw, got, want)
		}
	}
}

// FuzzEscapedRest: whatever the sender's escaping, the rest sent upstream
// decodes to exactly the rest the route matched, and is a well-formed URI
// path (pchar, "/" and "%XX" only): a raw space, "?", "#" or control would
// break or re-cut the upstream's request line.
func FuzzEscapedRest(f *testing.F) {
	f.Add("/hooks/a%2Fb", 7)
	f.Add("/hook%73/%20x", 7)
	f.Add("/hooks/%C3%BC", 3)
	f.Fuzz(func(t *testing.T, raw string, cut int) {
		decoded, err := url.PathUnescape(raw)
		if err != nil || cut < 0 || cut > len(decoded) {
			return
		}
		rest := decoded[cut:]
		got := escapedRest(rest, []byte(decoded), []byte(raw))
		back, err := url.PathUnescape(got)
		if err != nil || back != rest {
			t.Fatalf("escapedRest(%q, %q, %q) = %q, which decodes to %q (%v)", rest, decoded, raw, got, back, err)
		}
		for i := 0; i < len(got); i++ {
			if isEscape([]byte(got[i:])) {
				i += 2
			} else if !pathSafe(got[i]) {
				t.Fatalf("escapedRest(%q, %q, %q) = %q: byte %q at %d is not allowed raw in a path", rest, decoded, raw, got, got[i], i)
			}
		}
	})
}

// BenchmarkEscapingRestNested: a sender's rest nesting escapes as deep as
// the request line allows is refused in a few passes, not one per level.
func BenchmarkEscapingRestNested(b *testing.B) {
	rest := "/%" + strings.Repeat("25", 8<<10) + "2e"
	for b.Loop() {
		if escapingRest(rest) == "" {
			b.Fatal("not refused")
		}
	}
}

// FuzzEscapingRest: a rest escapingRest lets through stays under the
// upstream URL's path for an upstream that decodes it any number of
// times, drops ";" parameters and resolves dot segments (path.Clean).
func FuzzEscapingRest(f *testing.F) {
	for _, s := range []string{"..;/admin", "a/%2e%2e;x/b", "%25252e%25252e/x", "a.b/...", "a;b/c", "a%2Fb", "%zz/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		if escapingRest(rest) != "" {
			return
		}
		seen := rest
		for {
			segs := strings.Split(seen, "/")
			for i, seg := range segs {
				segs[i], _, _ = strings.Cut(seg, ";")
			}
			if p := path.Clean("/up/" + strings.Join(segs, "/")); p != "/up" && !strings.HasPrefix(p, "/up/") {
				t.Fatalf("escapingRest let %q through; read as %q it resolves to %q, outside /up/", rest, seen, p)
			}
			next, err := url.PathUnescape(seen)
			if err != nil || next == seen {
				return
			}
			seen = next
		}
	})
}

// An exact route inside a prefix route, each deduplicating other methods
// (SPEC §1: routes are matched by path and method): a method only the
// prefix route deduplicates goes to it, not to the exact route as a
// passthrough; a method neither claims passes through the exact route.
func TestRouterMatchesMethodAcrossPaths(t *testing.T) {
	rt := newRouter([]*Route{
		{Name: "exact", Path: "/hooks/a", Methods: []string{"POST"}},
		{Name: "hooks", Path: "/hooks/", Prefix: true, Methods: []string{"PUT"}},
		{Name: "deep", Path: "/hooks/a/", Prefix: true, Methods: []string{"PATCH"}},
	})
	cases := []struct{ method, path, route, rest string }{
		{"POST", "/hooks/a", "exact", ""},
		{"PUT", "/hooks/a", "hooks", "a"},
		{"PATCH", "/hooks/a", "deep", ""},
		{"GET", "/hooks/a", "exact", ""},
		{"PUT", "/hooks/a/x", "hooks", "a/x"},
		{"PATCH", "/hooks/a/x", "deep", "x"},
		{"GET", "/hooks/a/x", "deep", "x"},
		{"POST", "/hooks/b", "hooks", "b"},
	}
	for _, tc := range cases {
		r, rest := rt.match(tc.method, tc.path)
		if r == nil || r.Name != tc.route || rest != tc.rest {
			t.Errorf("match(%s %s) = %v, %q; want %q, %q", tc.method, tc.path, r, rest, tc.route, tc.rest)
		}
	}
}
