package extract

import (
	"bytes"
	"encoding/binary"
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
		{`{"id":1,"iD":2}`, true},
		{`{"success":1,"ſuccess":2}`, true},
		{`{"key":1,"\u212aey":2}`, true},
		{`{"id":1,"idx":2,"i":3,"d":4}`, false},
		{`{"a":{"x":1},"A":2}`, true},
		{`{"a":{"x":1,"X":2}}`, true},
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
		{many(`"Q":0`), true},
		{many(`"\u0051":0`), true},
		{many(`"ſ":0,"S":0`), true},
		{many(`"K":0,"\u212a":0`), true},
		{many(`"qq":0,"Q":0,"é":0,"É":{}`), true},
		{many(`"Aa":0,"é":0,"ſs":0`), false},
		{many(`"r":{"a":0,"r":0},"s":0`), false},
		{deep(`{"a":1,"a":2}`), true},
		{deep(`{"a":1,"b":2}`), false},
		{`"x"`, false},
		{`1`, false},
	}
	for _, tt := range tests {
		if got := duplicateIn(tt.raw, true); got != tt.want {
			t.Errorf("duplicateIn(%.60q) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}

func TestAppendTree(t *testing.T) {
	count := func(tag byte, n int) string { return string(binary.BigEndian.AppendUint64([]byte{tag}, uint64(n))) }
	chunk := func(s string) string { return string(appendChunk(nil, s)) }
	tests := []struct{ raw, want string }{
		{`[]`, count('a', 0)},
		{` { } `[1:], count('o', 0)},
		{`[1, true,null ,"x"]`, count('a', 4) + "n" + chunk("1") + "n" + chunk("true") + "n" + chunk("null") + "s" + chunk("x")},
		// Sorted by unescaped name, the first of a name wins, strings unescaped.
		{`{"b":"\u00e9","a":[-1.5e3,{}],"\u0062":2}`,
			count('o', 2) + chunk("a") + count('a', 2) + "n" + chunk("-1.5e3") + count('o', 0) + chunk("b") + "s" + chunk("é")},
		{`[[[1]],[2],3]`, count('a', 3) + count('a', 1) + count('a', 1) + "n" + chunk("1") + count('a', 1) + "n" + chunk("2") + "n" + chunk("3")},
		{`{"b":[[1]],"a":[{"c":2}]}`, count('o', 2) + chunk("a") + count('a', 1) + count('o', 1) + chunk("c") + "n" + chunk("2") +
			chunk("b") + count('a', 1) + count('a', 1) + "n" + chunk("1")},
		{"{\"a\":{\"y\":1,\"x\":[[]]}}\n", count('o', 1) + chunk("a") + count('o', 2) + chunk("x") + count('a', 1) + count('a', 0) + chunk("y") + "n" + chunk("1")},
	}
	for _, tt := range tests {
		if got := appendTree(nil, tt.raw); !bytes.Equal(got, []byte(tt.want)) {
			t.Errorf("appendTree(%q)\n = %q\nwant %q", tt.raw, got, tt.want)
		}
	}
}
