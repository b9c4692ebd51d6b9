package adapters

import (
	"math"
	"slices"
)

// rowidMap holds the table B-tree interior pages (0x05) the program has
// read, decoded: per page its cells' rowid keys and left children in cell
// order, then the right-most pointer with the key math.MaxInt64. It maps a
// rowid to the child page holding it without reading anything.
//
// Entries live in a ring of at most maxRowidEntries, allocated on first
// use and grown as needed; the oldest are overwritten first, but a node a
// descent uses in the older half of the ring is copied to its head, so the
// root and the upper levels, used by every descent, stay. A directory maps
// each page to its latest copy, and remembers pages whose copy was
// overwritten: pages the program read and the adapter may read again.
type rowidMap struct {
	keys  []int64
	kids  []uint32
	head  uint64 // position after the last entry written, counted from the start
	dir   []mapNode
	inUse int // directory entries in use
	max   int // entries at most; 0 means maxRowidEntries (tests lower it)
	tk    []int64
	tc    []uint32
}

func (m *rowidMap) limit() int {
	if m.max > 0 {
		return m.max
	}
	return maxRowidEntries
}

// mapNode locates a page's entries: positions [at, at+n) of the ring.
type mapNode struct {
	page uint32
	n    uint32
	at   uint64
}

const (
	minRowidEntries = 1 << 13
	maxRowidEntries = 1 << 18 // 3 MiB: the level above the leaves of a 1 GB table of 1 KiB rows
	maxNodeEntries  = 1 << 14 // a 64 KiB interior page holds fewer than 9400 cells
	minMapDir       = 1 << 8
	maxMapDir       = 1 << 15 // pages remembered, held or not
	mapProbe        = 32
)

// held reports whether e's entries are still in the ring.
func (m *rowidMap) held(e *mapNode) bool {
	return e.page != 0 && m.head-e.at <= uint64(len(m.keys))
}

func mapHash(page uint32) uint64 { return (uint64(page) * 0x9e3779b97f4a7c15) >> 24 }

// lookup returns the directory entry of page, held or not, nil when the
// map never held it (or forgot it).
func (m *rowidMap) lookup(page uint32) *mapNode {
	if len(m.dir) == 0 || page == 0 {
		return nil
	}
	mask := uint64(len(m.dir) - 1)
	h := mapHash(page)
	for i := range uint64(mapProbe) {
		e := &m.dir[(h+i)&mask]
		if e.page == 0 {
			return nil
		}
		if e.page == page {
			return e
		}
	}
	return nil
}

// dropped reports whether the map held page and overwrote it.
func (m *rowidMap) dropped(page uint32) bool {
	e := m.lookup(page)
	return e != nil && !m.held(e)
}

func (m *rowidMap) entries(e *mapNode) ([]int64, []uint32) {
	at := e.at % uint64(len(m.keys))
	return m.keys[at : at+uint64(e.n)], m.kids[at : at+uint64(e.n)]
}

// child returns the child of page whose subtree holds rowid, ok false when
// the map does not hold page.
func (m *rowidMap) child(page uint32, rowid int64) (uint32, bool) {
	e := m.lookup(page)
	if e == nil || !m.held(e) {
		return 0, false
	}
	keys, kids := m.entries(e)
	// The first key ≥ rowid: a cell's left child holds the rowids up to
	// its key; the right-most pointer's key is math.MaxInt64.
	lo, hi := 0, len(keys)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if keys[mid] < rowid {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	c := kids[lo]
	if m.head-e.at > uint64(len(m.keys))/2 {
		// In use and getting old: copy it to the head.
		m.tk = append(m.tk[:0], keys...)
		m.tc = append(m.tc[:0], kids...)
		m.add(page, m.tk, m.tc)
	}
	return c, true
}

// add records the entries of interior page page: keys and kids have one
// entry per cell, then the right-most pointer. A page held with the same
// entries is left where it is.
func (m *rowidMap) add(page uint32, keys []int64, kids []uint32) {
	n := len(kids)
	if n == 0 || n != len(keys) || n > maxNodeEntries || page == 0 {
		return
	}
	if n > m.limit() {
		return
	}
	if m.keys == nil {
		c := min(minRowidEntries, m.limit())
		m.keys, m.kids = make([]int64, c), make([]uint32, c)
		m.dir = make([]mapNode, minMapDir)
	}
	if e := m.lookup(page); e != nil && m.held(e) && m.head-e.at <= uint64(len(m.keys))/2 {
		if k, c := m.entries(e); slices.Equal(k, keys) && slices.Equal(c, kids) {
			return
		}
	}
	for {
		c := uint64(len(m.keys))
		pos := m.head % c
		if pos+uint64(n) <= c {
			break
		}
		if c < uint64(m.limit()) {
			m.grow() // before the ring first wraps, so positions stay put
			continue
		}
		m.head += c - pos // skip to the ring's start
	}
	at := m.head
	pos := at % uint64(len(m.keys))
	copy(m.keys[pos:], keys)
	copy(m.kids[pos:], kids)
	m.head += uint64(n)
	m.insert(mapNode{page: page, n: uint32(n), at: at})
}

func (m *rowidMap) grow() {
	c := min(2*len(m.keys), m.limit())
	keys, kids := make([]int64, c), make([]uint32, c)
	copy(keys, m.keys)
	copy(kids, m.kids)
	m.keys, m.kids = keys, kids
}

// insert puts e in the directory: over the entry of the same page, else in
// the free entry ending its probe chain, else over the oldest entry no
// longer held. Entries are never removed, so a lookup may stop at the
// first free one.
func (m *rowidMap) insert(e mapNode) {
	if m.inUse >= len(m.dir)/2 && len(m.dir) < maxMapDir {
		m.growDir()
	}
	mask := uint64(len(m.dir) - 1)
	h := mapHash(e.page)
	var reuse *mapNode
	for i := range uint64(mapProbe) {
		x := &m.dir[(h+i)&mask]
		switch {
		case x.page == e.page:
			*x = e
			return
		case x.page == 0:
			*x = e
			m.inUse++
			return
		case !m.held(x) && (reuse == nil || x.at < reuse.at):
			reuse = x
		}
	}
	if reuse == nil {
		reuse = &m.dir[h&mask]
	}
	*reuse = e
}

func (m *rowidMap) growDir() {
	old := m.dir
	m.dir = make([]mapNode, 2*len(old))
	m.inUse = 0
	for i := range old {
		if old[i].page != 0 {
			m.insert(old[i])
		}
	}
}

// tableInteriorKey is the key of a table interior page's right-most
// pointer in the rowid map: every rowid past the last cell's.
const tableInteriorKey = math.MaxInt64
