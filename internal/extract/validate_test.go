package extract_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		maxLen int
		want   error
	}{
		{"plain", "evt_1NG8Du2eZvKYlo2C", 255, nil},
		{"spaces and punctuation", `order 1/2:"x"{}`, 255, nil},
		{"unicode", "订单-café-😀", 255, nil},
		{"exactly max", strings.Repeat("a", 255), 255, nil},
		{"no limit", strings.Repeat("a", 10000), 0, nil},
		{"zero-width joiner is not a control", "👩\u200d💻", 255, nil},
		{"empty", "", 255, extract.ErrKeyEmpty},
		{"too long", strings.Repeat("a", 256), 255, extract.ErrKeyTooLong},
		{"too long in bytes, not runes", strings.Repeat("é", 128), 255, extract.ErrKeyTooLong},
		{"NUL", "a\x00b", 255, extract.ErrKeyControl},
		{"TAB", "a\tb", 255, extract.ErrKeyControl},
		{"CR", "a\rb", 255, extract.ErrKeyControl},
		{"LF", "a\nb", 255, extract.ErrKeyControl},
		{"ESC", "a\x1b[31mb", 255, extract.ErrKeyControl},
		{"DEL", "a\x7fb", 255, extract.ErrKeyControl},
		{"C1 NEL", "a\u0085b", 255, extract.ErrKeyControl},
		{"C1 CSI", "a\u009bb", 255, extract.ErrKeyControl},
		{"line separator", "a\u2028b", 255, extract.ErrKeyControl},
		{"paragraph separator", "a\u2029b", 255, extract.ErrKeyControl},
		{"invalid byte", "a\xffb", 255, extract.ErrKeyNotUTF8},
		{"truncated sequence", "a\xe2\x80", 255, extract.ErrKeyNotUTF8},
		{"overlong encoding", "\xc0\xaf", 255, extract.ErrKeyNotUTF8},
		{"surrogate", "\xed\xa0\x80", 255, extract.ErrKeyNotUTF8},
		{"raw C1 byte is not UTF-8", "a\x85b", 255, extract.ErrKeyNotUTF8},
		{"encoding wins over control", "\n\xff", 255, extract.ErrKeyNotUTF8},
		{"length wins over encoding", "\xff" + strings.Repeat("a", 255), 255, extract.ErrKeyTooLong},
		{"leading space", " evt_1", 255, extract.ErrKeySpace},
		{"trailing space", "evt_1 ", 255, extract.ErrKeySpace},
		{"only a space", " ", 255, extract.ErrKeySpace},
		{"control wins over space", " a\n", 255, extract.ErrKeyControl},
		{"no-break space at the end is not a space", "evt_1\u00a0", 255, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := extract.ValidateKey([]byte(tt.key), tt.maxLen)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Errorf("ValidateKey(%q, %d) = %v, want %v", tt.key, tt.maxLen, err, tt.want)
			}
		})
	}
}
