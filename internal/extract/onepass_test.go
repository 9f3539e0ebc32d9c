package extract

import (
	"strings"
	"testing"
)

func TestDuplicateIn(t *testing.T) {
	many := func(last string) string { // 17 members, then last
		var b strings.Builder
		b.WriteString("{")
		for c := 'a'; c <= 'q'; c++ {
			b.WriteString(`"` + string(c) + `":0,`)
		}
		return b.String() + last + "}"
	}
	deep := func(inner string) string {
		return strings.Repeat("[", 998) + inner + strings.Repeat("]", 998)
	}
	tests := []struct {
		raw  string
		want bool
	}{
		{`{"id":1,"id":2}`, true},
		{`{"id":1,"\u0069d":2}`, true},
		{`{"\u0069d":1,"i\u0064":2}`, true},
		{`{"id":1,"iD":2}`, false},
		{`{"a":{"x":1},"x":2}`, false},
		{`{"a":{"x":1},"b":{"x":1}}`, false},
		{`[{"x":1},{"x":1}]`, false},
		{`{"a":[{"x":1,"x":2}]}`, true},
		{`{"a":"x","b":"x"}`, false},
		{`{"a":{"b":1},"a":2}`, true},
		{`{"a\"":1,"a":2}`, false},
		{`{"a\\":1,"a\\":2}`, true},
		{`{"a":"{\"b\":1,\"b\":2}"}`, false},
		{`{"a":"[","a":"]"}`, true},
		{many(`"r":0`), false},
		{many(`"a":0`), true},
		{many(`"q":0`), true},
		{many(`"r":{"a":0,"r":0},"s":0`), false},
		{deep(`{"a":1,"a":2}`), true},
		{deep(`{"a":1,"b":2}`), false},
		{`"x"`, false},
		{`1`, false},
	}
	for _, tt := range tests {
		if got := duplicateIn(tt.raw); got != tt.want {
			t.Errorf("duplicateIn(%.60q) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}
