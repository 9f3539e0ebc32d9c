package verify

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/hookstamp/hookstamp/internal/extract"
)

// Placeholders of a signed-content template.
const (
	PartBody   = "body"   // the raw body
	PartURL    = "url"    // Inputs.URL (verify.url)
	PartSecret = "secret" // Inputs.Secret, the secret being tried
	PartHeader = "header" // {header:NAME}: the header's one value
	PartJSON   = "json"   // {json:PATH}: a scalar of the JSON body
	PartForm   = "form"   // {form:NAME}: a decoded form parameter; {form:sorted}: every one
)

// formSorted is the argument of {form:sorted}: every form parameter, sorted
// by name, each written as its decoded name followed by its decoded value
// (Twilio's rule).
const formSorted = "sorted"

// maxTemplateLen bounds a template's text: a genuine one is a line.
const maxTemplateLen = 1024

// Template is a parsed signed-content template: the recipe a provider uses
// to build the bytes it signs, such as "v0:{header:X-Zm-Request-Timestamp}:{body}"
// (Zoom) or "{url}{form:sorted}" (Twilio). It is immutable and safe for
// concurrent use.
type Template struct {
	src   string
	parts []part
}

// part is literal text when kind is "", otherwise a placeholder.
type part struct {
	kind string
	arg  string
	lit  []byte
}

// Inputs are the values a template takes from configuration rather than
// from the request.
type Inputs struct {
	// URL is written for {url}: the notification URL as the provider calls
	// it (which a proxy in front of hookstamp may not show).
	URL string
	// Secret is written for {secret}: the secret under test, for providers
	// that sign a text containing their own secret (DingTalk).
	Secret []byte
}

// ParseTemplate parses a signed-content template. Placeholders are {body},
// {url}, {secret}, {header:NAME}, {json:PATH} (a plain GJSON path: dot-
// separated names and array indexes, no wildcards, queries or modifiers),
// {form:NAME} and {form:sorted}; everything else is literal. Braces cannot
// be nested or escaped. A template must contain at least one placeholder
// that depends on the request ({body}, {header:…}, {json:…} or {form:…}):
// otherwise every request would carry the same signature. Errors quote the
// template (which holds no secret) and never a request.
func ParseTemplate(s string) (*Template, error) {
	if s == "" {
		return nil, fmt.Errorf("empty template")
	}
	if len(s) > maxTemplateLen {
		return nil, fmt.Errorf("template longer than %d bytes", maxTemplateLen)
	}
	t := &Template{src: s}
	dynamic := false
	for rest := s; rest != ""; {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, part{lit: []byte(rest)})
			break
		}
		at := len(s) - len(rest) + open
		if rest[open] == '}' {
			return nil, fmt.Errorf("template %q: unbalanced } at offset %d", s, at)
		}
		if open > 0 {
			t.parts = append(t.parts, part{lit: []byte(rest[:open])})
		}
		inner := rest[open+1:]
		end := strings.IndexAny(inner, "{}")
		if end < 0 || inner[end] == '{' {
			return nil, fmt.Errorf("template %q: unclosed { at offset %d", s, at)
		}
		p, err := parsePart(inner[:end])
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", s, err)
		}
		dynamic = dynamic || (p.kind != PartURL && p.kind != PartSecret)
		t.parts = append(t.parts, p)
		rest = inner[end+1:]
	}
	if !dynamic {
		return nil, fmt.Errorf("template %q: no {body}, {header:…}, {json:…} or {form:…}: every request would carry the same signature", s)
	}
	return t, nil
}

func parsePart(in string) (part, error) {
	kind, arg, hasArg := strings.Cut(in, ":")
	switch kind {
	case PartBody, PartURL, PartSecret:
		if hasArg {
			return part{}, fmt.Errorf("{%s} takes no argument", kind)
		}
		return part{kind: kind}, nil
	case PartHeader:
		if !httpguts.ValidHeaderFieldName(arg) {
			return part{}, fmt.Errorf("{header:%s}: not a valid header name", arg)
		}
	case PartJSON:
		if !PlainPath(arg) {
			return part{}, fmt.Errorf("{json:%s}: want a plain path (names and indexes separated by dots)", arg)
		}
	case PartForm:
		if arg == "" {
			return part{}, fmt.Errorf("{form:} needs a parameter name or \"sorted\"")
		}
	default:
		return part{}, fmt.Errorf("unknown placeholder {%s} (want body, url, secret, header:NAME, json:PATH, form:NAME or form:sorted)", in)
	}
	if !hasArg || arg == "" {
		return part{}, fmt.Errorf("{%s:…} needs an argument", kind)
	}
	return part{kind: kind, arg: arg}, nil
}

