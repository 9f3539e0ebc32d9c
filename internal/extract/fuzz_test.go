package extract

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// FuzzParseTemplate checks that ParseTemplate never panics, and that a
// template it accepts is well-formed: String() gives back exactly the input,
// parsing that again gives the same parts, literals are non-empty and
// brace-free, placeholders have a known kind, and header, json, form and
// query placeholders have a non-empty, brace-free name; at least one of them
// reads the request.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{
		"{json:order_id}-{json:event}-{json:seq}",
		"{route}:{method}:{header:X-Id}",
		"{form:a}{query:b}",
		"{json:a", "a}", "{}", "{json:{a}}", "{route:x}", "{jsn:a}", "fixed", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseTemplate(s)
		if err != nil {
			if tpl != nil || !strings.HasPrefix(err.Error(), "template ") {
				t.Fatalf("ParseTemplate(%q) = %v, %v", s, tpl, err)
			}
			return
		}
		if got := tpl.String(); got != s {
			t.Fatalf("ParseTemplate(%q).String() = %q", s, got)
		}
		again, err := ParseTemplate(tpl.String())
		if err != nil || !reflect.DeepEqual(again.parts, tpl.parts) {
			t.Fatalf("re-parsing %q: %v, parts %v, want %v", s, err, again, tpl.parts)
		}
		fromRequest := false
		for i, p := range tpl.parts {
			switch p.kind {
			case kindLiteral:
				if p.arg == "" || strings.ContainsAny(p.arg, "{}") {
					t.Fatalf("%q: bad literal %q", s, p.arg)
				}
				if i > 0 && tpl.parts[i-1].kind == kindLiteral {
					t.Fatalf("%q: two literals in a row", s)
				}
			case kindRoute, kindMethod:
				if p.arg != "" {
					t.Fatalf("%q: %s has name %q", s, p.kind, p.arg)
				}
			case kindHeader, kindJSON, kindForm, kindQuery:
				fromRequest = true
				if p.arg == "" || strings.ContainsAny(p.arg, "{}") || strings.TrimSpace(p.arg) != p.arg {
					t.Fatalf("%q: %s has bad name %q", s, p.kind, p.arg)
				}
			default:
				t.Fatalf("%q: part of kind %d", s, p.kind)
			}
		}
		if !fromRequest {
			t.Fatalf("%q: accepted without a request placeholder", s)
		}
	})
}

// fuzzConfigs are the key configurations FuzzExtractKey picks from.
var fuzzConfigs = [][]Source{
	{{KindJSON, "id"}},
	{{KindJSON, "a.b"}},
	{{KindJSON, "items.0.id"}},
	{{KindForm, "k"}},
	{{KindTemplate, "{json:a}-{form:k}-{header:X-Id}"}},
	{{KindTemplate, "{json:id}:{json:a.b}"}},
	{{KindHeader, "X-Id"}, {KindJSON, "id"}, {KindForm, "k"}, {KindQuery, "q"}},
	{{KindFieldsHash, "json:id,json:a.b,header:X-Id,form:k,query:q"}, {KindJSON, "items.0.id"}},
	{{KindFieldsHash, "json:#.id, json:items"}},
}

const fuzzMaxLen = 64

