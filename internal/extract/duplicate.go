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

// duplicateOnPath reports whether body, valid JSON, names a member more
// than once in an object on the GJSON path, or, below where the path
// leads, anywhere in the value it selects (a fingerprint field digests the
// whole of it). For a path that is not plain (wildcards, queries,
// modifiers) the whole body is looked at: where such a path leads depends
// on the members it meets.
func duplicateOnPath(body, path string) bool {
	if !plainPath(path) {
		return duplicateIn(gjson.Parse(body), MaxJSONDepth)
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
			return duplicateIn(res, MaxJSONDepth)
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

// duplicateIn reports whether an object in res, at any depth, names a
// member twice. depth bounds the recursion (the body was validated
// against MaxJSONDepth).
func duplicateIn(res gjson.Result, depth int) bool {
	if depth == 0 || !res.IsObject() && !res.IsArray() {
		return false
	}
	object := res.IsObject()
	dup := false
	// The names of a small object are compared in place: a map for each
	// object of a batch of events would cost an allocation apiece.
	var small [16]string
	names := small[:0]
	var seen map[string]struct{}
	res.ForEach(func(k, v gjson.Result) bool {
		if object {
			switch {
			case seen != nil:
				_, dup = seen[k.Str]
				seen[k.Str] = struct{}{}
			case slices.Contains(names, k.Str):
				dup = true
			case len(names) < len(small):
				names = append(names, k.Str)
			default:
				seen = make(map[string]struct{}, 2*len(small))
				for _, n := range names {
					seen[n] = struct{}{}
				}
				seen[k.Str] = struct{}{}
			}
			if dup {
				return false
			}
		}
		dup = duplicateIn(v, depth-1)
		return !dup
	})
	return dup
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
