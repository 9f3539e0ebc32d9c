package extract

import (
	"encoding/binary"
	"slices"
	"sort"

	"github.com/tidwall/gjson"
)

// The duplicate scan and tree encoding as they were up to 2026-12: one
// gjson ForEach per level, so each level re-read its whole subtree. They
// are kept as the reference the one-pass versions must agree with: the
// encoding is in users' ledgers (fingerprints, fields_hash keys). The
// scan compares names by refFoldName since names that differ only in
// case count as duplicates.

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
			name := refFoldName(k.Str)
			switch {
			case seen != nil:
				_, dup = seen[name]
				seen[name] = struct{}{}
			case slices.Contains(names, name):
				dup = true
			case len(names) < len(small):
				names = append(names, name)
			default:
				seen = make(map[string]struct{}, 2*len(small))
				for _, n := range names {
					seen[n] = struct{}{}
				}
				seen[name] = struct{}{}
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

func gjsonEmptyTree(res gjson.Result) bool {
	empty := true
	res.ForEach(func(_, _ gjson.Result) bool {
		empty = false
		return false
	})
	return empty
}

func gjsonAppendTree(dst []byte, res gjson.Result) []byte {
	switch {
	case res.IsObject():
		type member struct {
			key string
			val gjson.Result
		}
		var members []member
		seen := make(map[string]struct{})
		res.ForEach(func(k, v gjson.Result) bool {
			if _, dup := seen[k.Str]; !dup {
				seen[k.Str] = struct{}{}
				members = append(members, member{k.Str, v})
			}
			return true
		})
		sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
		dst = binary.BigEndian.AppendUint64(append(dst, nodeObject), uint64(len(members)))
		for _, m := range members {
			dst = gjsonAppendTree(appendChunk(dst, m.key), m.val)
		}
		return dst
	case res.IsArray():
		n := 0
		res.ForEach(func(_, _ gjson.Result) bool {
			n++
			return true
		})
		dst = binary.BigEndian.AppendUint64(append(dst, nodeArray), uint64(n))
		res.ForEach(func(_, v gjson.Result) bool {
			dst = gjsonAppendTree(dst, v)
			return true
		})
		return dst
	case res.Type == gjson.String:
		return appendChunk(append(dst, nodeString), res.Str)
	}
	return appendChunk(append(dst, nodeScalar), res.Raw)
}