// FuzzExtractKey checks Extractor.Key against a slow reference built on the
// standard library (encoding/json for JSON, net/url.ParseQuery for forms,
// unicode.IsControl for key characters): for every request, Key never
// panics and returns exactly the reference's key, or no key, or the
// reference's error (ErrMalformedBody when a JSON source met an invalid body
// that claims to be JSON; ErrKeyTooLong with the key cut at the limit;
// ErrKeyNotUTF8; ErrKeyControl; ErrKeySpace; ErrDuplicateMember and
// ErrDuplicateField). which picks the configuration and, past the number
// of configurations, whether the header X-Id (bit 0 of which divided by
// it) and the query parameter q (bit 1) are given twice: X-Id as hdr then
// q, q as q then hdr. Only one corner is checked loosely: a JSON
// string with raw invalid UTF-8 must give ErrKeyNotUTF8 or ErrKeyTooLong,
// since encoding/json would have replaced the bytes.
func FuzzExtractKey(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":"evt_1"}`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"id":12.50}`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"id":"a\u0000b"}`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"id":"x"`), "application/json", "", "")
	f.Add(uint8(1), []byte(`{"a":{"b":true}}`), "text/plain", "", "")
	f.Add(uint8(2), []byte(`{"items":[{"id":"i0"},{"id":"i1"}]}`), "", "", "")
	f.Add(uint8(3), []byte("k=a%20b&k=c"), "application/x-www-form-urlencoded", "", "")
	f.Add(uint8(4), []byte(`{"a":"1"}`), "application/json", "h", "")
	f.Add(uint8(5), []byte(`{"id":"x","a":{"b":"y"}}`), "application/json", "", "")
	f.Add(uint8(6), []byte(`{"id":""}`), "application/json", "", "q1")
	f.Add(uint8(6), []byte(``), "", "\r\n", "q\xff")
	f.Add(uint8(7), []byte(`{"id":"e1","a":{"b":[1,{"c":null}]}}`), "application/json", "h", "")
	f.Add(uint8(7), []byte(`{"items":[{"id":"i0"}],"id":""}`), "application/json", "", "")
	f.Add(uint8(7), []byte("k=&x=1"), "application/x-www-form-urlencoded", "", "")
	f.Add(uint8(8), []byte(`[{"id":1,"x":2},{"id":"\u0031"},{"y":{"b":1,"a":[]}},3]`), "application/json", "", "")
	f.Add(uint8(8), []byte(`{"items":{"z":1,"a":{"id":2}}}`), "", "", "")
	f.Add(uint8(8), []byte(`[{"id":1,"id":2}]`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"id":"a","ID":"b"}`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"Id":"b"}`), "application/json", "", "")
	f.Add(uint8(0), []byte(`{"id":"a","idx":"b","i":"c"}`), "application/json", "", "")
	f.Add(uint8(1), []byte(`{"a":{"b":"x","\u0042":"y"}}`), "application/json", "", "")
	f.Add(uint8(2), []byte(`{"items":[{"id":"i0"}],"ıtems":[{"id":"i1"}]}`), "application/json", "", "")
	f.Add(uint8(7), []byte(`{"id":"e1","a":{"b":{"ſ":1,"s":2}}}`), "application/json", "", "")
	f.Add(uint8(8), []byte(`[{"id":1,"\u212aey":2,"key":3}]`), "application/json", "", "")
	f.Add(uint8(6+len(fuzzConfigs)), []byte(`{"id":"j"}`), "application/json", "A", "B")
	f.Add(uint8(6+2*len(fuzzConfigs)), []byte(`{}`), "application/json", "", "q")
	f.Add(uint8(7+3*len(fuzzConfigs)), []byte("k=1"), "application/x-www-form-urlencoded", "A", "B")
	f.Add(uint8(4+len(fuzzConfigs)), []byte(`{"a":"1"}`), "application/json", "A", "B")
	f.Fuzz(func(t *testing.T, which uint8, body []byte, contentType, hdr, q string) {
		sources := fuzzConfigs[int(which)%len(fuzzConfigs)]
		e, err := NewExtractor("r", sources, fuzzMaxLen)
		if err != nil {
			t.Fatal(err)
		}
		r := MapRequest{
			HTTPMethod: "POST",
			Headers:    map[string]string{"Content-Type": contentType, "X-Id": hdr},
			QueryArgs:  map[string]string{"q": q},
			RawBody:    body,
		}
		twice := int(which) / len(fuzzConfigs)
		if twice&1 != 0 {
			delete(r.Headers, "X-Id")
			r.HeaderLists = map[string][]string{"X-Id": {hdr, q}}
		}
		if twice&2 != 0 {
			r.QueryArgs = nil
			r.QueryLists = map[string][]string{"q": {q, hdr}}
		}
		got, gotErr := e.Key(r, nil)

		hashMalformed := false
		if sources[0].Kind == KindFieldsHash {
			h := refFieldsHash(t, sources[0].Arg, r)
			switch {
			case h.dup:
				if !errors.Is(gotErr, ErrDuplicateMember) {
					t.Fatalf("Key() = %q, %v; want ErrDuplicateMember", got, gotErr)
				}
				return
			case h.rep:
				if !errors.Is(gotErr, ErrDuplicateField) {
					t.Fatalf("Key() = %q, %v; want ErrDuplicateField", got, gotErr)
				}
				return
			case h.valued && h.exact:
				if gotErr != nil || string(got) != h.key {
					t.Fatalf("Key() = %q, %v; want %s", got, gotErr, h.key)
				}
				return
			case h.valued:
				if gotErr != nil || !isLowerHex(got, 64) {
					t.Fatalf("Key() = %q, %v; want 64 lowercase hex digits", got, gotErr)
				}
				return
			}
			// No field has a value: the next source decides.
			sources, hashMalformed = sources[1:], h.malformed
		}
		want, loose, malformed, refused := refKey(t, sources, r)
		malformed = malformed || hashMalformed
		switch {
		case refused != nil:
			if gotErr != refused {
				t.Fatalf("Key() = %q, %v; want %v", got, gotErr, refused)
			}
		case want == nil && malformed:
			if got != nil || gotErr != ErrMalformedBody {
				t.Fatalf("Key() = %q, %v; want nil, ErrMalformedBody", got, gotErr)
			}
		case want == nil:
			if got != nil || gotErr != nil {
				t.Fatalf("Key() = %q, %v; want nil, nil", got, gotErr)
			}
		case loose:
			if gotErr != ErrKeyNotUTF8 && gotErr != ErrKeyTooLong {
				t.Fatalf("Key() = %q, %v; want ErrKeyNotUTF8 or ErrKeyTooLong (reference %q)", got, gotErr, want)
			}
		case len(want) > fuzzMaxLen:
			if gotErr != ErrKeyTooLong || !bytes.Equal(got, want[:fuzzMaxLen]) {
				t.Fatalf("Key() = %q, %v; want %q, ErrKeyTooLong", got, gotErr, want[:fuzzMaxLen])
			}
		default:
			if wantErr := refValidate(want); gotErr != wantErr || !bytes.Equal(got, want) {
				t.Fatalf("Key() = %q, %v; want %q, %v", got, gotErr, want, wantErr)
			}
		}
	})
}

