package extract

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tidwall/gjson"
)

// MaxJSONDepth is the deepest nesting of objects and arrays a JSON body may
// have for JSON sources to read it. Webhook payloads nest a handful of
// levels; the limit keeps the (recursive) validator's stack small whatever
// the body.
const MaxJSONDepth = 1000

// MaxFormFields is the number of form pairs looked at when searching for a
// field, the same limit net/url applies to a whole query.
const MaxFormFields = 10000

// kind is what one key source, template placeholder or fingerprint field
// reads.
type kind uint8

const (
	kindLiteral kind = iota // template text between placeholders
	kindHeader
	kindJSON
	kindForm
	kindQuery
	kindRoute
	kindMethod
	kindBodyHash
	kindTemplate
	kindFieldsHash
)

// kindNames are the configuration spellings, indexed by kind.
var kindNames = [...]string{
	kindHeader:     KindHeader,
	kindJSON:       KindJSON,
	kindForm:       KindForm,
	kindQuery:      KindQuery,
	kindRoute:      "route",
	kindMethod:     "method",
	kindBodyHash:   KindBodyHash,
	kindTemplate:   KindTemplate,
	kindFieldsHash: KindFieldsHash,
}

func (k kind) String() string { return kindNames[k] }

// namedKind is the kind of a reference to one named request value
// (header, json, form or query) spelled name; kindLiteral for any other.
func namedKind(name string) kind {
	switch name {
	case KindHeader:
		return kindHeader
	case KindJSON:
		return kindJSON
	case KindForm:
		return kindForm
	case KindQuery:
		return kindQuery
	}
	return kindLiteral
}

// ref is one compiled value reference: a kind and its argument (header
// name, GJSON path, form or query name; the text of a literal).
type ref struct {
	kind kind
	arg  string
}

// jsonState is what a lookup learnt about the body as JSON.
type jsonState uint8

const (
	jsonUnknown   jsonState = iota // not looked at yet
	jsonOK                         // valid JSON, in lookup.body
	jsonAbsent                     // empty, or not JSON and not claiming to be
	jsonMalformed                  // claims to be JSON (Content-Type) but is not
)

// lookup resolves references against one request. It lives on the caller's
// stack for one Key or Fingerprint call and validates the body at most once.
type lookup struct {
	r     Request
	route string
	json  jsonState
	body  string // the body, when json == jsonOK; aliases Request.Body()
}

// jsonBody returns the body as a string view when it is valid JSON.
func (l *lookup) jsonBody() (string, bool) {
	if l.json == jsonUnknown {
		b := l.r.Body()
		switch {
		case len(b) == 0:
			l.json = jsonAbsent
		case ValidJSON(b):
			l.json, l.body = jsonOK, str(b)
		case isJSONMediaType(l.r.ContentType()):
			l.json = jsonMalformed
		default:
			l.json = jsonAbsent
		}
	}
	return l.body, l.json == jsonOK
}

// status is the result of resolving one reference into a key being built.
type status uint8

const (
	found     status = iota // appended, non-empty
	absent                  // absent or empty: nothing appended
	tooLong                 // the key would pass its limit: appended up to it
	notUTF8                 // appended, but the value is not valid Unicode
	duplicate               // a JSON member on the path is named twice or in another case: appended (the first), for logging only
	repeated                // a header, query parameter or form field is given more than once: appended (the first), for logging only
)

// appendValue appends the value ref names to dst, which may grow to at most
// limit bytes. On absent dst is returned unchanged; on tooLong it holds the
// key truncated at limit; on notUTF8 it holds the value as decoded, for
// logging only.
func (l *lookup) appendValue(dst []byte, rf ref, limit int) ([]byte, status) {
	switch rf.kind {
	case kindLiteral:
		return put(dst, rf.arg, limit)
	case kindHeader:
		dst, st := put(dst, l.r.Header(rf.arg), limit)
		return dst, once(st, l.r.HeaderCount(rf.arg))
	case kindQuery:
		dst, st := put(dst, l.r.Query(rf.arg), limit)
		return dst, once(st, l.r.QueryCount(rf.arg))
	case kindRoute:
		return put(dst, l.route, limit)
	case kindMethod:
		return put(dst, l.r.Method(), limit)
	case kindJSON:
		body, ok := l.jsonBody()
		if !ok {
			return dst, absent
		}
		dst, st := appendJSON(dst, getJSON(body, rf.arg), limit)
		if duplicateOnPath(body, rf.arg) {
			st = duplicate
		}
		return dst, st
	case kindForm:
		if !isFormMediaType(l.r.ContentType()) {
			return dst, absent
		}
		ff := formField{body: l.r.Body(), name: rf.arg}
		v, ok := ff.next()
		if !ok {
			return dst, absent
		}
		dst, st := appendUnescaped(dst, v, limit)
		if _, again := ff.next(); again {
			st = repeated
		}
		return dst, st
	case kindBodyHash:
		body := l.r.Body()
		if len(body) == 0 {
			return dst, absent
		}
		return putDigest(dst, sha256.Sum256(body), limit)
	}
	return dst, absent
}