// PlainPath reports whether path is a plain GJSON path: names of ASCII
// letters, digits, '_' and '-', separated by single dots. Such a path means
// the same to GJSON and to the application's parser, which a path with
// wildcards, queries or escapes might not.
func PlainPath(path string) bool {
	if path == "" || len(path) > 256 {
		return false
	}
	for _, seg := range strings.Split(path, ".") {
		if seg == "" {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
			if !ok {
				return false
			}
		}
	}
	return true
}

// String returns the template as written.
func (t *Template) String() string { return t.src }

// Uses reports whether the template contains a placeholder of kind (one of
// the Part* constants).
func (t *Template) Uses(kind string) bool {
	for _, p := range t.parts {
		if p.kind == kind {
			return true
		}
	}
	return false
}

// Render appends to dst the content r's provider signed. It fails with a
// rejection (an *Error) when r lacks what the template reads or holds it
// ambiguously: a header missing or repeated, a body that is not valid JSON
// or names a member on a {json:…} path twice or in another case, a
// {json:…} value that is an object or array, a form body that does not
// parse or repeats a parameter. A {json:…} path that leads nowhere, or to
// null, writes nothing, as providers sign an absent field as empty
// (Adyen's originalReference).
func (t *Template) Render(dst []byte, r Request, in Inputs) ([]byte, error) {
	var body *bodyView
	for _, p := range t.parts {
		var err error
		switch p.kind {
		case "":
			dst = append(dst, p.lit...)
		case PartBody:
			dst = append(dst, r.Body()...)
		case PartURL:
			dst = append(dst, in.URL...)
		case PartSecret:
			dst = append(dst, in.Secret...)
		case PartHeader:
			var v []byte
			v, err = single(r, p.arg)
			dst = append(dst, v...)
		default:
			if body == nil {
				body = &bodyView{raw: r.Body()}
			}
			dst, err = body.appendPart(dst, p)
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// bodyView parses a form body at most once for one Render.
type bodyView struct {
	raw      []byte
	form     []formParam
	formDone bool
	formErr  error
}

func (b *bodyView) appendPart(dst []byte, p part) ([]byte, error) {
	if p.kind == PartJSON {
		v, err := b.json(p.arg)
		return append(dst, v...), err
	}
	if !b.formDone {
		b.form, b.formErr = parseForm(b.raw)
		b.formDone = true
	}
	if b.formErr != nil {
		return dst, reject("malformed form body: %v", b.formErr)
	}
	if p.arg == formSorted {
		for _, f := range b.form {
			dst = append(dst, f.key...)
			dst = append(dst, f.value...)
		}
		return dst, nil
	}
	for _, f := range b.form {
		if f.key == p.arg {
			return append(dst, f.value...), nil
		}
	}
	return dst, reject("missing form parameter %s", p.arg)
}

// json returns the text of the scalar at path: a string unescaped, a number
// or boolean as written, nothing for null or an absent member.
func (b *bodyView) json(path string) ([]byte, error) {
	res, err := jsonAt(b.raw, path)
	if err != nil {
		return nil, err
	}
	switch res.Type {
	case gjson.Null:
		return nil, nil
	case gjson.String:
		return []byte(res.Str), nil
	case gjson.JSON:
		return nil, reject("%s is not a string, number or boolean", path)
	}
	return []byte(res.Raw), nil
}

// DuplicateOnPath reports whether body, valid JSON, names a member of an
// object on the plain path more than once ({"id":1,"id":2}), or in
// another case ({"id":1,"ID":2}, or {"ID":2} alone: see
// extract.Ambiguous). GJSON reads the first exact name, most application
// parsers the last, and some of them any case: what was verified would
// not be what the application reads.
func DuplicateOnPath(body []byte, path string) bool {
	res := gjson.ParseBytes(body)
	for _, seg := range strings.Split(path, ".") {
		if res.IsObject() && extract.Ambiguous(res, seg) {
			return true
		}
		if res = res.Get(seg); !res.Exists() {
			return false
		}
	}
	return false
}