// refKey is the reference for FuzzExtractKey: the first non-empty value of
// sources; loose reports a JSON string with raw invalid UTF-8 in it;
// malformed reports that a JSON source met a body that claims to be JSON and
// is not; refused is ErrDuplicateMember when a JSON source consulted met a
// member named twice on its path or in the value it leads to, and
// ErrDuplicateField when a header, query or form source consulted reads a
// field given more than once.
func refKey(t *testing.T, sources []Source, r MapRequest) (key []byte, loose, malformed bool, refused error) {
	validBody := refValidJSON(r.RawBody)
	claimsJSON := len(r.RawBody) > 0 && !validBody && isJSONMediaType(r.ContentType())
	value := func(k, name string) ([]byte, bool) {
		var vs []string
		switch k {
		case KindHeader:
			vs = refHeader(r, name)
		case KindQuery:
			vs = refQuery(r, name)
		case KindForm:
			vs = refFormValues(r, name)
		case KindJSON:
			if !validBody {
				malformed = malformed || claimsJSON
				return nil, false
			}
			v, bad, d := refJSONPath(t, r.RawBody, strings.Split(name, "."))
			if d {
				refused = ErrDuplicateMember
			}
			return v, bad
		default:
			t.Fatalf("reference: kind %q", k)
		}
		if len(vs) > 1 {
			refused = ErrDuplicateField
		}
		if len(vs) == 0 {
			return nil, false
		}
		return []byte(vs[0]), false
	}
	for _, s := range sources {
		if s.Kind != KindTemplate {
			v, bad := value(s.Kind, s.Arg)
			if refused != nil {
				return nil, false, false, refused
			}
			if len(v) > 0 {
				return v, bad, malformed, nil
			}
			continue
		}
		// The fuzz templates are "{kind:name}" parts joined by literals
		// made of '-' and ':'. With two placeholders or more, '%' and the
		// first byte of each literal after a placeholder are escaped in
		// the values as %XX (see Template).
		escape := ""
		if strings.Count(s.Arg, "{") > 1 {
			escape = "%"
			for _, lit := range strings.Split(s.Arg, "}")[1:] {
				if lit != "" && lit[0] != '{' {
					escape += lit[:1]
				}
			}
		}
		var out []byte
		anyBad := false
		rest := s.Arg
		for rest != "" {
			if rest[0] != '{' {
				out = append(out, rest[0])
				rest = rest[1:]
				continue
			}
			end := strings.IndexByte(rest, '}')
			k, name, _ := strings.Cut(rest[1:end], ":")
			rest = rest[end+1:]
			v, bad := value(k, name)
			if refused != nil {
				return nil, false, false, refused
			}
			if len(v) == 0 {
				out = nil
				break
			}
			anyBad = anyBad || bad
			for _, c := range v {
				if strings.IndexByte(escape, c) >= 0 {
					out = append(out, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
				} else {
					out = append(out, c)
				}
			}
		}
		if out != nil {
			return out, anyBad, malformed, nil
		}
	}
	return nil, false, malformed, nil
}

// refHeader is every value of the header name in r, in order.
func refHeader(r MapRequest, name string) []string {
	for k, vs := range r.HeaderLists {
		if strings.EqualFold(k, name) {
			return vs
		}
	}
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			return []string{v}
		}
	}
	return nil
}

// refQuery is every value of the query parameter name in r, in order.
func refQuery(r MapRequest, name string) []string {
	if vs, ok := r.QueryLists[name]; ok {
		return vs
	}
	if v, ok := r.QueryArgs[name]; ok {
		return []string{v}
	}
	return nil
}

// refHash is what refFieldsHash finds: the key, when exact; whether any
// field has a value; malformed as for refKey; dup whether a JSON field
// meets a member named twice, rep whether a header, query or form field
// is given more than once.
type refHash struct {
	key                                string
	exact, valued, malformed, dup, rep bool
}

