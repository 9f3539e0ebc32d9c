package extract

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// Template builds a key from several request values, e.g.
// "{json:order_id}-{json:event}-{json:seq}". Placeholders are
// {header:NAME}, {json:PATH}, {form:NAME}, {query:NAME}, {route} and
// {method}; any other text is literal. There is no escape for literal braces:
// '{' always opens a placeholder and '}' always closes one.
//
// A template yields a key only when every placeholder resolves to a
// non-empty value.
//
// Distinct events must not share a key: with "{json:order}-{json:event}",
// order "A-1" + event "PAY" and order "A" + event "1-PAY" would both give
// "A-1-PAY". So when a template has two placeholders or more, each value
// is escaped before it is joined: '%' and the first character of every
// separator (the text after a placeholder) are written as %XX, uppercase
// hex. Values without those characters — the usual ids, codes and
// sequence numbers — are joined as they are, and the key stays readable.
// Such a template needs text between any two placeholders, and that text
// must start with an ASCII character other than '%' (escaping one byte of
// a multi-byte character would break the value's UTF-8, and a separator's
// '%' could not be told from an escape's).
type Template struct {
	parts []ref
	// escape is the set of bytes escaped in placeholder values; nil when
	// the template has a single placeholder (its value is whatever lies
	// between the fixed text around it: nothing to escape).
	escape *[256]bool
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
	placeholders := 0
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
			if n := len(t.parts); n > 0 && t.parts[n-1].kind != kindLiteral {
				return nil, fmt.Errorf("placeholder at offset %d follows another with no text between them: their values could not be told apart", i)
			}
			placeholders++
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
	if placeholders > 1 {
		t.escape = &[256]bool{'%': true}
		for j := 1; j < len(t.parts); j++ {
			if p := t.parts[j]; p.kind == kindLiteral && t.parts[j-1].kind != kindLiteral {
				if p.arg[0] >= utf8.RuneSelf {
					return nil, fmt.Errorf("the text %q after a placeholder must start with an ASCII character: it separates values", p.arg)
				}
				if p.arg[0] == '%' {
					return nil, fmt.Errorf("the text %q after a placeholder must not start with '%%': it could not be told from an escaped value", p.arg)
				}
				t.escape[p.arg[0]] = true
			}
		}
	}
	return t, nil
}

// parsePlaceholder parses the text between braces.
func parsePlaceholder(body string) (ref, error) {
	name, arg, hasArg := strings.Cut(body, ":")
	switch name {
	case "route", "method":
		if hasArg {
			return ref{}, fmt.Errorf("placeholder {%s} takes no name", body)
		}
		if name == "route" {
			return ref{kind: kindRoute}, nil
		}
		return ref{kind: kindMethod}, nil
	case "":
		if !hasArg {
			return ref{}, errors.New("empty placeholder {}")
		}
	}
	k := namedKind(name)
	if k == kindLiteral {
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
	case k == kindHeader && !httpguts.ValidHeaderFieldName(name):
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
		mark := len(dst)
		dst, st = l.appendValue(dst, p, limit)
		// A value cut at limit (tooLong) is escaped too: the key logged
		// for it is the real one cut there.
		if t.escape != nil && p.kind != kindLiteral && st != absent {
			var ok bool
			if dst, ok = escapeFrom(dst, mark, t.escape, limit); !ok {
				st = tooLong
			}
		}
		// A bad part is reported once every placeholder resolved: a
		// template with an absent part yields no key at all, and the next
		// source is tried. Past the limit, dst stays cut there and the
		// parts left are only looked up (a present one is tooLong again).
		switch st {
		case absent:
			return dst[:start], absent
		case duplicate, repeated:
			return dst, st
		case tooLong:
			res = tooLong
		case notUTF8:
			if res != tooLong {
				res = notUTF8
			}
		}
	}
	return dst, res
}

// escapeFrom writes the bytes of dst[from:] that are in set as %XX, in
// place (dst grows within its capacity when it can: no allocation). It
// reports false when the escaped value would not fit within limit; dst then
// holds the escaped value cut at limit, so that a key refused as too long
// is logged as the start of the real key (SPEC §7), not as the raw values
// joined, which the escaping exists to tell apart.
func escapeFrom(dst []byte, from int, set *[256]bool, limit int) ([]byte, bool) {
	n := 0
	for _, c := range dst[from:] {
		if set[c] {
			n++
		}
	}
	if n == 0 {
		return dst, true
	}
	end := len(dst)
	grown := end + 2*n
	fits := grown <= limit
	if !fits {
		// Escape only the bytes that reach limit: the last may overshoot
		// it by two, cut below.
		end, grown = from, from
		for end < len(dst) && grown < limit {
			if set[dst[end]] {
				grown += 2
			}
			end++
			grown++
		}
	}
	dst = slices.Grow(dst[:end], grown-end)[:grown]
	const hexDigits = "0123456789ABCDEF"
	w := grown
	for r := end - 1; r >= from; r-- {
		c := dst[r]
		if set[c] {
			w -= 3
			dst[w], dst[w+1], dst[w+2] = '%', hexDigits[c>>4], hexDigits[c&15]
		} else {
			w--
			dst[w] = c
		}
	}
	if !fits {
		return dst[:min(grown, limit)], false
	}
	return dst, true
}
