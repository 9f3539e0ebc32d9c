package extract

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// Fingerprint modes, as spelled in fingerprint.mode.
const (
	FingerprintBody   = "body"   // SHA-256 of the raw body
	FingerprintFields = "fields" // SHA-256 of the configured fields
	FingerprintNone   = "none"   // no fingerprint: key reuse is not detected
)

// fieldsDomain starts the hashed encoding of fields mode, so that a fields
// fingerprint can never equal a body fingerprint by construction.
const fieldsDomain = "hookstamp fingerprint fields v1\n"

// fieldsHashDomain starts the hashed encoding of a fields_hash key: the
// same fields never give a key equal to a fingerprint.
const fieldsHashDomain = "hookstamp key fields_hash v1\n"

// Value tags of the fields encoding.
const (
	tagAbsent = 0 // field absent: no length, no value follows
	tagText   = 1 // header, query or form value, or a JSON string's unescaped value
	tagJSON   = 2 // JSON literal text of a number, true, false or null; or a modifier's text that is not valid JSON
	tagTree   = 3 // JSON object or array, in the canonical encoding of appendTree
	tagTexts  = 4 // header, query or form field given n > 1 times: n (8 bytes), then each value length-prefixed, in order
)

// Node tags of appendTree's canonical encoding of a JSON object or array.
const (
	nodeObject = 'o' // member count, then each member's key (chunk) and value
	nodeArray  = 'a' // element count, then each element
	nodeString = 's' // the unescaped value (chunk)
	nodeScalar = 'n' // literal text of a number, true, false or null (chunk)
)

// Fingerprinter digests what a delivery means, so that a key reused for a
// different delivery is told from a retry. It is safe for concurrent use.
type Fingerprinter struct {
	mode   string
	fields []field
}

type field struct {
	ref
	spec string // "json:amount", as configured: part of the encoding
}

// NewFingerprinter compiles fingerprint settings. mode is body, fields or
// none; fields are "KIND:NAME" with KIND json, form, header or query, and
// must be given with mode fields and only then. Errors name the offending
// field as "fields[i]: …".
func NewFingerprinter(mode string, fields []string) (*Fingerprinter, error) {
	switch mode {
	case FingerprintBody, FingerprintNone:
		if len(fields) > 0 {
			return nil, fmt.Errorf("fields are only used with mode %q, not %q", FingerprintFields, mode)
		}
		return &Fingerprinter{mode: mode}, nil
	case FingerprintFields:
	default:
		return nil, fmt.Errorf("unknown fingerprint mode %q (want body, fields or none)", mode)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("mode %q needs at least one field", FingerprintFields)
	}
	parsed, err := parseFields("fields", fields)
	if err != nil {
		return nil, err
	}
	return &Fingerprinter{mode: mode, fields: parsed}, nil
}

// parseFields compiles field specs; errors name the spec as "list[i]: …".
func parseFields(list string, specs []string) ([]field, error) {
	fields := make([]field, len(specs))
	seen := make(map[string]int, len(specs))
	for i, spec := range specs {
		fl, err := parseField(spec)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", list, i, err)
		}
		if j, dup := seen[spec]; dup {
			return nil, fmt.Errorf("%s[%d]: %q is already %s[%d]", list, i, spec, list, j)
		}
		seen[spec] = i
		fields[i] = fl
	}
	return fields, nil
}

// parseFieldList compiles the argument of a fields_hash source: field specs
// separated by commas, each trimmed of white space. Errors name the entry
// as "fields_hash[i]: …".
func parseFieldList(arg string) ([]field, error) {
	specs := strings.Split(arg, ",")
	for i, spec := range specs {
		if specs[i] = strings.TrimSpace(spec); specs[i] == "" {
			return nil, fmt.Errorf("%s[%d]: empty entry (want KIND:NAME entries separated by commas)", KindFieldsHash, i)
		}
	}
	return parseFields(KindFieldsHash, specs)
}