// refFieldsHash is the reference for a fields_hash source (the fuzz lists
// hold plain JSON paths and "#." followed by a plain name): the encoding of
// Fingerprinter.Fingerprint's fields mode, written out with encoding/json
// and net/url, under the key's domain. exact is false where encoding/json
// would not tell values apart that the gateway does (invalid UTF-8,
// escaped surrogates).
func refFieldsHash(t *testing.T, list string, r MapRequest) refHash {
	var h refHash
	validBody := refValidJSON(r.RawBody)
	h.exact = !validBody || utf8.Valid(r.RawBody) && !strings.Contains(strings.ToLower(string(r.RawBody)), `\ud`)
	chunk := func(enc []byte, s string) []byte {
		return append(binary.BigEndian.AppendUint64(enc, uint64(len(s))), s...)
	}
	text := func(enc []byte, v string, present bool) []byte {
		if !present {
			return append(enc, 0)
		}
		h.valued = h.valued || v != ""
		return chunk(append(enc, 1), v)
	}
	texts := func(enc []byte, vs []string) []byte {
		if len(vs) < 2 {
			return text(enc, strings.Join(vs, ""), len(vs) == 1)
		}
		h.rep = true
		enc = binary.BigEndian.AppendUint64(append(enc, 4), uint64(len(vs)))
		for _, v := range vs {
			h.valued = h.valued || v != ""
			enc = chunk(enc, v)
		}
		return enc
	}
	enc := []byte("hookstamp key fields_hash v1\n")
	for _, spec := range strings.Split(list, ",") {
		spec = strings.TrimSpace(spec)
		enc = chunk(enc, spec)
		kind, name, _ := strings.Cut(spec, ":")
		switch kind {
		case KindHeader:
			enc = texts(enc, refHeader(r, name))
		case KindQuery:
			enc = texts(enc, refQuery(r, name))
		case KindForm:
			enc = texts(enc, refFormValues(r, name))
		case KindJSON:
			if !validBody {
				h.malformed = h.malformed || len(r.RawBody) > 0 && isJSONMediaType(r.ContentType())
				enc = append(enc, 0)
				continue
			}
			var raw []byte
			var found bool
			if elem, ok := strings.CutPrefix(name, "#."); ok {
				h.dup = h.dup || refDuplicateIn(r.RawBody, true)
				raw, found = refEach(r.RawBody, elem)
			} else {
				_, _, d := refJSONPath(t, r.RawBody, strings.Split(name, "."))
				h.dup = h.dup || d
				raw, found = refJSONRaw(r.RawBody, strings.Split(name, "."))
			}
			if !found {
				enc = append(enc, 0)
				continue
			}
			var v any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("reference: %v", err)
			}
			switch x := v.(type) {
			case string:
				enc = text(enc, x, true)
			case map[string]any:
				h.valued = h.valued || len(x) > 0
				enc = append(append(enc, 3), refCanon(raw)...)
			case []any:
				h.valued = h.valued || len(x) > 0
				enc = append(append(enc, 3), refCanon(raw)...)
			default:
				h.valued = h.valued || x != nil
				enc = chunk(append(enc, 2), string(bytes.TrimSpace(raw)))
			}
		default:
			t.Fatalf("reference: kind %q", kind)
		}
	}
	sum := sha256.Sum256(enc)
	h.key = hex.EncodeToString(sum[:])
	return h
}

