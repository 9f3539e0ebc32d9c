package extract

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// ErrDuplicateMember is returned by Extractor.Key when a JSON key source
// reads a body that names a member on the source's path more than once
// ({"id":"A","id":"B"}), or in another case ({"id":"A","ID":"B"}, or
// {"ID":"B"} alone: see Ambiguous). The key is refused (it matches
// ErrInvalidKey): the gateway reads the first, the application's parser
// (Go, Python, JavaScript) the last, so keyed by either value a delivery
// would be deduplicated under an event the application did not process.
var ErrDuplicateMember = fmt.Errorf("%w: the JSON body names a member on the key's path more than once, or in another case", ErrInvalidKey)

// ErrDuplicateField is returned by Extractor.Key when a header, query or
// form key source reads a field the request gives more than once (X-Id: A
// then X-Id: B; id=A&id=B), for the reason of ErrDuplicateMember: the
// gateway would read the first, and the application may read the last
// (PHP) or all of them joined ("A, B" in Node.js).
var ErrDuplicateField = fmt.Errorf("%w: the request gives the key's header, query parameter or form field more than once", ErrInvalidKey)

// duplicateOnPath reports whether body, valid JSON, names a member more
// than once in an object on the GJSON path (Ambiguous), or, below where
// the path leads, anywhere in the value it selects (a fingerprint field
// digests the whole of it). Below the path names are compared exactly:
// the digest covers names differing in case as two members, and what the
// sender chose there (Mailgun's user-variables, a map to every parser)
// may well differ only in case. For a path that is not plain (wildcards,
// queries, modifiers) the whole body is looked at, its names compared as
// on a path: where such a path leads depends on the members it meets.
func duplicateOnPath(body, path string) bool {
	if !plainPath(path) {
		return duplicateIn(body, true)
	}
	res := gjson.Parse(body)
	for {
		seg, rest, more := strings.Cut(path, ".")
		if res.IsObject() && Ambiguous(res, seg) {
			return true
		}
		if res = res.Get(seg); !res.Exists() {
			return false
		}
		if !more {
			return duplicateIn(res.Raw, false)
		}
		path = rest
	}
}

// Ambiguous reports whether the JSON object obj names the member name
// more than once, or under a name that is SameName but not name: GJSON
// reads the first member spelled exactly, a parser that ignores case the
// last of any spelling, so the two would not read the same value.
func Ambiguous(obj gjson.Result, name string) bool {
	n := 0
	obj.ForEach(func(k, _ gjson.Result) bool {
		switch {
		case k.Str == name:
			n++
		case apart(k.Str, name):
		case SameName(k.Str, name):
			n = 2
		}
		return n < 2
	})
	return n > 1
}

// SameName reports whether the JSON member names a and b (unescaped:
// "\u0069d" is "id" to every parser) may be read as one: Go's
// encoding/json and .NET's Json.NET match a name to a field regardless of
// case, the first by Unicode simple folding ("ſ" is "s", the Kelvin sign
// "k"), the second by upper-casing ("ı" is "i"), and Java's Jackson, when
// told to, by lower-casing too. Invalid UTF-8 counts as U+FFFD, which
// encoding/json turns it into.
func SameName(a, b string) bool {
	for {
		i, end := 0, min(len(a), len(b))
		for ; i < end; i++ {
			c, d := a[i], b[i]
			if c|d >= utf8.RuneSelf {
				break
			}
			if c != d && (c|0x20 != d|0x20 || (c|0x20)-'a' > 'z'-'a') {
				return false
			}
		}
		if a, b = a[i:], b[i:]; a == "" || b == "" {
			return a == b
		}
		r, n := utf8.DecodeRuneInString(a)
		s, m := utf8.DecodeRuneInString(b)
		if r != s && foldRune(r) != foldRune(s) {
			return false
		}
		a, b = a[n:], b[m:]
	}
}

// apart reports whether a and b begin with ASCII bytes that differ other
// than in case, which most pairs of names that are not SameName do: it is
// inlined, and SameName, called for each pair, is not.
func apart(a, b string) bool {
	return a != "" && b != "" && a[0]|b[0] < utf8.RuneSelf && a[0]|0x20 != b[0]|0x20
}

// foldRune returns one rune for all the runes that SameName takes for one:
// those linked by folding, upper-casing and lower-casing ('ı' is
// upper-cased to 'I', which folds to 'i', which 'İ' lower-cases to).
// ASCII letters are their lower case.
func foldRune(r rune) rune {
	r = unicode.ToUpper(unicode.ToLower(r))
	f := unicode.SimpleFold(r)
	for f > r {
		r, f = f, unicode.SimpleFold(f)
	}
	if 'A' <= f && f <= 'Z' {
		f += 'a' - 'A'
	}
	return f
}

// foldName returns name with each rune replaced by its foldRune, so that
// foldName(a) == foldName(b) exactly when SameName(a, b). It returns name
// itself, without allocating, when name is ASCII without upper case.
func foldName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			var b strings.Builder
			b.Grow(len(name))
			for _, r := range name {
				b.WriteRune(foldRune(r))
			}
			return b.String()
		}
	}
	return name
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
// a member twice (SameName when fold, else spelled alike), in one pass
// over raw.
func duplicateIn(raw string, fold bool) bool {
	type frame struct {
		object bool
		names  int                 // where the object's names start in names
		seen   map[string]struct{} // the key of each name of an object with many
	}
	key := func(n string) string { return n }
	if fold {
		key = foldName
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
					k := key(n)
					if _, dup := f.seen[k]; dup {
						return true
					}
					f.seen[k] = struct{}{}
				case fold && sameNameIn(names[f.names:], n), !fold && slices.Contains(names[f.names:], n):
					return true
				case len(names)-f.names < few:
					names = append(names, n)
				default:
					f.seen = make(map[string]struct{}, 2*few)
					for _, m := range names[f.names:] {
						f.seen[key(m)] = struct{}{}
					}
					f.seen[key(n)] = struct{}{}
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

// sameNameIn reports whether a name in names is SameName as name.
func sameNameIn(names []string, name string) bool {
	for _, m := range names {
		switch {
		case m == name:
			return true
		case apart(m, name):
		case SameName(m, name):
			return true
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
// path, in r's body, names a member more than once (Ambiguous: in any
// case), or "" when none does
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
