package forward

import "strings"

// JoinURL builds the upstream URL of a delivery (SPEC §4). base is the
// route's upstream.url. suffix is "" for an exact route; for a prefix route
// ("/hooks/*") it is the rest of the request path after the prefix, still
// escaped as received (so "%2F" stays "%2F"), and is appended to base's path
// with exactly one slash between them; its own trailing slash is kept.
// rawQuery is the request's escaped query without "?"; it is appended to
// base's own query, if any, with "&". A fragment in base is dropped.
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