// refJSONRaw follows plain object keys (the first of duplicates) and array
// indexes through raw and returns the value found, as written.
func refJSONRaw(raw []byte, path []string) ([]byte, bool) {
	for _, seg := range path {
		var next []byte
		found := false
		switch bytes.TrimSpace(raw)[0] {
		case '{':
			var members []struct {
				k string
				v json.RawMessage
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.Token()
			for dec.More() {
				k, _ := dec.Token()
				var m json.RawMessage
				dec.Decode(&m)
				members = append(members, struct {
					k string
					v json.RawMessage
				}{k.(string), m})
			}
			for _, m := range members {
				if m.k == seg {
					next, found = m.v, true
					break
				}
			}
		case '[':
			var elems []json.RawMessage
			json.Unmarshal(raw, &elems)
			if i, err := strconv.Atoi(seg); err == nil && strconv.Itoa(i) == seg && i >= 0 && i < len(elems) {
				next, found = elems[i], true
			}
		}
		if !found {
			return nil, false
		}
		raw = next
	}
	return raw, true
}

// refEach is GJSON's "#.NAME" for a plain NAME: the array of each
// element's NAME, for the elements that have one; absent when raw is not
// an array.
func refEach(raw []byte, name string) ([]byte, bool) {
	if bytes.TrimSpace(raw)[0] != '[' {
		return nil, false
	}
	var elems []json.RawMessage
	json.Unmarshal(raw, &elems)
	var vals [][]byte
	for _, e := range elems {
		if v, ok := refJSONRaw(e, strings.Split(name, ".")); ok {
			vals = append(vals, v)
		}
	}
	return append(append([]byte("["), bytes.Join(vals, []byte(","))...), ']'), true
}

// refCanon is appendTree's canonical encoding of the valid JSON value raw,
// built from encoding/json's tokens.
func refCanon(raw []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	chunk := func(tag byte, s string) []byte {
		return append(binary.BigEndian.AppendUint64([]byte{tag}, uint64(len(s))), s...)
	}
	var value func() []byte
	value = func() []byte {
		tok, _ := dec.Token()
		switch v := tok.(type) {
		case json.Delim:
			var out []byte
			if v == '[' {
				var items [][]byte
				for dec.More() {
					items = append(items, value())
				}
				out = binary.BigEndian.AppendUint64([]byte{'a'}, uint64(len(items)))
				out = append(out, bytes.Join(items, nil)...)
			} else {
				members := map[string][]byte{}
				var names []string
				for dec.More() {
					k, _ := dec.Token()
					m := value()
					if _, dup := members[k.(string)]; !dup {
						members[k.(string)] = m
						names = append(names, k.(string))
					}
				}
				slices.Sort(names)
				out = binary.BigEndian.AppendUint64([]byte{'o'}, uint64(len(names)))
				for _, n := range names {
					out = append(append(out, chunk(0, n)[1:]...), members[n]...)
				}
			}
			dec.Token()
			return out
		case string:
			return chunk('s', v)
		case json.Number:
			return chunk('n', string(v))
		case bool:
			return chunk('n', strconv.FormatBool(v))
		}
		return chunk('n', "null")
	}
	return value()
}

func isLowerHex(b []byte, n int) bool {
	if len(b) != n {
		return false
	}
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// refValidJSON: encoding/json's validity, and nesting within MaxJSONDepth
// counted from the decoder's tokens.
func refValidJSON(b []byte) bool {
	if len(b) == 0 || !json.Valid(b) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > MaxJSONDepth {
				return false
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// refJSONPath follows plain object keys (the first of duplicates, as gjson
// does) and array indexes; loose reports raw invalid UTF-8 in the string
// found, dup a key named twice in an object on the path (counting keys
// spelled in another case, refFoldName) or anywhere in the value found
// (spelled alike).
func refJSONPath(t *testing.T, raw []byte, path []string) (v []byte, loose, dup bool) {
	raw = bytes.TrimSpace(raw)
	if len(path) == 0 {
		if refDuplicateIn(raw, false) {
			return nil, false, true
		}
		switch raw[0] {
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("reference: %v", err)
			}
			return []byte(s), !utf8.Valid(raw) || refUnpairedSurrogate(raw), false
		case 't', 'f', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return raw, false, false
		}
		return nil, false, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, _ := dec.Token()
	switch tok {
	case json.Delim('{'):
		var first json.RawMessage
		n := 0
		for dec.More() {
			k, _ := dec.Token()
			var m json.RawMessage
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("reference: %v", err)
			}
			switch {
			case k == path[0]:
				if n++; n == 1 {
					first = m
				}
			case refFoldName(k.(string)) == refFoldName(path[0]):
				n = 2 // read by a parser that ignores case
			}
		}
		switch {
		case n > 1:
			return nil, false, true
		case n == 1:
			return refJSONPath(t, first, path[1:])
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			var m json.RawMessage
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("reference: %v", err)
			}
			if path[0] == strconv.Itoa(i) {
				return refJSONPath(t, m, path[1:])
			}
		}
	}
	return nil, false, false
}

// refDuplicateIn reports whether an object in the valid JSON value raw
// names a key twice, by encoding/json's tokens (keys unescaped, compared
// by refFoldName when fold, else as spelled).
func refDuplicateIn(raw []byte, fold bool) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		// In a key's place, '}' closes an empty object.
		if k, isKey := tok.(string); isKey && top != nil && top.object && top.key {
			if fold {
				k = refFoldName(k)
			}
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended: a key follows
		}
	}
}

// refUnpairedSurrogate decodes the \u escapes of a valid raw JSON string
// into UTF-16 code units and reports whether any surrogate is left
// without its pair (which encoding/json silently turns into U+FFFD).
func refUnpairedSurrogate(raw []byte) bool {
	var units []uint16
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			units = append(units, 0) // any non-surrogate unit
			continue
		}
		i++
		if raw[i] != 'u' {
			units = append(units, 0)
			continue
		}
		n, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
		if err != nil {
			panic(err)
		}
		units = append(units, uint16(n))
		i += 4
	}
	for i := 0; i < len(units); i++ {
		r := rune(units[i])
		if !utf16.IsSurrogate(r) {
			continue
		}
		if i+1 < len(units) && utf16.DecodeRune(r, rune(units[i+1])) != unicode.ReplacementChar {
			i++
			continue
		}
		return true
	}
	return false
}

// refFormValues: the values of name that net/url.ParseQuery finds in the
// first MaxFormFields pairs of a form body.
func refFormValues(r MapRequest, name string) []string {
	ct, _, _ := strings.Cut(r.Headers["Content-Type"], ";")
	if !strings.EqualFold(strings.TrimSpace(ct), "application/x-www-form-urlencoded") {
		return nil
	}
	body := string(r.RawBody)
	if n := strings.Count(body, "&"); n >= MaxFormFields {
		parts := strings.SplitN(body, "&", MaxFormFields+1)
		body = strings.Join(parts[:MaxFormFields], "&")
	}
	vals, _ := url.ParseQuery(body)
	return vals[name]
}

// refValidate: the key rules written with the unicode package.
func refValidate(key []byte) error {
	switch {
	case len(key) == 0:
		return ErrKeyEmpty
	case !utf8.Valid(key):
		return ErrKeyNotUTF8
	}
	for _, r := range string(key) {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ErrKeyControl
		}
	}
	if strings.TrimPrefix(strings.TrimSuffix(string(key), " "), " ") != string(key) {
		return ErrKeySpace
	}
	return nil
}

