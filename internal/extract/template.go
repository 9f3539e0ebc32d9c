package extract

import (
	"errors"
	"fmt"
	"strings"
)

// Template builds a key from several request values, e.g.
// "{json:order_id}-{json:event}-{json:seq}". Placeholders are
// {header:NAME}, {json:PATH}, {form:NAME}, {query:NAME}, {route} and
// {method}; any other text is literal. There is no escape for literal braces:
// '{' always opens a placeholder and '}' always closes one.
//
// A template yields a key only when every placeholder resolves to a
// non-empty value. Values are concatenated as they are, so the literal
// separators should be characters the values cannot contain.
type Template struct {
	parts []ref
}

// ParseTemplate compiles a template. It rejects unbalanced braces, unknown
// placeholders, placeholders without a name (or {route} and {method} with
// one), names with surrounding spaces, invalid header names, and templates
// without any {header}, {json}, {form} or {query} placeholder: a key made
// only of constants would merge every delivery of the route into one record.
func ParseTemplate(s string) (*Template, error) {
	t, err := parseTemplate(s)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", s, err)
	}
	return t, nil
}

func parseTemplate(s string) (*Template, error) {
	if s == "" {
		return nil, errors.New("empty template")
	}
	t := &Template{}
	fromRequest := false
	for i := 0; i < len(s); {
		switch s[i] {
		case '}':
			return nil, fmt.Errorf("unexpected '}' at offset %d", i)
		case '{':
			j := strings.IndexAny(s[i+1:], "{}")
			if j < 0 {
				return nil, fmt.Errorf("unclosed '{' at offset %d", i)
			}
			end := i + 1 + j
			if s[end] == '{' {
				return nil, fmt.Errorf("'{' inside the placeholder opened at offset %d", i)
			}
			p, err := parsePlaceholder(s[i+1 : end])
			if err != nil {
				return nil, err
			}
			if p.kind != kindRoute && p.kind != kindMethod {
				fromRequest = true
			}
			t.parts = append(t.parts, p)
			i = end + 1
		default:
			j := strings.IndexAny(s[i:], "{}")
			if j < 0 {
				j = len(s) - i
			}
			t.parts = append(t.parts, ref{kind: kindLiteral, arg: s[i : i+j]})
			i += j
		}
	}
	if !fromRequest {
		return nil, errors.New("no {header:…}, {json:…}, {form:…} or {query:…} placeholder: every delivery would get the same key")
	}
	return t, nil
}

// parsePlaceholder parses the text between braces.
func parsePlaceholder(body string) (ref, error) {
	name, arg, hasArg := strings.Cut(body, ":")
	var k kind
	switch name {
	case "route", "method":
		if hasArg {
			return ref{}, fmt.Errorf("placeholder {%s} takes no name", body)
		}
		if name == "route" {
			return ref{kind: kindRoute}, nil
		}
		return ref{kind: kindMethod}, nil
	case KindHeader:
		k = kindHeader
	case KindJSON:
		k = kindJSON
	case KindForm:
		k = kindForm
	case KindQuery:
		k = kindQuery
	case "":
		if !hasArg {
			return ref{}, errors.New("empty placeholder {}")
		}
		fallthrough
	default:
		return ref{}, fmt.Errorf("unknown placeholder {%s} (want header, json, form, query, route or method)", body)
	}
	if !hasArg {
		return ref{}, fmt.Errorf("placeholder {%s} needs a name, as in {%s:NAME}", body, body)
	}
	if err := checkName(k, arg); err != nil {
		return ref{}, fmt.Errorf("placeholder {%s}: %w", body, err)
	}
	return ref{kind: k, arg: arg}, nil
}

// checkName validates the argument of a header, json, form or query
// reference.
func checkName(k kind, name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case strings.TrimSpace(name) != name:
		return errors.New("name has surrounding spaces")
	case k == kindHeader && !isToken(name):
		return fmt.Errorf("invalid header name %q", name)
	}
	return nil
}

// String returns the template as it was written.
func (t *Template) String() string {
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case kindLiteral:
			b.WriteString(p.arg)
		case kindRoute, kindMethod:
			b.WriteString("{" + p.kind.String() + "}")
		default:
			b.WriteString("{" + p.kind.String() + ":" + p.arg + "}")
		}
	}
	return b.String()
}

// appendTo appends the template's value to dst (growing to at most limit
// bytes). When a placeholder is absent, dst is returned unchanged.
func (t *Template) appendTo(dst []byte, l *lookup, limit int) ([]byte, status) {
	start := len(dst)
	res := found
	for _, p := range t.parts {
		var st status
		dst, st = l.appendValue(dst, p, limit)
		switch st {
		case absent:
			return dst[:start], absent
		case tooLong:
			return dst, tooLong
		case notUTF8:
			// Reported once every placeholder resolved: a template
			// with an absent part yields no key at all.
			res = notUTF8
		}
	}
	return dst, res
}
