package extract

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalidKey is matched (errors.Is) by every key validation error: the
// delivery's outcome is invalid_key (400).
var ErrInvalidKey = errors.New("invalid key")

// Key validation errors; each one matches ErrInvalidKey.
var (
	ErrKeyEmpty   = fmt.Errorf("%w: empty", ErrInvalidKey)
	ErrKeyTooLong = fmt.Errorf("%w: longer than the maximum length", ErrInvalidKey)
	ErrKeyNotUTF8 = fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	ErrKeyControl = fmt.Errorf("%w: contains a control character", ErrInvalidKey)
	ErrKeySpace   = fmt.Errorf("%w: begins or ends with a space", ErrInvalidKey)
)

// ValidateKey reports whether key may identify a record. Keys are
// attacker-controlled and end up in logs, response headers, admin URLs and
// span attributes, so a key must be non-empty, at most maxLen bytes (no limit
// when maxLen <= 0), valid UTF-8, and free of control characters: C0
// (U+0000–U+001F, which includes TAB, CR, LF and NUL), DEL (U+007F), C1
// (U+0080–U+009F, which includes NEL) and the line and paragraph separators
// U+2028 and U+2029, which terminal and JavaScript log viewers treat as line
// breaks. Other characters, inner spaces included, are allowed; a space at
// either end is not: the key travels upstream in route.key_header, and an
// HTTP field value cannot begin or end with one (RFC 9110 §5.5), so " a" and
// "a" would be two records sent with one Idempotency-Key.
//
// Checks run in that order; the first that fails names the error.
func ValidateKey(key []byte, maxLen int) error {
	if len(key) == 0 {
		return ErrKeyEmpty
	}
	if maxLen > 0 && len(key) > maxLen {
		return ErrKeyTooLong
	}
	return validateChars(key)
}

// validateChars checks encoding then characters; an invalid encoding wins
// over a control character wherever each occurs.
func validateChars(key []byte) error {
	control := false
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				control = true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(key[i:])
		if r == utf8.RuneError && size == 1 {
			return ErrKeyNotUTF8
		}
		if isControlRune(r) {
			control = true
		}
		i += size
	}
	if control {
		return ErrKeyControl
	}
	if key[0] == ' ' || key[len(key)-1] == ' ' {
		return ErrKeySpace
	}
	return nil
}

func isControlRune(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029
}
