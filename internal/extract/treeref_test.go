package extract

import (
	"slices"

	"github.com/tidwall/gjson"
)

// The duplicate scan as it was up to 2026-12: one gjson ForEach per
// level, so each level re-read its whole subtree. It is kept as the
// reference the one-pass version must agree with.

func gjsonDuplicateIn(res gjson.Result, depth int) bool {
	if depth == 0 || !res.IsObject() && !res.IsArray() {
		return false
	}
	object := res.IsObject()
	dup := false
	var small [16]string
	names := small[:0]
	var seen map[string]struct{}
	res.ForEach(func(k, v gjson.Result) bool {
		if object {
			switch {
			case seen != nil:
				_, dup = seen[k.Str]
				seen[k.Str] = struct{}{}
			case slices.Contains(names, k.Str):
				dup = true
			case len(names) < len(small):
				names = append(names, k.Str)
			default:
				seen = make(map[string]struct{}, 2*len(small))
				for _, n := range names {
					seen[n] = struct{}{}
				}
				seen[k.Str] = struct{}{}
			}
			if dup {
				return false
			}
		}
		dup = gjsonDuplicateIn(v, depth-1)
		return !dup
	})
	return dup
}
