package extract

import (
	"errors"
	"fmt"
)

// Source kinds, as spelled in key.sources.
const (
	KindHeader   = "header"    // Arg: header name
	KindJSON     = "json"      // Arg: GJSON path into a JSON body
	KindForm     = "form"      // Arg: application/x-www-form-urlencoded field
	KindQuery    = "query"     // Arg: URL query parameter
	KindTemplate = "template"  // Arg: a template, see ParseTemplate
	KindBodyHash = "body_hash" // Arg: "sha256"; hex digest of the raw body
	// KindFieldsHash's Arg is a comma-separated list of fields as in
	// fingerprint fields ("json:#.eventId,header:X-Id"); the key is the
	// hex SHA-256 of their encoding, see Extractor.Key.
	KindFieldsHash = "fields_hash"
)

// ErrMalformedBody is returned by Extractor.Key when no source yielded a key
// and the body claims to be JSON (by its Content-Type) but is not valid JSON
// (or nests deeper than MaxJSONDepth): the provider should be told the body
// is malformed rather than that the key is missing.
var ErrMalformedBody = errors.New("malformed JSON body")

// Source is one entry of a route's key.sources.
type Source struct {
	Kind string // one of the Kind constants
	Arg  string
}

// Extractor finds a delivery's key. It is compiled once per route and is
// safe for concurrent use.
type Extractor struct {
	route   string
	maxLen  int
	sources []compiledSource
}

type compiledSource struct {
	ref              // kindHeader, kindJSON, kindForm, kindQuery, kindBodyHash or kindFieldsHash
	tpl    *Template // kindTemplate
	fields []field   // kindFieldsHash
}

// NewExtractor compiles a route's key sources. route is the route name
// (the value of {route} in templates); maxLen is key.max_length in bytes and
// must be positive. Errors name the offending source as "sources[i]: …".
func NewExtractor(route string, sources []Source, maxLen int) (*Extractor, error) {
	if maxLen <= 0 {
		return nil, fmt.Errorf("max length %d: must be positive", maxLen)
	}
	if len(sources) == 0 {
		return nil, errors.New("no key sources")
	}
	e := &Extractor{route: route, maxLen: maxLen, sources: make([]compiledSource, len(sources))}
	for i, s := range sources {
		cs, err := compileSource(s)
		if err != nil {
			return nil, fmt.Errorf("sources[%d]: %w", i, err)
		}
		e.sources[i] = cs
	}
	return e, nil
}

func compileSource(s Source) (compiledSource, error) {
	switch s.Kind {
	case KindTemplate:
		t, err := ParseTemplate(s.Arg)
		if err != nil {
			return compiledSource{}, err
		}
		return compiledSource{ref: ref{kind: kindTemplate}, tpl: t}, nil
	case KindBodyHash:
		if s.Arg != "sha256" {
			return compiledSource{}, fmt.Errorf("body_hash: unsupported algorithm %q (want sha256)", s.Arg)
		}
		return compiledSource{ref: ref{kind: kindBodyHash}}, nil
	case KindFieldsHash:
		fields, err := parseFieldList(s.Arg)
		if err != nil {
			return compiledSource{}, err
		}
		return compiledSource{ref: ref{kind: kindFieldsHash}, fields: fields}, nil
	}
	k := namedKind(s.Kind)
	if k == kindLiteral {
		return compiledSource{}, fmt.Errorf("unknown source %q (want header, json, form, query, template, body_hash or fields_hash)", s.Kind)
	}
	if err := checkName(k, s.Arg); err != nil {
		return compiledSource{}, fmt.Errorf("%s: %w", s.Kind, err)
	}
	return compiledSource{ref: ref{kind: k, arg: s.Arg}}, nil
}

// Key appends the delivery's key to dst and returns the extended slice (the
// key is the part after the original len(dst)). The first source that yields
// a non-empty value wins. Results:
//
//   - a valid key: (dst+key, nil);
//   - no source yielded a value: (nil, nil), or (nil, ErrMalformedBody) when a
//     JSON source could not read a body whose Content-Type claims JSON;
//   - the winning value is not a valid key: (dst+key, err) where err is
//     ErrKeyTooLong, ErrKeyNotUTF8 or ErrKeyControl (all match
//     ErrInvalidKey). The key is there to be logged, escaped; for
//     ErrKeyTooLong it is cut at the maximum length. It must not be used as
//     an identity. A JSON source whose path names a member twice, or in
//     another case, is ErrDuplicateMember, and a header, query or form source given more
//     than once ErrDuplicateField (both match ErrInvalidKey), its first
//     value absent or not.
//
// A fields_hash source yields the lowercase hex SHA-256 of the fields
// encoding of fingerprint mode fields (see Fingerprinter.Fingerprint),
// under a domain of its own, so that no such key equals a fingerprint. It
// yields nothing when none of its fields has a value (each is absent, an
// empty string, null, [] or {}); a JSON field whose path names a member
// twice, or in another case, is ErrDuplicateMember, and a header, query or form field given
// more than once ErrDuplicateField, as for the sources of those kinds.
//
// Key does not allocate for header, query, json (unless the JSON string has
// escapes), form and body_hash sources when dst has room for the key, nor
// for fields_hash sources whose fields are such values.
func (e *Extractor) Key(r Request, dst []byte) ([]byte, error) {
	l := lookup{r: r, route: e.route}
	start := len(dst)
	limit := start + e.maxLen
	for i := range e.sources {
		s := &e.sources[i]
		var st status
		switch {
		case s.tpl != nil:
			dst, st = s.tpl.appendTo(dst, &l, limit)
		case s.kind == kindFieldsHash:
			dst, st = l.appendFieldsHash(dst, s.fields, limit)
		default:
			dst, st = l.appendValue(dst, s.ref, limit)
		}
		switch st {
		case absent:
			continue
		case tooLong:
			return dst, ErrKeyTooLong
		case notUTF8:
			return dst, ErrKeyNotUTF8
		case duplicate:
			return dst, ErrDuplicateMember
		case repeated:
			return dst, ErrDuplicateField
		}
		return dst, validateChars(dst[start:])
	}
	if l.json == jsonMalformed {
		return nil, ErrMalformedBody
	}
	return nil, nil
}