func parseField(spec string) (field, error) {
	name, arg, ok := strings.Cut(spec, ":")
	k := namedKind(name)
	if !ok || k == kindLiteral {
		return field{}, fmt.Errorf("%q: want KIND:NAME with KIND json, form, header or query", spec)
	}
	if err := checkName(k, arg); err != nil {
		return field{}, fmt.Errorf("%q: %w", spec, err)
	}
	return field{ref: ref{kind: k, arg: arg}, spec: spec}, nil
}

// Mode returns the fingerprint mode.
func (f *Fingerprinter) Mode() string { return f.mode }

// Fingerprint returns the delivery's 32-byte SHA-256 fingerprint, or nil in
// mode none.
//
// In mode body it is the digest of the raw body. In mode fields it is the
// digest of an unambiguous encoding of the fields in their configured order:
// each field's spec and its value, length-prefixed, with an absent field
// encoded differently from an empty one and a JSON string differently from
// the same text as a JSON number. A header, query or form field given more
// than once is encoded with each of its values, in order, since the
// application may read any of them; one given once is encoded as it was
// before, so that stored fingerprints still match. A JSON object or array
// is encoded canonically (appendTree), so that re-serialising it changes
// nothing.
// Fields the delivery's format does not
// carry (json of a non-JSON body, form of a non-form body) are absent.
func (f *Fingerprinter) Fingerprint(r Request) []byte {
	switch f.mode {
	case FingerprintBody:
		sum := sha256.Sum256(r.Body())
		return sum[:]
	case FingerprintFields:
		var stack [512]byte // enough for typical fields: no allocation
		sum := sha256.Sum256(f.appendFields(stack[:0], r))
		return sum[:]
	}
	return nil
}

// Also returns the digests besides Fingerprint(r) that a record of the same
// key may hold for a retry of r, so that changing a route's fingerprint
// settings does not turn the retries of deliveries recorded before into
// 422 mismatches: in mode fields, the digest of the raw body. A record
// made while the route fingerprinted the body holds it, and a
// byte-identical body is a retry whatever the fields (a fields fingerprint
// never equals a body digest, see fieldsDomain, so this matches records of
// mode body only). It is nil in modes body and none.
func (f *Fingerprinter) Also(r Request) [][]byte {
	if f.mode != FingerprintFields {
		return nil
	}
	body := sha256.Sum256(r.Body())
	return [][]byte{body[:]}
}

// appendFields appends the fields encoding to dst.
func (f *Fingerprinter) appendFields(dst []byte, r Request) []byte {
	dst, _, _ = appendFields(append(dst, fieldsDomain...), &lookup{r: r}, f.fields)
	return dst
}

// appendFieldsHash appends the key of a fields_hash source: the hex digest
// of the fields encoding under fieldsHashDomain (see Extractor.Key).
func (l *lookup) appendFieldsHash(dst []byte, fs []field, limit int) ([]byte, status) {
	var stack [512]byte // enough for typical fields: no allocation
	enc, valued, repeat := appendFields(append(stack[:0], fieldsHashDomain...), l, fs)
	st := found
	// appendFields read the body as JSON if, and only if, a field is json.
	switch {
	case l.json == jsonOK && duplicateOnPaths(l.body, fs):
		st = duplicate
	case repeat:
		st = repeated
	}
	if st != found {
		if valued {
			dst, _ = putDigest(dst, sha256.Sum256(enc), limit)
		}
		return dst, st
	}
	if !valued {
		return dst, absent
	}
	return putDigest(dst, sha256.Sum256(enc), limit)
}