// once returns st, or repeated when the value's field was given n > 1
// times.
func once(st status, n int) status {
	if n > 1 {
		return repeated
	}
	return st
}

// putDigest appends sum in lowercase hex.
func putDigest(dst []byte, sum [sha256.Size]byte, limit int) ([]byte, status) {
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum[:])
	return put(dst, hx[:], limit)
}

// put appends v to dst unless it is empty, truncating at limit.
func put[T string | []byte](dst []byte, v T, limit int) ([]byte, status) {
	if len(v) == 0 {
		return dst, absent
	}
	if room := limit - len(dst); len(v) > room {
		return append(dst, v[:max(room, 0)]...), tooLong
	}
	return append(dst, v...), found
}

// getJSON resolves a GJSON path in body. A plain dotted path (letters,
// digits, '_' and '-' between the dots) is followed one step at a time, so
// that the first of duplicate object keys wins at every level: gjson alone
// looks into a later duplicate when the first lacks the rest of the path
// ({"a":0,"a":{"b":1}} would give a.b = 1). Other paths (wildcards,
// queries, modifiers, escapes) are gjson's to resolve as written.
func getJSON(body, path string) gjson.Result {
	if !plainPath(path) {
		return gjson.Get(body, path)
	}
	var res gjson.Result
	for {
		seg, rest, more := strings.Cut(path, ".")
		if res = gjson.Get(body, seg); !more || !res.Exists() {
			return res
		}
		body, path = res.Raw, rest
	}
}

// plainPath reports whether path is dot-separated non-empty segments of
// ASCII letters, digits, '_' and '-': nothing gjson gives a meaning to.
func plainPath(path string) bool {
	seg := 0
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '.':
			if seg == 0 {
				return false
			}
			seg = 0
		case c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			seg++
		default:
			return false
		}
	}
	return seg > 0
}

// appendJSON appends the key text of a JSON value: a string's unescaped
// value, a number's literal, "true" or "false". Null, objects, arrays and
// absent values yield nothing. A string escaping an unpaired UTF-16
// surrogate ("\ud800") is notUTF8: the decoder turns it into U+FFFD, so
// "\ud800" and "\udfff" would otherwise be one and the same key.
func appendJSON(dst []byte, res gjson.Result, limit int) ([]byte, status) {
	switch res.Type {
	case gjson.String:
		dst, st := put(dst, res.Str, limit)
		if st == found && strings.Contains(res.Raw, `\u`) && unpairedSurrogate(res.Raw) {
			st = notUTF8
		}
		return dst, st
	case gjson.Number, gjson.True, gjson.False:
		return put(dst, res.Raw, limit)
	}
	return dst, absent
}

// unpairedSurrogate reports whether the raw JSON string raw (quotes
// included, already validated) has a \uD800–\uDBFF escape not followed by
// a \uDC00–\uDFFF one, or a \uDC00–\uDFFF escape not preceded by one.
func unpairedSurrogate(raw string) bool {
	high := false // the previous escape was a high surrogate
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			if high {
				return true
			}
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' || i+4 >= len(raw) {
			if high {
				return true
			}
			continue // \n, \", … ; i now on the escaped character
		}
		u := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case u >= 0xD800 && u <= 0xDBFF:
			if high {
				return true
			}
			high = true
		case u >= 0xDC00 && u <= 0xDFFF:
			if !high {
				return true
			}
			high = false
		default:
			if high {
				return true
			}
		}
	}
	return high
}

// hex4 decodes four hex digits (validated by the JSON validator).
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		r = r<<4 | rune(unhex(s[i]))
	}
	return r
}

