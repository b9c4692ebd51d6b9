package simulate

import "fmt"

// CacheModel selects the page cache replacement model.
type CacheModel uint8

// Cache models.
const (
	// LRU is a single least-recently-used list.
	LRU CacheModel = iota
	// TwoList is a Linux-like active/inactive pair of lists: new pages
	// enter the inactive list, a second reference promotes a page to the
	// active list, the active list is kept at most half of the cache by
	// demoting its tail, and eviction takes the inactive tail.
	TwoList
)

// String returns the flag spelling of m.
func (m CacheModel) String() string {
	switch m {
	case LRU:
		return "lru"
	case TwoList:
		return "2q"
	}
	return fmt.Sprintf("CacheModel(%d)", uint8(m))
}

// ParseCacheModel parses "lru" or "2q".
func ParseCacheModel(s string) (CacheModel, error) {
	switch s {
	case "lru", "LRU":
		return LRU, nil
	case "2q", "2Q", "active-inactive":
		return TwoList, nil
	}
	return 0, fmt.Errorf("parse cache model %q: want lru or 2q", s)
}

// maxPage bounds page indexes so that a (file, page) pair packs into one
// uint64 key: 2^40 pages of 4 KiB is 4 PiB per file.
const maxPage = 1<<40 - 1

// maxFile bounds file ids for the same packing: 24 + 40 bits.
const maxFile = 1<<24 - 1

func pageKey(file uint32, page uint64) uint64 { return uint64(file)<<40 | page }

// Entry flags.
const (
	flagPrefetched = 1 << iota // read by a prefetch and not demanded yet
	flagReferenced             // 2q: referenced once on the inactive list
	flagActive                 // 2q: on the active list
	flagUsed                   // the slot holds a page
)

// entry is one slot of the cache's open-addressing table. Pages live in the
// table itself, so a lookup touches one cache line; the list links are slot
// indexes and are fixed up when deletion shifts a slot.
type entry struct {
	key   uint64
	ready int64 // simulated time the page's read completes
	prev  int32
	next  int32
	flags uint8
}

// list is an intrusive doubly linked list of entries; head is the most
// recently used end.
type list struct {
	head, tail int32
	n          int
}

// pageCache is a fixed-capacity page cache of (file, page) keys: a linear
// probing table (load at most 1/2) whose slots are the pages. It grows as
// distinct pages arrive, up to twice the capacity in slots, and allocates
// nothing per lookup, insert or eviction once grown.
type pageCache struct {
	model    CacheModel
	capacity int
	entries  []entry // the table; flagUsed marks occupied slots
	n        int
	mask     uint64
	shift    uint8
	inactive list // the only list for LRU
	active   list
	// lastSlot is the slot of the last successful lookup, checked
	// first: a demand access and the readahead model's residency check
	// look up the same page in a row. A key is in at most one slot, so a
	// used slot holding the key is its slot, whatever moved since.
	lastSlot int32

	// onEvict, when set, is called for every evicted entry before its
	// slot is reused (tests).
	onEvict func(e *entry)
	// wasted counts evicted entries that still had flagPrefetched.
	wasted uint64
}

func newPageCache(model CacheModel, capacity int) *pageCache {
	if capacity < 1 {
		capacity = 1
	}
	c := &pageCache{model: model, capacity: capacity}
	c.inactive = list{head: -1, tail: -1}
	c.active = list{head: -1, tail: -1}
	c.resize(64)
	return c
}

func (c *pageCache) len() int { return c.n }

// resize rebuilds the table with size slots, keeping both lists in order.
func (c *pageCache) resize(size int) {
	old := c.entries
	oldInactive, oldActive := c.inactive, c.active
	c.entries = make([]entry, size)
	c.mask = uint64(size - 1)
	bits := 0
	for 1<<bits < size {
		bits++
	}
	c.shift = uint8(64 - bits)
	c.n = 0
	c.inactive = list{head: -1, tail: -1}
	c.active = list{head: -1, tail: -1}
	// Re-insert from the tail so that pushFront restores the order.
	for _, l := range []struct {
		from list
		to   *list
	}{{oldInactive, &c.inactive}, {oldActive, &c.active}} {
		for i := l.from.tail; i >= 0; i = old[i].prev {
			e := old[i]
			j := c.place(e.key)
			c.entries[j] = entry{key: e.key, ready: e.ready, flags: e.flags, prev: -1, next: -1}
			c.pushFront(l.to, j)
			c.n++
		}
	}
}

// hash is Fibonacci hashing of the packed key.
func (c *pageCache) hash(key uint64) uint64 {
	return key * 0x9E3779B97F4A7C15 >> c.shift
}

