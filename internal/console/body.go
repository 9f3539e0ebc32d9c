package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"
)

// maxShown bounds the bytes of a body the event page shows.
const maxShown = 64 << 10

// bodyView is a request's or answer's body as the page shows it: JSON
// indented, other text as it is, anything else as base64.
type bodyView struct {
	Text   string
	Kind   string // "json", "text", "base64" or "" (empty body)
	Size   int
	Capped bool // only the first maxShown bytes are shown
}

func viewBody(b []byte) bodyView {
	v := bodyView{Size: len(b)}
	if len(b) == 0 {
		return v
	}
	var out bytes.Buffer
	if len(b) <= maxShown && json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		v.Text, v.Kind = out.String(), "json"
		return v
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
