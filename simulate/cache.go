package simulate

import (
	"fmt"
	"math/bits"
	"unsafe"
)

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

// MaxCachePages bounds the cache capacity: 2^28 pages (1 TiB of 4 KiB
// pages). The cache's queue records and node versions are 32-bit.
const MaxCachePages = 1 << 28

func pageKey(file uint32, page uint64) uint64 { return uint64(file)<<40 | page }

// Entry flags.
const (
	flagPrefetched = 1 << iota // read by a prefetch and not demanded yet
	flagReferenced             // 2q: referenced once on the inactive list
	flagActive                 // 2q: on the active list
	flagUsed                   // the entry holds a page
)

// entry is one cached page. Entries never move: the indexes and the
// recency queues refer to them by their position in pageCache.entries.
type entry struct {
	key   uint64 // pageKey(file, page)
	ready int64  // simulated time the page's read completes
	ver   uint32 // bumped whenever the entry is queued again or reused
	flags uint8
}

// qrec is a recency queue record: entry idx as of version ver. A record
// whose version no longer matches its entry is stale and skipped.
type qrec struct {
	idx, ver uint32
}

// queue is a FIFO of records, oldest first: a recency list with lazy
// deletion. Moving an entry to the most recent end appends a record with a
// new version; the old record goes stale where it is.
type queue struct {
	buf        []qrec // ring, len a power of two
	head, tail uint64 // records [head, tail) are queued
	n          int    // live entries on this list
}

func (q *queue) len() int { return int(q.tail - q.head) }

func (q *queue) push(r qrec) {
	if q.len() == len(q.buf) {
		q.grow()
	}
	q.buf[q.tail&uint64(len(q.buf)-1)] = r
	q.tail++
}

//go:noinline
func (q *queue) grow() {
	n := max(2*len(q.buf), 64)
	buf := make([]qrec, n)
	for i := q.head; i < q.tail; i++ {
		buf[i-q.head] = q.buf[i&uint64(len(q.buf)-1)]
	}
	q.buf, q.tail, q.head = buf, q.tail-q.head, 0
}

// pageCache is a fixed-capacity page cache of (file, page) keys.
//
// Entries live in a slice that grows as distinct pages arrive, up to the
// capacity; an evicted page's entry is reused for the page that replaces
// it, so entries never move.
//
// Two indexes map pages to entries. A file whose size is known gets a
// direct table, one 32-bit entry number per page of the file, allocated on
// its first insert, while the tables of all files stay within a budget of
// 16 pages per cache page plus 1 Mi pages (64 bytes per cache page plus
// 4 MiB); a lookup there is one load. Pages of other files, and pages past
// a table's end, go to a bucketed hash index: each bucket holds eight entry
// numbers and one tag byte per slot (seven bits of the key's hash), so a
// probe compares eight tags at once and reads an entry only when its tag
// matches. A hash lookup stops at the first bucket with an empty slot; a
// deleted slot in a bucket that was ever full becomes a tombstone, which
// inserts reuse, and the hash index is rebuilt when tombstones pile up.
//
// Recency is kept in FIFO queues with lazy deletion instead of linked
// lists: a hit appends a record and leaves the old one stale, and eviction
// pops records from the oldest end, skipping stale ones. A miss therefore
// touches the index, the queue (sequentially) and the victim entry, not
// its list neighbours. A queue grown to twice the capacity is compacted.
// Nothing is allocated per lookup, hit, insert or eviction once grown.
type pageCache struct {
	model    CacheModel
	capacity int
	entries  []entry
	inactive queue // the only queue for LRU
	active   queue

	// Direct tables by file id: entry+1 per page, 0 when absent. A nil
	// slot is a file not seen yet; an empty non-nil one a file without a
	// table.
	direct    [][]uint32
	budget    uint64 // pages of direct tables still allowed
	filePages func(uint32) uint64

	// The hash index.
	buckets []bucket
	mask    uint64
	shift   uint8
	hashed  int // entries in the hash index
	tombs   int // tombstone slots in the hash index

	// last is the entry of the last successful lookup, checked first: a
	// demand access and the readahead model's residency check look up the
	// same page in a row.
	last int32

	// onEvict, when set, is called for every evicted entry before it is
	// reused (tests).
	onEvict func(e *entry)
	// wasted counts evicted entries that still had flagPrefetched.
	wasted uint64
}

// maxDirectFile bounds the file ids that may have a direct table.
const maxDirectFile = 1 << 20

