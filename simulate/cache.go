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
	flagRAMark                 // PG_readahead: demand here triggers async readahead
	flagReferenced             // 2q: referenced once on the inactive list
	flagActive                 // 2q: on the active list
)

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

// slot is one position of the open-addressing index. Keeping the key next
// to the entry index makes a hit one memory access.
type slot struct {
	key uint64
	idx int32 // entry index + 1; 0 is empty
}

// pageCache is a fixed-capacity page cache of (file, page) keys with an
// open-addressing index. It allocates as distinct pages arrive, never more
// than capacity entries, and nothing per lookup.
type pageCache struct {
	model    CacheModel
	capacity int
	entries  []entry
	table    []slot
	mask     uint64
	shift    uint8
	inactive list // the only list for LRU
	active   list

	// onEvict, when set, is called for every evicted entry before its
	// slot is reused (tests).
	onEvict func(e *entry)
	// wasted counts evicted entries that still had flagPrefetched.
	wasted uint64
	// evictions counts evictions; an index looked up earlier is still
	// valid while it has not changed.
	evictions uint64
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

func (c *pageCache) len() int { return len(c.entries) }

func (c *pageCache) resize(size int) {
	c.table = make([]slot, size)
	c.mask = uint64(size - 1)
	bits := 0
	for 1<<bits < size {
		bits++
	}
	c.shift = uint8(64 - bits)
	for i := range c.entries {
		c.place(int32(i))
	}
}

// hash is Fibonacci hashing of the packed key.
func (c *pageCache) hash(key uint64) uint64 {
	return key * 0x9E3779B97F4A7C15 >> c.shift
}

func (c *pageCache) place(idx int32) {
	key := c.entries[idx].key
	h := c.hash(key)
	for c.table[h].idx != 0 {
		h = (h + 1) & c.mask
	}
	c.table[h] = slot{key: key, idx: idx + 1}
}

// lookup returns the entry index of key, or -1.
func (c *pageCache) lookup(key uint64) int32 {
	h := c.hash(key)
	for {
		s := &c.table[h]
		if s.idx == 0 {
			return -1
		}
		if s.key == key {
			return s.idx - 1
		}
		h = (h + 1) & c.mask
	}
}

// unindex removes key's slot from the table by backward-shift deletion.
func (c *pageCache) unindex(key uint64) {
	h := c.hash(key)
	for {
		s := c.table[h]
		if s.idx == 0 {
			return
		}
		if s.key == key {
			break
		}
		h = (h + 1) & c.mask
	}
	i := h
	for {
		c.table[i] = slot{}
		j := i
		for {
			j = (j + 1) & c.mask
			s := c.table[j]
			if s.idx == 0 {
				return
			}
			home := c.hash(s.key)
			// Move s back to i unless its home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				c.table[i] = s
				i = j
				break
			}
		}
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
// its index.
func (c *pageCache) insert(key uint64, ready int64, flags uint8) int32 {
	var idx int32
	if len(c.entries) < c.capacity {
		idx = int32(len(c.entries))
		c.entries = append(c.entries, entry{key: key, ready: ready, flags: flags, prev: -1, next: -1})
		if len(c.entries)*4 > len(c.table) {
			c.resize(len(c.table) * 2) // load <= 1/4; places every entry, idx included
		} else {
			c.place(idx)
		}
	} else {
		idx = c.victim()
		v := &c.entries[idx]
		c.evictions++
		if v.flags&flagPrefetched != 0 {
			c.wasted++
		}
		if c.onEvict != nil {
			c.onEvict(v)
		}
		c.unindex(v.key)
		c.unlink(c.listOf(v), idx)
		*v = entry{key: key, ready: ready, flags: flags, prev: -1, next: -1}
		c.place(idx)
	}
	c.pushFront(&c.inactive, idx)
	return idx
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
		fn(&c.entries[i])
	}
}