// FuzzFormField checks the allocation-free form scanner against
// net/url.ParseQuery: for any body of at most MaxFormFields pairs (whether
// or not ParseQuery reports an error for some pair) and any name, the
// scanner finds the field's values exactly as ParseQuery has them, in
// order; and decoding with a limit gives a prefix of the full value,
// reporting tooLong exactly when the value is longer than the limit.
func FuzzFormField(f *testing.F) {
	f.Add("a=1&b=2", "b", uint16(10))
	f.Add("k=a%20b+c&k=second", "k", uint16(3))
	f.Add("k=%zz&k=ok", "k", uint16(10))
	f.Add("k=a;b&k=c", "k", uint16(10))
	f.Add("notify%5Fid=x&&k", "notify_id", uint16(0))
	f.Add("%=&=%41", "", uint16(1))
	f.Add("a+b=c", "a b", uint16(5))
	f.Fuzz(func(t *testing.T, body, name string, limit uint16) {
		if strings.Count(body, "&") >= MaxFormFields {
			return
		}
		vals, _ := url.ParseQuery(body)
		want := vals[name]
		raw, n := formCount([]byte(body), name)
		if n != len(want) {
			t.Fatalf("formCount(%q, %q) = %d values, ParseQuery has %d", body, name, n, len(want))
		}
		var all []string
		ff := formField{body: []byte(body), name: name}
		for v, ok := ff.next(); ok; v, ok = ff.next() {
			u, _ := appendUnescaped(nil, v, len(v))
			all = append(all, string(u))
		}
		if !slices.Equal(all, want) {
			t.Fatalf("formField(%q, %q) values %q, ParseQuery %q", body, name, all, want)
		}
		if n == 0 {
			return
		}
		got, st := appendUnescaped(nil, raw, len(raw))
		if string(got) != want[0] || (st == absent) != (want[0] == "") || st == tooLong {
			t.Fatalf("formCount(%q, %q) first = %q (%d), ParseQuery = %q", body, name, got, st, want[0])
		}
		dst := []byte("prefix")
		cut, st := appendUnescaped(dst, raw, len(dst)+int(limit))
		full := want[0]
		if !strings.HasPrefix(full, string(cut[len(dst):])) || !bytes.HasPrefix(cut, dst) {
			t.Fatalf("appendUnescaped(%q, limit %d) = %q, not a prefix of %q", raw, limit, cut, full)
		}
		if (st == tooLong) != (len(full) > int(limit)) || (st == found) != (full != "" && len(full) <= int(limit)) {
			t.Fatalf("appendUnescaped(%q, limit %d) status %d, value %d bytes", raw, limit, st, len(full))
		}
		if st != tooLong && len(cut) != len(dst)+len(full) {
			t.Fatalf("appendUnescaped(%q, limit %d) = %q, want all of %q", raw, limit, cut, full)
		}
	})
}

// FuzzValidateKey checks ValidateKey against refValidate: an accepted key is
// non-empty, within maxLen bytes (when maxLen > 0), valid UTF-8 and free of
// control characters (unicode.IsControl, U+2028, U+2029); a rejected one
// gets the error for the first rule it breaks, in that order.
func FuzzValidateKey(f *testing.F) {
	f.Add([]byte("evt_1"), 255)
	f.Add([]byte("a\r\nb"), 255)
	f.Add([]byte("a\u0085b"), 255)
	f.Add([]byte("a\xffb"), 255)
	f.Add([]byte("\u2028"), 0)
	f.Add([]byte("long key"), 3)
	f.Add([]byte(""), 1)
	f.Fuzz(func(t *testing.T, key []byte, maxLen int) {
		want := refValidate(key)
		if want != ErrKeyEmpty && maxLen > 0 && len(key) > maxLen {
			want = ErrKeyTooLong
		}
		if got := ValidateKey(key, maxLen); got != want {
			t.Fatalf("ValidateKey(%q, %d) = %v, want %v", key, maxLen, got, want)
		}
	})
}

// FuzzValidJSON checks the body check JSON sources rely on against
// encoding/json: validJSON accepts a body exactly when json.Valid does and it
// nests at most MaxJSONDepth deep, and never panics or overflows the stack.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"id":"x"}`, `[1,2.5e3,-0,true,null]`, `{"a":`, `"\ud800"`, `01`, `1.`, "\"\x01\"", `{"a":1,}`, strings.Repeat("[", 2000)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidJSON(b), refValidJSON(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, want %v", b, got, want)
		}
	})
}

