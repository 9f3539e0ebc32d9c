package extract

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
)

// emptyTree reports whether raw, a valid JSON object or array, has no
// member.
func emptyTree(raw string) bool {
	for i := 1; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\r', '\n':
		default:
			return raw[i] == '}' || raw[i] == ']'
		}
	}
	return true
}

// appendTree appends the canonical encoding of raw, a valid JSON object or
// array nested at most MaxJSONDepth deep: objects with their members
// sorted by key (the first of duplicate keys wins, as for getJSON),
// strings unescaped, every node tagged and length- or count-prefixed so
// that the encoding is unambiguous.
//
// Its cost is linear whatever the nesting: a first pass finds where each
// object and array ends, so that encoding one skips the values inside it
// instead of reading them again.
func appendTree(dst []byte, raw string) []byte {
	var boxBuf [16]box
	var members [16]member
	bs := indexBoxes(boxBuf[:0], raw)
	next := 0
	root, _ := bs.next(raw, 0, &next)
	dst, _ = bs.encode(dst, members[:0], raw, root)
	return dst
}

// box is where an object or array ends.
type box struct {
	end   int // offset just past the closing bracket
	after int // number of the first box opened after this one closes
}

// boxes are the objects and arrays of a tree, numbered in the order they
// open: the first box inside box b, if any, is b+1.
type boxes []box

// indexBoxes appends the boxes of the valid JSON value raw to bs.
func indexBoxes(bs boxes, raw string) boxes {
	var openBuf [32]int
	open := openBuf[:0]
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			i = stringEnd(raw, i) - 1
		case '{', '[':
			open = append(open, len(bs))
			bs = append(bs, box{})
		case '}', ']':
			b := open[len(open)-1]
			open = open[:len(open)-1]
			bs[b] = box{end: i + 1, after: len(bs)}
			if len(open) == 0 {
				return bs
			}
		}
	}
	return bs
}

// member is a value of a tree: raw[start:end], the box numbered box when
// it is an object or array; key is its member name, unescaped.
type member struct {
	key        string
	start, end int
	box        int
}

// next returns the value that starts at or after raw[i] (past white
// space, ',' and ':'), or false at the bracket closing the container.
// *box is the number of the next box to meet; it is moved past the
// value's.
func (bs boxes) next(raw string, i int, box *int) (member, bool) {
	for ; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\r', '\n', ',', ':':
		case '}', ']':
			return member{}, false
		case '"':
			return member{start: i, end: stringEnd(raw, i)}, true
		case '{', '[':
			b := bs[*box]
			m := member{start: i, end: b.end, box: *box}
			*box = b.after
			return m, true
		default:
			return member{start: i, end: scalarEnd(raw, i)}, true
		}
	}
	return member{}, false
}

// scalarEnd returns the offset just past the number, true, false or null
// that starts at raw[i].
func scalarEnd(raw string, i int) int {
	for ; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\r', '\n', ',', ']', '}':
			return i
		}
	}
	return i
}

// encode appends the encoding of v to dst. members holds the members of
// the objects being encoded, each object's after its parent's.
func (bs boxes) encode(dst []byte, members []member, raw string, v member) ([]byte, []member) {
	switch raw[v.start] {
	case '"':
		return appendChunk(append(dst, nodeString), unquote(raw[v.start:v.end])), members
	case '[':
		dst = append(dst, nodeArray)
		count := len(dst)
		dst = binary.BigEndian.AppendUint64(dst, 0)
		n := 0
		for i, box := v.start+1, v.box+1; ; n++ {
			e, ok := bs.next(raw, i, &box)
			if !ok {
				break
			}
			dst, members = bs.encode(dst, members, raw, e)
			i = e.end
		}
		binary.BigEndian.PutUint64(dst[count:], uint64(n))
		return dst, members
	case '{':
		base := len(members)
		for i, box := v.start+1, v.box+1; ; {
			k, ok := bs.next(raw, i, &box)
			if !ok {
				break
			}
			m, _ := bs.next(raw, k.end, &box)
			m.key = unquote(raw[k.start:k.end])
			members = append(members, m)
			i = m.end
		}
		// Sorted by key, then by place: the first of duplicates comes first.
		slices.SortFunc(members[base:], func(a, b member) int {
			return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.start, b.start))
		})
		n := len(slices.CompactFunc(members[base:], func(a, b member) bool { return a.key == b.key }))
		members = members[:base+n]
		dst = binary.BigEndian.AppendUint64(append(dst, nodeObject), uint64(n))
		for j := base; j < base+n; j++ {
			m := members[j]
			dst, members = bs.encode(appendChunk(dst, m.key), members, raw, m)
		}
		return dst, members[:base]
	}
	return appendChunk(append(dst, nodeScalar), raw[v.start:v.end]), members
}