// bucket is eight hash index slots: tag bytes (0 empty, 1 tombstone, 0x80
// | seven hash bits used) and entry numbers.
type bucket struct {
	tags uint64
	ids  [8]uint32
}

// Tag bytes.
const (
	tagEmpty = 0x00
	tagTomb  = 0x01
	lsb      = 0x0101010101010101
	msb      = 0x8080808080808080
)

// newPageCache returns a cache of capacity pages. filePages gives the
// size of a file in pages (0 unknown), for the direct tables; nil puts
// every page in the hash index.
func newPageCache(model CacheModel, capacity int, filePages func(uint32) uint64) *pageCache {
	capacity = min(max(capacity, 1), MaxCachePages)
	c := &pageCache{model: model, capacity: capacity, filePages: filePages}
	c.budget = 16*uint64(capacity) + 1<<20
	c.rebuild(8)
	return c
}

func (c *pageCache) len() int { return len(c.entries) }

// hash mixes key (murmur3's finalizer): its top bits select the home
// bucket and its low seven bits are the tag.
func hash(key uint64) uint64 {
	key ^= key >> 33
	key *= 0xff51afd7ed558ccd
	key ^= key >> 33
	key *= 0xc4ceb9fe1a85ec53
	key ^= key >> 33
	return key
}

func tagOf(h uint64) uint64 { return 0x80 | h&0x7f }

// matchTag returns a mask with bit 7 set in each byte of tags equal to
// tag, and possibly in bytes above a match (a borrow): callers check the
// byte with tagAt.
func matchTag(tags, tag uint64) uint64 {
	x := tags ^ tag*lsb
	return (x - lsb) &^ x & msb
}

// tagAt returns the tag byte of slot k.
func tagAt(tags uint64, k int) uint64 { return tags >> (8 * k) & 0xff }

// hasEmpty reports whether tags has an empty byte.
func hasEmpty(tags uint64) bool { return (tags-lsb)&^tags&msb != 0 }

// matchFree returns a mask with bit 7 of each empty or tombstone byte set.
func matchFree(tags uint64) uint64 { return ^tags & msb }

// table returns the direct table of file, deciding on its first use
// whether it gets one.
func (c *pageCache) table(file uint32) []uint32 {
	if file >= maxDirectFile {
		return nil
	}
	if int(file) < len(c.direct) {
		if t := c.direct[file]; t != nil {
			return t
		}
	} else {
		c.direct = append(c.direct, make([][]uint32, int(file)+1-len(c.direct))...)
	}
	t := []uint32{}
	if c.filePages != nil {
		if n := c.filePages(file); n > 0 && n <= c.budget {
			t = make([]uint32, n)
			c.budget -= n
		}
	}
	c.direct[file] = t
	return t
}

// rebuild sizes the hash index to n buckets and re-inserts its entries.
func (c *pageCache) rebuild(n int) {
	if len(c.buckets) == n {
		clear(c.buckets)
	} else {
		c.buckets = make([]bucket, n)
	}
	c.mask = uint64(n - 1)
	c.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	c.tombs, c.hashed = 0, 0
	for i := range c.entries {
		if e := &c.entries[i]; e.flags&flagUsed != 0 && !c.isDirect(e.key) {
			c.hashIndex(hash(e.key), int32(i))
		}
	}
}

// isDirect reports whether key is in a direct table.
func (c *pageCache) isDirect(key uint64) bool {
	file, page := uint32(key>>40), key&maxPage
	return int(file) < len(c.direct) && page < uint64(len(c.direct[file]))
}

// lookup returns the entry of (file, page), or -1. The direct-table case
// is inlined into callers.
func (c *pageCache) lookup(file uint32, page uint64) int32 {
	if int(file) < len(c.direct) {
		if t := c.direct[file]; page < uint64(len(t)) {
			return int32(t[page]) - 1
		}
	}
	return c.lookupHash(file, page)
}

// slot returns the address of the direct-table slot of (file, page), or
// def when it has none.
func (c *pageCache) slot(file uint32, page uint64, def unsafe.Pointer) unsafe.Pointer {
	if int(file) < len(c.direct) {
		if t := c.direct[file]; page < uint64(len(t)) {
			return unsafe.Pointer(&t[page])
		}
	}
	return def
}

