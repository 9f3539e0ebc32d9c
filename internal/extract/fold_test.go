package extract

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// caseLinks are the runes a parser that ignores case may take r for:
// encoding/json folds (bytes.EqualFold), Json.NET upper-cases, Java
// lower-cases.
func caseLinks(r rune) []rune {
	return []rune{unicode.SimpleFold(r), unicode.ToUpper(r), unicode.ToLower(r), unicode.ToTitle(r)}
}

// refRoots maps each rune that caseLinks ties to another, through any
// number of steps, to the smallest rune so tied: the reference for
// SameName, found by union-find over every rune.
var refRoots = sync.OnceValue(func() map[rune]rune {
	parent := make([]rune, unicode.MaxRune+1)
	for r := range parent {
		parent[r] = rune(r)
	}
	root := func(r rune) rune {
		for parent[r] != r {
			parent[r] = parent[parent[r]]
			r = parent[r]
		}
		return r
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		for _, l := range caseLinks(r) {
			a, b := root(r), root(l)
			if a > b {
				a, b = b, a
			}
			parent[b] = a
		}
	}
	roots := map[rune]rune{}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if x := root(r); x != r {
			roots[r] = x
		}
	}
	return roots
})

// refFoldName is name with each rune (U+FFFD for invalid UTF-8) replaced
// by its refRoots root.
func refFoldName(name string) string {
	roots := refRoots()
	var b strings.Builder
	for _, r := range name {
		if x, ok := roots[r]; ok {
			r = x
		}
		b.WriteRune(r)
	}
	return b.String()
}

// foldRune gives every rune tied to another the same rune, and never the
// rune of another tie: foldRune(a) == foldRune(b) exactly when a and b are
// tied, for every pair of runes.
func TestFoldRuneEveryRune(t *testing.T) {
	roots := refRoots()
	root := func(r rune) rune {
		if x, ok := roots[r]; ok {
			return x
		}
		return r
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		f := foldRune(r)
		if root(f) != root(r) {
			t.Fatalf("foldRune(%U) = %U, which is not tied to it", r, f)
		}
		for _, l := range caseLinks(r) {
			if foldRune(l) != f {
				t.Fatalf("foldRune(%U) = %U, foldRune(%U) = %U; want them equal", r, f, l, foldRune(l))
			}
			if !SameName(string(r), string(l)) && utf8.ValidRune(r) {
				t.Fatalf("SameName(%q, %q) = false", r, l)
			}
		}
	}
}

func TestSameName(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"id", "id", true},
		{"id", "ID", true},
		{"notificationItems", "NotificationItems", true},
		{"success", "ſuccess", true}, // U+017F folds to s
		{"SUCCESS", "ſuccess", true}, // and upper-cases to S
		{"key", "\u212aey", true},    // the Kelvin sign folds to k
		{"id", "ıd", true},           // U+0131 upper-cases to I
		{"id", "İd", true},           // U+0130 lower-cases to i
		{"straße", "STRASSE", false}, // ß is SS only under full case mapping
		{"σ", "ς", true},             // Greek sigma, final sigma
		{"é", "É", true},
		{"a\xffb", "a\xfeb", true}, // invalid UTF-8 is U+FFFD to encoding/json
		{"a\xffb", "a\ufffdb", true},
		{"id", "idx", false},
		{"amount", "amountValue", false},
		{"a_b", "a-b", false},
		{"@", "`", false}, // 0x40 and 0x60 differ in case bit only
		{"[", "{", false},
		{"", "", true},
		{"", "a", false},
		{"\u212a", "\u212a\u212a", false},
	}
	for _, tt := range tests {
		if got := SameName(tt.a, tt.b); got != tt.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := SameName(tt.b, tt.a); got != tt.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
		if got := foldName(tt.a) == foldName(tt.b); got != tt.want {
			t.Errorf("foldName(%q) == foldName(%q) is %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// encoding/json fills a field from every member whose name SameName
// takes for the field's, the last one winning: what a body naming both
// would mean to a Go application.
func TestSameNameCoversEncodingJSON(t *testing.T) {
	var v struct {
		Success string `json:"success"`
		Key     string `json:"key"`
		Items   string `json:"notificationItems"`
	}
	body := `{"success":"true","ſuccess":"false","key":"a","\u212aey":"b","notificationItems":"c","NotificationItems":"d"}`
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Success != "false" || v.Key != "b" || v.Items != "d" {
		t.Fatalf("json.Unmarshal read %+v, want the last of each pair", v)
	}
	for _, p := range [][2]string{{"success", "ſuccess"}, {"key", "\u212aey"}, {"notificationItems", "NotificationItems"}} {
		if !SameName(p[0], p[1]) {
			t.Errorf("SameName(%q, %q) = false, but encoding/json reads them as one", p[0], p[1])
		}
	}
}

// FuzzSameName's contract: SameName(a, b), the equality of foldName(a) and
// foldName(b) (which keys the names of large objects) and that of the
// references, built rune by rune from the ties of every rune, agree for
// any two strings, valid UTF-8 or not.
func FuzzSameName(f *testing.F) {
	f.Add("notificationItems", "NotificationItems")
	f.Add("success", "ſuccess")
	f.Add("key", "\u212aey")
	f.Add("ıd", "İD")
	f.Add("a\xffb", "a\ufffdb")
	f.Add("amount", "amountValue")
	f.Add("@[", "`{")
	f.Fuzz(func(t *testing.T, a, b string) {
		want := refFoldName(a) == refFoldName(b)
		if got := SameName(a, b); got != want {
			t.Fatalf("SameName(%q, %q) = %v, want %v", a, b, got, want)
		}
		if got := foldName(a) == foldName(b); got != want {
			t.Fatalf("foldName(%q) == foldName(%q) is %v, want %v", a, b, got, want)
		}
	})
}
