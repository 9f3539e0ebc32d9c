package console

import (
	"fmt"
	"html/template"
	"strings"
	"unicode"
)

// A key is the provider's text, and may hold characters that show
// nothing or turn the text around: RLI "evt_9" PDI looks like evt_9, and
// RLO reverses what follows it. The pages write such characters out.

// hidden are the characters a key shows as their code: format characters
// (bidi controls, zero-width ones), controls, line and paragraph
// separators, other characters that show nothing, and spaces other than
// the space.
var hidden = []*unicode.RangeTable{unicode.Cf, unicode.Cc, unicode.Zl, unicode.Zp, unicode.Zs,
	unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector}

func shownAsCode(r rune) bool { return r != ' ' && unicode.IsOneOf(hidden, r) }

func code(r rune) string {
	if r > 0xffff {
		return fmt.Sprintf(`\U%08x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// keyHTML is key for a page: isolated from the text around it (<bdi>),
// each hidden character written as its code in a span of its own.
func keyHTML(key string) template.HTML {
	var b strings.Builder
	b.WriteString(`<bdi class="key">`)
	start := 0
	for i, r := range key {
		if !shownAsCode(r) {
			continue
		}
		b.WriteString(template.HTMLEscapeString(key[start:i]))
		b.WriteString(`<span class="hidden-char">` + code(r) + `</span>`)
		start = i + len(string(r))
	}
	b.WriteString(template.HTMLEscapeString(key[start:]))
	b.WriteString(`</bdi>`)
	return template.HTML(b.String())
}

// keyText is key for plain text (a page's title): each hidden character
// written as its code.
func keyText(key string) string {
	var b strings.Builder
	for _, r := range key {
		if shownAsCode(r) {
			b.WriteString(code(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