// lookupHash is lookup in the hash index.
func (c *pageCache) lookupHash(file uint32, page uint64) int32 {
	key := pageKey(file, page)
	if l := c.last; int(l) < len(c.entries) && c.entries[l].key == key {
		return l
	}
	if c.hashed == 0 {
		return -1
	}
	h := hash(key)
	tag := tagOf(h)
	for b := h >> c.shift; ; b = (b + 1) & c.mask {
		bk := &c.buckets[b]
		for m := matchTag(bk.tags, tag); m != 0; m &= m - 1 {
			k := bits.TrailingZeros64(m) >> 3
			if i := int32(bk.ids[k]); tagAt(bk.tags, k) == tag && c.entries[i].key == key {
				c.last = i
				return i
			}
		}
		if hasEmpty(bk.tags) {
			return -1
		}
	}
}

// hashIndex adds entry i, whose key hashes to h, to the hash index.
func (c *pageCache) hashIndex(h uint64, i int32) {
	for b := h >> c.shift; ; b = (b + 1) & c.mask {
		bk := &c.buckets[b]
		if m := matchFree(bk.tags); m != 0 {
			k := bits.TrailingZeros64(m) >> 3
			if tagAt(bk.tags, k) == tagTomb {
				c.tombs--
			}
			bk.tags = bk.tags&^(0xff<<(8*k)) | tagOf(h)<<(8*k)
			bk.ids[k] = uint32(i)
			c.hashed++
			return
		}
	}
}

// hashUnindex deletes entry i, whose key hashes to h, from the hash index.
// A slot in a bucket without an empty slot becomes a tombstone: lookups of
// keys that overflowed past the bucket must keep probing.
func (c *pageCache) hashUnindex(i int32, h uint64) {
	tag := tagOf(h)
	for b := h >> c.shift; ; b = (b + 1) & c.mask {
		bk := &c.buckets[b]
		for m := matchTag(bk.tags, tag); m != 0; m &= m - 1 {
			k := bits.TrailingZeros64(m) >> 3
			if bk.ids[k] != uint32(i) || tagAt(bk.tags, k) != tag {
				continue
			}
			var t uint64 = tagEmpty
			if !hasEmpty(bk.tags) {
				t = tagTomb
				c.tombs++
			}
			bk.tags = bk.tags&^(0xff<<(8*k)) | t<<(8*k)
			c.hashed--
			return
		}
	}
}

// unindex deletes entry i from its index.
func (c *pageCache) unindex(i int32) {
	key := c.entries[i].key
	file, page := uint32(key>>40), key&maxPage
	if int(file) < len(c.direct) {
		if t := c.direct[file]; page < uint64(len(t)) {
			t[page] = 0
			return
		}
	}
	c.hashUnindex(i, hash(key))
}

// index adds entry i, holding (file, page), to its index. Entry i must
// not be marked used yet, so that growing the hash index does not index it
// twice.
func (c *pageCache) index(file uint32, page uint64, i int32) {
	if t := c.table(file); page < uint64(len(t)) {
		t[page] = uint32(i + 1)
		return
	}
	if c.hashed+1 > 2*len(c.buckets) {
		c.rebuild(2 * len(c.buckets))
	}
	c.hashIndex(hash(pageKey(file, page)), i)
}

// queueOf returns the recency queue entry e is on.
func (c *pageCache) queueOf(e *entry) *queue {
	if e.flags&flagActive != 0 {
		return &c.active
	}
	return &c.inactive
}

// enqueue makes entry i the most recent of q.
func (c *pageCache) enqueue(q *queue, i int32) {
	e := &c.entries[i]
	e.ver++
	q.push(qrec{uint32(i), e.ver})
	if q.len() > 2*c.capacity+64 {
		c.compact(q)
	}
}

// isMostRecent reports whether entry i holds the newest record of q.
func (c *pageCache) isMostRecent(q *queue, i int32) bool {
	if q.tail == q.head {
		return false
	}
	r := q.buf[(q.tail-1)&uint64(len(q.buf)-1)]
	return r.idx == uint32(i) && r.ver == c.entries[i].ver
}

// live reports whether r is the current record of its entry.
func (c *pageCache) live(r qrec) bool { return c.entries[r.idx].ver == r.ver }

// compact drops the stale records of q, keeping the order of live ones.
func (c *pageCache) compact(q *queue) {
	m := uint64(len(q.buf) - 1)
	w := q.head
	for r := q.head; r < q.tail; r++ {
		if rec := q.buf[r&m]; c.live(rec) {
			q.buf[w&m] = rec
			w++
		}
	}
	q.tail = w
}

// pop removes and returns the least recent live entry of q, or -1.
func (c *pageCache) pop(q *queue) int32 {
	m := uint64(len(q.buf) - 1)
	for q.head < q.tail {
		r := q.buf[q.head&m]
		q.head++
		if c.live(r) {
			return int32(r.idx)
		}
	}
	return -1
}

