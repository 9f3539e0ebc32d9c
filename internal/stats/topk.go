package stats

// topK counts names in at most cap slots with the Space-Saving algorithm
// (Metwally, Agrawal, El Abbadi, 2005): a new name arriving when every slot
// is taken replaces the name with the smallest count and inherits that
// count. Any name whose true count exceeds total/cap is kept, its count
// overestimated by at most the count it inherited; while there are at most
// cap distinct names every count is exact.
type topK struct {
	cap   int
	index map[string]int // name → position in slots
	slots []slot
}

type slot struct {
	name  string
	count int64
}

func newTopK(capacity int) *topK {
	return &topK{cap: capacity, index: make(map[string]int, capacity), slots: make([]slot, 0, capacity)}
}

// add counts n more of name.
func (t *topK) add(name string, n int64) {
	if i, ok := t.index[name]; ok {
		t.slots[i].count += n
		return
	}
	if len(t.slots) < t.cap {
		t.index[name] = len(t.slots)
		t.slots = append(t.slots, slot{name: name, count: n})
		return
	}
	// Full: replace the minimum. A linear scan of cap slots is cheaper
	// than keeping a heap in step for the small capacities used here.
	m := 0
	for i := 1; i < len(t.slots); i++ {
		if t.slots[i].count < t.slots[m].count {
			m = i
		}
	}
	delete(t.index, t.slots[m].name)
	t.index[name] = m
	t.slots[m] = slot{name: name, count: t.slots[m].count + n}
}

// full reports whether every slot is taken: a name not counted yet
// replaces another.
func (t *topK) full() bool { return len(t.slots) >= t.cap }

// reset empties the table for a new bucket, keeping its memory.
func (t *topK) reset() {
	clear(t.index)
	t.slots = t.slots[:0]
}

// addTo sums the table into counts.
func (t *topK) addTo(counts map[string]int64) {
	for _, s := range t.slots {
		counts[s.name] += s.count
	}
}