// place returns the free slot where key goes.
func (c *pageCache) place(key uint64) int32 {
	h := c.hash(key)
	for c.entries[h].flags&flagUsed != 0 {
		h = (h + 1) & c.mask
	}
	return int32(h)
}

// lookup returns the slot of key, or -1.
func (c *pageCache) lookup(key uint64) int32 {
	if e := &c.entries[c.lastSlot]; e.key == key && e.flags&flagUsed != 0 {
		return c.lastSlot
	}
	h := c.hash(key)
	for {
		e := &c.entries[h]
		if e.flags&flagUsed == 0 {
			return -1
		}
		if e.key == key {
			c.lastSlot = int32(h)
			return int32(h)
		}
		h = (h + 1) & c.mask
	}
}

// remove unlinks slot i and deletes it from the table by backward-shift
// deletion, moving later slots of its cluster back and fixing their links.
func (c *pageCache) remove(i int32) {
	c.unlink(c.listOf(&c.entries[i]), i)
	c.n--
	for {
		c.entries[i] = entry{}
		j := i
		for {
			j = int32((uint64(j) + 1) & c.mask)
			e := &c.entries[j]
			if e.flags&flagUsed == 0 {
				return
			}
			home := int32(c.hash(e.key))
			// e stays unless its home lies cyclically outside (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				c.move(j, i)
				i = j
				break
			}
		}
	}
}

// move copies slot from into the free slot to and repoints its neighbours.
func (c *pageCache) move(from, to int32) {
	e := c.entries[from]
	c.entries[to] = e
	l := c.listOf(&e)
	if e.prev >= 0 {
		c.entries[e.prev].next = to
	} else {
		l.head = to
	}
	if e.next >= 0 {
		c.entries[e.next].prev = to
	} else {
		l.tail = to
	}
}

func (c *pageCache) listOf(e *entry) *list {
	if e.flags&flagActive != 0 {
		return &c.active
	}
	return &c.inactive
}

func (c *pageCache) unlink(l *list, idx int32) {
	e := &c.entries[idx]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	l.n--
}

func (c *pageCache) pushFront(l *list, idx int32) {
	e := &c.entries[idx]
	e.prev = -1
	e.next = l.head
	if l.head >= 0 {
		c.entries[l.head].prev = idx
	} else {
		l.tail = idx
	}
	l.head = idx
	l.n++
}

// touch records a reference to entry idx.
func (c *pageCache) touch(idx int32) {
	e := &c.entries[idx]
	if c.model == LRU {
		if c.inactive.head != idx {
			c.unlink(&c.inactive, idx)
			c.pushFront(&c.inactive, idx)
		}
		return
	}
	switch {
	case e.flags&flagActive != 0:
		if c.active.head != idx {
			c.unlink(&c.active, idx)
			c.pushFront(&c.active, idx)
		}
	case e.flags&flagReferenced != 0:
		c.unlink(&c.inactive, idx)
		e.flags = e.flags&^flagReferenced | flagActive
		c.pushFront(&c.active, idx)
		c.balance()
	default:
		e.flags |= flagReferenced
	}
}

// balance demotes the active tail while the active list is over half the
// cache, like Linux's inactive_is_low with an inactive ratio of 1.
func (c *pageCache) balance() {
	for c.active.n > c.capacity/2 && c.active.tail >= 0 {
		t := c.active.tail
		c.unlink(&c.active, t)
		e := &c.entries[t]
		e.flags &^= flagActive | flagReferenced
		c.pushFront(&c.inactive, t)
	}
}

// insert adds key, which must not be present, evicting if full, and returns
// its slot. Slot indexes obtained before an insert are invalid after it.
func (c *pageCache) insert(key uint64, ready int64, flags uint8) int32 {
	if c.n == c.capacity {
		v := c.victim()
		e := &c.entries[v]
		if e.flags&flagPrefetched != 0 {
			c.wasted++
		}
		if c.onEvict != nil {
			c.onEvict(e)
		}
		c.remove(v)
	} else if (c.n+1)*2 > len(c.entries) {
		c.resize(len(c.entries) * 2)
	}
	i := c.place(key)
	c.entries[i] = entry{key: key, ready: ready, flags: flags | flagUsed, prev: -1, next: -1}
	c.pushFront(&c.inactive, i)
	c.n++
	return i
}

// victim returns the entry to evict: the inactive tail, or the active tail
// when the inactive list is empty.
func (c *pageCache) victim() int32 {
	if c.inactive.tail >= 0 {
		return c.inactive.tail
	}
	return c.active.tail
}

// forEach calls fn for every cached entry.
func (c *pageCache) forEach(fn func(e *entry)) {
	for i := range c.entries {
		if c.entries[i].flags&flagUsed != 0 {
			fn(&c.entries[i])
		}
	}
}