// FuzzFingerprintFields checks that the fields encoding is unambiguous and
// ignores only what does not change a field's meaning: two form bodies, or
// two URL queries, encode identically exactly when every configured field
// has the same values in both, in the same order (as net/url.ParseQuery
// reads them; none is absent), and two
// JSON bodies exactly when every configured JSON field has the same
// presence, type and value in both (as encoding/json reads them, numbers
// as written): white space, member order and string escapes do not count.
// A collision would replay a changed delivery's recorded answer instead of
// refusing it (422), a spurious difference would refuse a provider's retry.
func FuzzFingerprintFields(f *testing.F) {
	f.Add("a=1&b=2", "a=1&b=2")
	f.Add("a=12&b=3", "a=1&b=23")
	f.Add("a=&b=1", "b=1")
	f.Add("a=1&b=", "a=&b=1")
	f.Add("a=x+y", "a=x%20y&c=1")
	f.Add(`{"a":{"x":1,"y":[true,null]}}`, `{ "a" : { "y":[ true , null ], "x" :1 } }`)
	f.Add(`{"a":"\u00e9","b":1}`, `{"b":1,"a":"é"}`)
	fp, err := NewFingerprinter(FingerprintFields, []string{"form:a", "form:b", "form:a b"})
	if err != nil {
		f.Fatal(err)
	}
	jfp, err := NewFingerprinter(FingerprintFields, []string{"json:a", "json:b"})
	if err != nil {
		f.Fatal(err)
	}
	qfp, err := NewFingerprinter(FingerprintFields, []string{"query:a", "query:b", "query:a b"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("a=1&a=2", "a=1")
	f.Add("a=1&a=2", "a=2&a=1")
	f.Add("a=ab&a=c", "a=a&a=bc")
	f.Add("items[]=x&b=1&items[]=y", "b=1")
	f.Fuzz(func(t *testing.T, a, b string) {
		jsonEncode := func(body string) []byte {
			return jfp.appendFields(nil, MapRequest{
				Headers: map[string]string{"Content-Type": "application/json"},
				RawBody: []byte(body),
			})
		}
		ca, oka := refJSONFields(a, "a", "b")
		cb, okb := refJSONFields(b, "a", "b")
		if oka && okb {
			if got := bytes.Equal(jsonEncode(a), jsonEncode(b)); got != (ca == cb) {
				t.Fatalf("JSON encodings of %q and %q: equal = %v, want %v (reference %q, %q)", a, b, got, ca == cb, ca, cb)
			}
		}
		if strings.Count(a, "&") >= MaxFormFields || strings.Count(b, "&") >= MaxFormFields {
			return
		}
		encode := func(body string) []byte {
			return fp.appendFields(nil, MapRequest{
				Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
				RawBody: []byte(body),
			})
		}
		va, _ := url.ParseQuery(a)
		vb, _ := url.ParseQuery(b)
		same := true
		for _, name := range []string{"a", "b", "a b"} {
			if !slices.Equal(va[name], vb[name]) {
				same = false
			}
		}
		if got := bytes.Equal(encode(a), encode(b)); got != same {
			t.Fatalf("encodings of %q and %q: equal = %v, want %v", a, b, got, same)
		}
		encodeQuery := func(vals url.Values) []byte {
			return qfp.appendFields(nil, MapRequest{QueryLists: vals})
		}
		if got := bytes.Equal(encodeQuery(va), encodeQuery(vb)); got != same {
			t.Fatalf("query encodings of %q and %q: equal = %v, want %v", a, b, got, same)
		}
	})
}

// FuzzTemplateKeysAreDistinct: two deliveries get the same template key
// only when their values are the same.
func FuzzTemplateKeysAreDistinct(f *testing.F) {
	f.Add("A-1", "PAY", "A", "1-PAY")
	f.Add("a%2D", "b", "a-", "b")
	f.Add("x", "y", "x", "y")
	f.Add("a", "25%", "a%", "25")
	f.Add("%", "5%", "%%", "5")
	// Separators that share characters with the escapes (%XX: '%', hex
	// digits) and with each other.
	var extractors []*Extractor
	for _, tpl := range []string{"{json:a}-{json:b}:{header:X-C}", "{json:a}2{json:b}5{header:X-C}", "{json:a}A{json:b}-%{header:X-C}", "{json:a}::{json:b}:{header:X-C}"} {
		e, err := NewExtractor("r", []Source{{Kind: KindTemplate, Arg: tpl}}, 1<<10)
		if err != nil {
			f.Fatal(err)
		}
		extractors = append(extractors, e)
	}
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		for _, e := range extractors {
			distinct(t, e, a1, b1, a2, b2)
		}
	})
}

// distinct fails when e gives (a1, b1) and (a2, b2) the same key although
// they differ.
func distinct(t *testing.T, e *Extractor, a1, b1, a2, b2 string) {
	key := func(a, b string) ([]byte, bool) {
		body, _ := json.Marshal(map[string]string{"a": a, "b": b})
		k, err := e.Key(MapRequest{HTTPMethod: "POST", Headers: map[string]string{"Content-Type": "application/json", "X-C": a + b},
			RawBody: body}, nil)
		return k, err == nil && k != nil
	}
	k1, ok1 := key(a1, b1)
	k2, ok2 := key(a2, b2)
	if ok1 && ok2 && string(k1) == string(k2) && (a1 != a2 || b1 != b2) {
		t.Fatalf("(%q, %q) and (%q, %q) share the key %q", a1, b1, a2, b2, k1)
	}
}