// touch records a reference to entry idx.
func (c *pageCache) touch(idx int32) {
	e := &c.entries[idx]
	if c.model == LRU {
		if !c.isMostRecent(&c.inactive, idx) {
			c.enqueue(&c.inactive, idx)
		}
		return
	}
	switch {
	case e.flags&flagActive != 0:
		if !c.isMostRecent(&c.active, idx) {
			c.enqueue(&c.active, idx)
		}
	case e.flags&flagReferenced != 0:
		e.flags = e.flags&^flagReferenced | flagActive
		c.inactive.n--
		c.active.n++
		c.enqueue(&c.active, idx)
		c.balance()
	default:
		e.flags |= flagReferenced
	}
}

// balance demotes the active tail while the active list is over half the
// cache, like Linux's inactive_is_low with an inactive ratio of 1.
func (c *pageCache) balance() {
	for c.active.n > c.capacity/2 {
		t := c.pop(&c.active)
		if t < 0 {
			return
		}
		e := &c.entries[t]
		e.flags &^= flagActive | flagReferenced
		c.active.n--
		c.inactive.n++
		c.enqueue(&c.inactive, t)
	}
}

// insert adds (file, page), which must not be present, evicting the least
// recent page if full, and returns its entry. The entry of the evicted
// page is reused, so entry numbers obtained before an insert may name
// another page after it.
func (c *pageCache) insert(file uint32, page uint64, ready int64, flags uint8) int32 {
	if i := c.replaceDirect(file, page, ready, flags); i >= 0 {
		return i
	}
	return c.insertSlow(file, page, ready, flags)
}

// replaceDirect is insert's common case, kept flat: a full LRU cache
// whose victim, the oldest live record of its queue, and the new page
// both live in direct tables. It returns -1, having changed nothing,
// otherwise.
func (c *pageCache) replaceDirect(file uint32, page uint64, ready int64, flags uint8) int32 {
	if len(c.entries) != c.capacity || c.model != LRU || c.onEvict != nil || int(file) >= len(c.direct) {
		return -1
	}
	t := c.direct[file]
	q := &c.inactive
	if page >= uint64(len(t)) || q.head == q.tail {
		return -1
	}
	m := uint64(len(q.buf) - 1)
	r := q.buf[q.head&m]
	e := &c.entries[r.idx]
	vf, vp := uint32(e.key>>40), e.key&maxPage
	if e.ver != r.ver || int(vf) >= len(c.direct) || vp >= uint64(len(c.direct[vf])) {
		return -1 // stale record or hashed victim: the general path
	}
	q.head++
	if e.flags&flagPrefetched != 0 {
		c.wasted++
	}
	c.direct[vf][vp] = 0
	i := r.idx
	t[page] = i + 1
	e.key, e.ready, e.flags = pageKey(file, page), ready, flags|flagUsed
	e.ver++
	q.push(qrec{i, e.ver})
	if q.len() > 2*c.capacity+64 {
		c.compact(q)
	}
	return int32(i)
}

// insertSlow is insert's general case.
func (c *pageCache) insertSlow(file uint32, page uint64, ready int64, flags uint8) int32 {
	var i int32
	if len(c.entries) == c.capacity {
		i = c.victim()
		e := &c.entries[i]
		if e.flags&flagPrefetched != 0 {
			c.wasted++
		}
		if c.onEvict != nil {
			c.onEvict(e)
		}
		c.queueOf(e).n--
		c.unindex(i)
		e.flags = 0
	} else {
		c.entries = append(c.entries, entry{})
		i = int32(len(c.entries) - 1)
	}
	c.index(file, page, i)
	e := &c.entries[i]
	e.key, e.ready, e.flags = pageKey(file, page), ready, flags|flagUsed
	if c.tombs > len(c.buckets) {
		c.rebuild(len(c.buckets))
	}
	c.inactive.n++
	c.enqueue(&c.inactive, i)
	c.last = i
	return i
}

// victim returns the entry to evict: the inactive tail, or the active tail
// when the inactive list is empty.
func (c *pageCache) victim() int32 {
	if i := c.pop(&c.inactive); i >= 0 {
		return i
	}
	return c.pop(&c.active)
}

// forEach calls fn for every cached entry.
func (c *pageCache) forEach(fn func(e *entry)) {
	for i := range c.entries {
		fn(&c.entries[i])
	}
}
