package forward

import "strings"

// JoinURL builds the upstream URL of a delivery (SPEC §4): base's path, one
// slash, and suffix (a prefix route's rest of the path, escaped as
// received; "" for an exact route); then base's query and rawQuery joined
// with "&". A fragment in base is dropped.
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
