package forward

import (
	"net/url"
	"strings"
)

// JoinURL builds the upstream URL of a delivery (SPEC §4): base's path, one
// slash, and suffix (a prefix route's rest of the path, escaped as
// received; "" for an exact route); then base's query and rawQuery joined
// with "&", without rawQuery's parameters whose names base's query has. A
// fragment in base is dropped.
func JoinURL(base, suffix, rawQuery string) string {
	if i := strings.IndexByte(base, '#'); i >= 0 {
		base = base[:i]
	}
	path, query, _ := strings.Cut(base, "?")
	if suffix != "" {
		switch {
		case strings.HasSuffix(path, "/") && strings.HasPrefix(suffix, "/"):
			path += suffix[1:]
		case strings.HasSuffix(path, "/") || strings.HasPrefix(suffix, "/"):
			path += suffix
		default:
			path += "/" + suffix
		}
	}
	rawQuery = withoutNames(rawQuery, query)
	switch {
	case query != "" && rawQuery != "":
		query += "&" + rawQuery
	case rawQuery != "":
		query = rawQuery
	}
	if query == "" {
		return path
	}
	return path + "?" + query
}

// withoutNames is rawQuery without the parameters (the "&"-separated
// pairs) naming one that configured names. An application reading the
// last of a repeated parameter would otherwise read the sender's value
// where upstream.url sets one (a tenant, an API key). A pair that ";"
// splits further is dropped if any part names one: some parsers split on
// ";" too.
func withoutNames(rawQuery, configured string) string {
	if rawQuery == "" || configured == "" {
		return rawQuery
	}
	names, bases := make(map[string]bool), make(map[string]bool)
	for _, p := range strings.FieldsFunc(configured, func(r rune) bool { return r == '&' || r == ';' }) {
		name, base := paramName(p)
		names[name], bases[base] = true, true
	}
	kept := make([]string, 0, strings.Count(rawQuery, "&")+1)
	for pair := range strings.SplitSeq(rawQuery, "&") {
		named := false
		for p := range strings.SplitSeq(pair, ";") {
			// "a[]" or "a[x]" overrides "a", and "a" all of "a[x]";
			// "a[y]" leaves "a[x]" alone.
			name, base := paramName(p)
			named = named || names[name] || names[base] || bases[name]
		}
		if !named {
			kept = append(kept, pair)
		}
	}
	return strings.Join(kept, "&")
}

// paramName is a query parameter's name as applications read it,
// unescaped, with "." and " " read as "_" (PHP), and its base, the name up
// to a "[" (PHP's and Rails' arrays and maps: "a[]" and "a[x]" set "a").
// "a[]" is named "a".
func paramName(pair string) (name, base string) {
	name, _, _ = strings.Cut(pair, "=")
	if u, err := url.QueryUnescape(name); err == nil {
		name = u
	}
	name = strings.TrimSuffix(phpName.Replace(name), "[]")
	base, _, _ = strings.Cut(name, "[")
	return name, base
}

var phpName = strings.NewReplacer(".", "_", " ", "_")