// refJSONFields is the reference for FuzzFingerprintFields' JSON fields: a
// canonical text of the top-level members names of body, built with
// encoding/json's tokenizer (the first of duplicate names wins, as for
// keys). ok is false where encoding/json would not tell values apart that
// the gateway does: invalid UTF-8 and \u escapes of surrogates, which
// encoding/json turns into U+FFFD.
func refJSONFields(body string, names ...string) (canon string, ok bool) {
	if !utf8.ValidString(body) || strings.Contains(strings.ToLower(body), `\ud`) {
		return "", false
	}
	fields := map[string]string{}
	if refValidJSON([]byte(body)) { // else not JSON: every field is absent
		if !refJSONMembers(body, fields) {
			return "", false
		}
	}
	var b strings.Builder
	for _, n := range names {
		if v, found := fields[n]; found {
			b.WriteString(n + "=" + v + ";")
		} else {
			b.WriteString(n + " absent;")
		}
	}
	return b.String(), true
}

// refJSONMembers fills fields with the canonical text of each top-level
// member of the valid JSON body (the first of duplicates).
func refJSONMembers(body string, fields map[string]string) bool {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var value func() (string, error)
	value = func() (string, error) {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch v := tok.(type) {
		case json.Delim:
			var items []string
			seen := map[string]bool{}
			for dec.More() {
				name := ""
				if v == '{' {
					k, err := dec.Token()
					if err != nil {
						return "", err
					}
					name = k.(string)
				}
				item, err := value()
				if err != nil {
					return "", err
				}
				if v == '{' {
					if seen[name] {
						continue
					}
					seen[name] = true
					item = strconv.Quote(name) + ":" + item
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return "", err
			}
			if v == '{' {
				slices.Sort(items) // quoted names: no name is a prefix of another's quote
				return "{" + strings.Join(items, ",") + "}", nil
			}
			return "[" + strings.Join(items, ",") + "]", nil
		case string:
			return strconv.Quote(v), nil
		case json.Number:
			return "n" + string(v), nil
		case bool:
			return strconv.FormatBool(v), nil
		case nil:
			return "null", nil
		}
		return "", fmt.Errorf("token %T", tok)
	}
	top, err := dec.Token()
	if err != nil {
		return false
	}
	if top == json.Delim('{') {
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return false
			}
			v, err := value()
			if err != nil {
				return false
			}
			if _, dup := fields[k.(string)]; !dup {
				fields[k.(string)] = v
			}
		}
	}
	return true
}

// FuzzJSONOnePass checks the one-pass duplicate scan and tree encoding
// against the gjson ForEach walks they replaced (treeref_test.go), on every
// valid JSON body and on each value in it a path can lead to: the
// duplicate verdicts, the encodings (in users' ledgers as fingerprints and
// fields_hash keys) and whether a tree is empty must be the same.
func FuzzJSONOnePass(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"id":2}`, `{"id":1,"\u0069d":2}`, `{"a":{"b":1,"b":2}}`, `[{"a":1},{"a":1}]`,
		`{"a":[{"x":1}],"b":{"x":1}}`, `{"a":{"x":1},"x":2}`, `{"a\"{":1,"a\\":2,"a\\\"":3}`, `["{\"a\":1,\"a\":1}"]`,
		`{"\ud800":1,"\udbff":2}`, `{"é":1,"\u00e9":2}`, " { \"a\" : [ 1 , { } , [ ] ] , \"b\" : \"\\\\\" } ",
		`{"b":{"y":[true,null,-1.5e3],"x":"\u00e9"},"a":[[],{}],"b":0}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":{"q":1,"q":2},"r":0}`,
		`{"id":1,"ID":2}`, `{"ſ":1,"s":2}`, `{"\u212a":1,"k":2}`, `{"ı":1,"İ":2}`, `{"a\u00e9":1,"A\u00c9":2}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"\u212a":18}`,
		`{"a":{"a":{"a":1}},"b":{"a":1}}`, "[\n  1,\n  {\"a\": [\"b\"]}\n]\n", `"x"`, `12.5e-3`, `null`, `[]`, `{}`,
		strings.Repeat(`[`, 999) + `{"a":1,"a":2}` + strings.Repeat(`]`, 999),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !ValidJSON(body) {
			return
		}
		check := func(res gjson.Result) {
			if got, want := duplicateIn(res.Raw, true), gjsonDuplicateIn(res, MaxJSONDepth); got != want {
				t.Fatalf("duplicateIn(%q) = %v, gjson walk %v", res.Raw, got, want)
			}
			if !res.IsObject() && !res.IsArray() {
				return
			}
			if got, want := appendTree(nil, res.Raw), gjsonAppendTree(nil, res); !bytes.Equal(got, want) {
				t.Fatalf("appendTree(%q)\n = %q\ngjson walk %q", res.Raw, got, want)
			}
			if got, want := emptyTree(res.Raw), gjsonEmptyTree(res); got != want {
				t.Fatalf("emptyTree(%q) = %v, gjson walk %v", res.Raw, got, want)
			}
		}
		res := gjson.ParseBytes(body)
		check(res)
		res.ForEach(func(_, v gjson.Result) bool {
			check(v)
			return true
		})
	})
}