// ValidJSON reports whether b is one valid JSON value nested at most
// MaxJSONDepth deep. The depth pass runs first because gjson's validator
// recurses once per level: a body of a few megabytes of '[' would take
// seconds and, past about 9 MiB, overflow the goroutine's stack.
func ValidJSON(b []byte) bool {
	return validJSON(str(b))
}

func validJSON(s string) bool {
	return withinDepth(s, MaxJSONDepth) && gjson.Valid(s)
}

// withinDepth reports whether the brackets outside strings of b never nest
// deeper than max. It does not validate anything else.
func withinDepth(b string, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Skip the string; an unterminated one ends the scan.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > max {
				return false
			}
		case '}', ']':
			depth--
		}
	}
	return true
}

// mediaType returns the media type of a Content-Type value: the part before
// any parameter, without surrounding spaces.
func mediaType(ct []byte) []byte {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.TrimSpace(ct)
}

// isJSONMediaType reports application/json and structured-syntax +json
// types (application/cloudevents+json, application/problem+json, …).
func isJSONMediaType(ct []byte) bool {
	mt := str(mediaType(ct))
	if strings.EqualFold(mt, "application/json") {
		return true
	}
	return len(mt) > len("+json") && strings.EqualFold(mt[len(mt)-len("+json"):], "+json") && strings.IndexByte(mt, '/') > 0
}

func isFormMediaType(ct []byte) bool {
	return strings.EqualFold(str(mediaType(ct)), "application/x-www-form-urlencoded")
}

// formField walks the still-escaped values of the pairs named name in an
// application/x-www-form-urlencoded body, in order, skipping the pairs that
// net/url.ParseQuery rejects (a ';' in the pair, a malformed %-escape in its
// name or value), and looking at no more than MaxFormFields pairs in all.
// It never allocates.
type formField struct {
	body  []byte // the pairs not looked at yet
	name  string
	pairs int // pairs looked at
}

// next returns the value of the next pair named name.
func (f *formField) next() ([]byte, bool) {
	for len(f.body) > 0 && f.pairs < MaxFormFields {
		f.pairs++
		pair := f.body
		if i := bytes.IndexByte(f.body, '&'); i >= 0 {
			pair, f.body = f.body[:i], f.body[i+1:]
		} else {
			f.body = nil
		}
		if len(pair) == 0 || bytes.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := bytes.Cut(pair, []byte{'='})
		if !validEscapes(k) || !validEscapes(v) || !unescapedEqual(k, f.name) {
			continue
		}
		return v, true
	}
	return nil, false
}

// formCount returns the still-escaped value of the first pair of a form
// body named name, and how many pairs are named name (see formField).
func formCount(body []byte, name string) (first []byte, n int) {
	f := formField{body: body, name: name}
	first, ok := f.next()
	for ; ok; _, ok = f.next() {
		n++
	}
	return first, n
}

// validEscapes reports whether every '%' in s starts a %XX escape.
func validEscapes(s []byte) bool {
	for i := bytes.IndexByte(s, '%'); i >= 0; {
		if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
			return false
		}
		j := bytes.IndexByte(s[i+3:], '%')
		if j < 0 {
			return true
		}
		i += 3 + j
	}
	return true
}

// unescapedEqual reports whether the query-unescaped s equals name; s has
// valid escapes.
func unescapedEqual(s []byte, name string) bool {
	j := 0
	for i := 0; i < len(s); j++ {
		if j >= len(name) {
			return false
		}
		c := s[i]
		switch c {
		case '%':
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 3
		case '+':
			c = ' '
			i++
		default:
			i++
		}
		if c != name[j] {
			return false
		}
	}
	return j == len(name)
}

// appendUnescaped appends the query-unescaped s (with valid escapes) to dst,
// stopping at limit.
func appendUnescaped(dst []byte, s []byte, limit int) ([]byte, status) {
	if len(s) == 0 {
		return dst, absent
	}
	for i := 0; i < len(s); {
		if len(dst) >= limit {
			return dst, tooLong
		}
		c := s[i]
		switch c {
		case '%':
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 3
		case '+':
			c = ' '
			i++
		default:
			// Copy the run of plain bytes at once.
			n := i + 1
			for n < len(s) && s[n] != '%' && s[n] != '+' {
				n++
			}
			if room := limit - len(dst); n-i > room {
				return append(dst, s[i:i+room]...), tooLong
			}
			dst = append(dst, s[i:n]...)
			i = n
			continue
		}
		dst = append(dst, c)
	}
	return dst, found
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
