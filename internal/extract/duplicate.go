package extract

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// ErrDuplicateMember is returned by Extractor.Key when a JSON key source
// reads a body that names a member on the source's path more than once
// ({"id":"A","id":"B"}). The key is refused (it matches ErrInvalidKey):
// the gateway reads the first, the application's parser (Go, Python,
// JavaScript) the last, so keyed by either value a delivery would be
// deduplicated under an event the application did not process.
var ErrDuplicateMember = fmt.Errorf("%w: the JSON body names a member on the key's path more than once", ErrInvalidKey)

// ErrDuplicateField is returned by Extractor.Key when a header, query or
// form key source reads a field the request gives more than once (X-Id: A
// then X-Id: B; id=A&id=B), for the reason of ErrDuplicateMember: the
// gateway would read the first, and the application may read the last
// (PHP) or all of them joined ("A, B" in Node.js).
var ErrDuplicateField = fmt.Errorf("%w: the request gives the key's header, query parameter or form field more than once", ErrInvalidKey)

// duplicateOnPath reports whether body, valid JSON, names a member more
// than once in an object on the GJSON path, or, below where the path
// leads, anywhere in the value it selects (a fingerprint field digests the
// whole of it). For a path that is not plain (wildcards, queries,
// modifiers) the whole body is looked at: where such a path leads depends
// on the members it meets.
func duplicateOnPath(body, path string) bool {
	if !plainPath(path) {
		return duplicateIn(body)
	}
	res := gjson.Parse(body)
	for {
		seg, rest, more := strings.Cut(path, ".")
		if res.IsObject() && memberCount(res, seg) > 1 {
			return true
		}
		if res = res.Get(seg); !res.Exists() {
			return false
		}
		if !more {
			return duplicateIn(res.Raw)
		}
		path = rest
	}
}

// memberCount counts the members of the object obj named name (compared
// unescaped: "\u0069d" is "id" to every parser).
func memberCount(obj gjson.Result, name string) int {
	n := 0
	obj.ForEach(func(k, _ gjson.Result) bool {
		if k.Str == name {
			n++
		}
		return n < 2
	})
	return n
}

// duplicateOnPaths is duplicateOnPath for each json field of fs; the
// whole body, which every path that is not plain looks at, is looked at
// once.
func duplicateOnPaths(body string, fs []field) bool {
	whole := false
	for _, fl := range fs {
		if fl.kind != kindJSON {
			continue
		}
		if !plainPath(fl.arg) {
			if whole {
				continue
			}
			whole = true
		}
		if duplicateOnPath(body, fl.arg) {
			return true
		}
	}
	return false
}

// duplicateIn reports whether an object in raw, a valid JSON value, names
// a member twice, in one pass over raw.
func duplicateIn(raw string) bool {
	type frame struct {
		object bool
		names  int                 // where the object's names start in names
		seen   map[string]struct{} // the names of an object with many
	}
	// The names of small objects are compared in place: a map for each
	// object of a batch of events would cost an allocation apiece.
	const few = 16
	var frameBuf [16]frame
	var nameBuf [4 * few]string
	frames, names := frameBuf[:0], nameBuf[:0]
	name := false // the next string is a member's name
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end := stringEnd(raw, i)
			if name {
				name = false
				f := &frames[len(frames)-1]
				n := unquote(raw[i:end])
				switch {
				case f.seen != nil:
					if _, dup := f.seen[n]; dup {
						return true
					}
					f.seen[n] = struct{}{}
				case slices.Contains(names[f.names:], n):
					return true
				case len(names)-f.names < few:
					names = append(names, n)
				default:
					f.seen = make(map[string]struct{}, 2*few)
					for _, m := range names[f.names:] {
						f.seen[m] = struct{}{}
					}
					f.seen[n] = struct{}{}
				}
			}
			i = end - 1
		case '{':
			frames = append(frames, frame{object: true, names: len(names)})
			name = true
		case '[':
			frames = append(frames, frame{names: len(names)})
		case '}', ']':
			names = names[:frames[len(frames)-1].names]
			if frames = frames[:len(frames)-1]; len(frames) == 0 {
				return false
			}
		case ',':
			name = frames[len(frames)-1].object
		}
	}
	return false
}

// stringEnd returns the offset just past the JSON string that starts at
// raw[i] (its quote).
func stringEnd(raw string, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return len(raw)
}

// unquote returns the value of the valid JSON string s (quotes included),
// unescaped as gjson unescapes it: "\u0069d" is "id".
func unquote(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s[1 : len(s)-1]
	}
	return gjson.Parse(s).Str
}

// Duplicate returns the spec of the first json field ("json:amount") whose
// path, in r's body, names a member more than once, or "" when none does
// (and in modes body and none: the raw body's digest is the bytes as
// sent). In mode fields the first of two members is digested, and the
// application reads the last: a change hidden behind a duplicate would be
// replayed as a retry. Such a delivery is not deduplicated.
func (f *Fingerprinter) Duplicate(r Request) string {
	l := lookup{r: r}
	for _, fl := range f.fields {
		if fl.kind != kindJSON {
			continue
		}
		body, ok := l.jsonBody()
		if !ok {
			return ""
		}
		if duplicateOnPath(body, fl.arg) {
			return fl.spec
		}
	}
	return ""
}
