package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"
)

// maxShown bounds the bytes of a body the event page shows, and
// maxIndented those of a JSON body indented: each level of nesting adds
// its indentation to every line inside it, so that 18 KB of nested
// brackets indent to 162 MB.
const (
	maxShown    = 64 << 10
	maxIndented = 4 * maxShown
)

// bodyView is a request's or answer's body as the page shows it: JSON
// indented, other text as it is, anything else as base64.
type bodyView struct {
	Text   string
	Kind   string // "json", "text", "base64" or "" (empty body)
	Size   int
	Capped bool // only the first maxShown bytes are shown
	// Nested: JSON that would indent to more than maxIndented bytes,
	// shown as it is.
	Nested bool
}

func viewBody(b []byte) bodyView {
	v := bodyView{Size: len(b)}
	if len(b) == 0 {
		return v
	}
	if len(b) <= maxShown && json.Valid(b) {
		if !indentFits(b, maxIndented) {
			v.Text, v.Kind, v.Nested = string(b), "text", true
			return v
		}
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			v.Text, v.Kind = out.String(), "json"
			return v
		}
	}
	if len(b) > maxShown {
		b, v.Capped = b[:maxShown], true
		// The cut may split the last character of a text.
		for i := 1; i < utf8.UTFMax && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	if utf8.Valid(b) {
		v.Text, v.Kind = string(b), "text"
		return v
	}
	v.Text, v.Kind = base64.StdEncoding.EncodeToString(b), "base64"
	return v
}

// indentFits reports whether json.Indent(dst, b, "", "  ") writes at most
// limit bytes, b being valid JSON, without writing them: it counts what
// json.Indent adds (a newline and two spaces a level after an opening
// bracket that is not empty, after a comma and before a closing bracket;
// a space after a colon). Space outside strings counts as kept, so that
// the count is exact for compact JSON and too high otherwise.
func indentFits(b []byte, limit int) bool {
	n, depth := 0, 0
	inString, escaped, opened := false, false, false
	for _, c := range b {
		if inString {
			n++
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			if n > limit {
				return false
			}
			continue
		}
		if opened && c != '}' && c != ']' && !isSpace(c) {
			opened = false
			depth++
			n += 1 + 2*depth
		}
		switch c {
		case '{', '[':
			opened = true
			n++
		case ',':
			n += 2 + 2*depth
		case ':':
			n += 2
		case '}', ']':
			if opened {
				opened = false
			} else {
				depth--
				n += 1 + 2*depth
			}
			n++
		case '"':
			inString = true
			n++
		default:
			n++
		}
		if n > limit {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