// appendFields appends the encoding of fs, read through l, to dst. valued
// reports whether any field has a value: present and not an empty string,
// null, [] or {}; repeat whether a header, query or form field is given
// more than once.
func appendFields(dst []byte, l *lookup, fs []field) (_ []byte, valued, repeat bool) {
	r := l.r
	for _, fl := range fs {
		dst = appendChunk(dst, fl.spec)
		switch fl.kind {
		case kindHeader:
			if r.HeaderCount(fl.arg) > 1 {
				dst, valued = appendTexts(dst, r.HeaderValues(fl.arg), valued)
				repeat = true
				break
			}
			v := r.Header(fl.arg)
			dst, valued = appendText(dst, v), valued || len(v) > 0
		case kindQuery:
			if r.QueryCount(fl.arg) > 1 {
				dst, valued = appendTexts(dst, r.QueryValues(fl.arg), valued)
				repeat = true
				break
			}
			v := r.Query(fl.arg)
			dst, valued = appendText(dst, v), valued || len(v) > 0
		case kindForm:
			var raw []byte
			n := 0
			if isFormMediaType(r.ContentType()) {
				raw, n = formCount(r.Body(), fl.arg)
			}
			switch {
			case n == 0:
				dst = append(dst, tagAbsent)
			case n == 1:
				valued = valued || len(raw) > 0
				dst = appendFormValue(append(dst, tagText), raw)
			default:
				repeat = true
				dst = binary.BigEndian.AppendUint64(append(dst, tagTexts), uint64(n))
				ff := formField{body: r.Body(), name: fl.arg}
				for raw, ok := ff.next(); ok; raw, ok = ff.next() {
					valued = valued || len(raw) > 0
					dst = appendFormValue(dst, raw)
				}
			}
		case kindJSON:
			var res gjson.Result
			if body, ok := l.jsonBody(); ok {
				res = getJSON(body, fl.arg)
			}
			switch {
			case (res.IsObject() || res.IsArray()) && !plainPath(fl.arg) && !validJSON(res.Raw):
				// A modifier made it (@fromstr of a string that is not
				// JSON, or of one nested deeper than MaxJSONDepth):
				// appendTree reads valid JSON only.
				valued = true
				dst = append(dst, tagJSON)
				dst = appendChunk(dst, res.Raw)
			case res.Type == gjson.String:
				valued = valued || res.Str != ""
				dst = append(dst, tagText)
				dst = appendChunk(dst, res.Str)
			case res.IsObject() || res.IsArray():
				valued = valued || !emptyTree(res.Raw)
				// What an object or array means does not depend on its
				// white space, the order of its members or the escapes of
				// its strings: a provider re-serialising a retry must not
				// turn it into a mismatch.
				dst = appendTree(append(dst, tagTree), res.Raw)
			case res.Exists():
				valued = valued || res.Type != gjson.Null
				dst = append(dst, tagJSON)
				dst = appendChunk(dst, res.Raw)
			default:
				dst = append(dst, tagAbsent)
			}
		}
	}
	return dst, valued, repeat
}

// appendFormValue appends the still-escaped form value raw, unescaped and
// length-prefixed.
func appendFormValue(dst, raw []byte) []byte {
	// The length prefix is the unescaped length: each %XX is one byte.
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(raw)-2*bytes.Count(raw, []byte{'%'})))
	dst, _ = appendUnescaped(dst, raw, len(dst)+len(raw))
	return dst
}

// appendTexts appends the values of a header or query parameter given
// more than once, and whether any has a value (or valued already did).
func appendTexts(dst []byte, vs [][]byte, valued bool) ([]byte, bool) {
	dst = binary.BigEndian.AppendUint64(append(dst, tagTexts), uint64(len(vs)))
	for _, v := range vs {
		dst, valued = appendChunk(dst, v), valued || len(v) > 0
	}
	return dst, valued
}

// appendText appends a header or query value: absent when nil.
func appendText(dst, v []byte) []byte {
	if v == nil {
		return append(dst, tagAbsent)
	}
	return appendChunk(append(dst, tagText), v)
}

// appendChunk appends a length-prefixed byte string.
func appendChunk[T string | []byte](dst []byte, b T) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(b)))
	return append(dst, b...)
}
