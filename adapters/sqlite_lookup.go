package adapters

import "encoding/binary"

// Table lookups of an index scan. An index of a rowid table ends each
// record with the row's rowid; a scan through the index (WHERE key BETWEEN
// ...) reads the index leaves in key order and, for each entry, the table
// leaf holding that rowid: random reads when rowids are unrelated to the
// key. When an index leaf is read, its entries' rowids become a lookup
// list, each mapped to the table page that holds it through the table's
// interior pages that the program has read (a rowidMap). The table leaves
// the program then reads give the scan's position in the list, and each
// step emits the next entries' table pages.

// lookupSlots is the number of index pages whose lookup lists a file
// keeps; the least recently used is replaced.
const lookupSlots = 8

// lookupList is the table rows an index page's entries look up, in cell
// order.
type lookupList struct {
	cursor
	page  uint32 // the index page
	table uint32 // root page of the table
	gen   uint32 // 0: free
	used  uint64
	up    link // where the index page sits in its parent's list
	near  bool // the scan came within Ahead of the list's end
	rows  []int64
	pages []uint32 // per row, the first page of its descent the adapter has not parsed: its table leaf once known
	depth []uint8  // per row, the levels its descent went down to pages
	// emLo, emHi are the positions emitted so far (emLo > emHi: none).
	emLo, emHi int32
}

// separators are the rowids of an index interior page's cells: the cell
// after child c holds the index entry between child c's subtree and child
// c+1's, so a scan looks its row up between the two leaves.
type separators struct {
	page uint32
	gen  uint32 // the generation of the page's tracker slot
	used uint64
	rows []int64 // per child but the right-most, the rowid of the cell after it
	ok   []bool  // false where the cell's record spills (its rowid is in the overflow pages)
}

// lookups is a file's lookup state.
type lookups struct {
	lists [lookupSlots]lookupList
	seps  [lookupSlots]separators
	gen   uint32
	clock uint64
	rows  rowidMap
	keys  []int64  // scratch: keys of the table interior page being parsed
	pages []uint32 // scratch: its children
	buf   []byte   // a table interior page read again
	// heights are the leaves' depths of the tables looked up in, learned
	// from the leaves the lookups read.
	heights [lookupSlots]struct {
		table uint32
		depth uint8
	}
	// active is the table an index scan was last looking rows up in, and
	// when (the file's access count).
	active struct {
		table uint32
		at    uint64
	}
	// done is the last scan that came near the end of its list: the next
	// index page of that table, when it follows in its parent, starts in
	// the scan at once.
	done struct {
		table uint32
		up    link
		dir   int
	}
}

// resolve returns, for rowid in the table rooted at root, the first page
// on the way from the root to its leaf that the map does not hold: the
// leaf itself once the interior pages above it are known. With r set, an
// interior page the map held and dropped is read again (the program read
// it before); without, the descent stops there. A cycle or a deeper tree
// stops at maxDepth levels.
func (f *sqliteFile) resolve(root uint32, rowid int64, r *reader) uint32 {
	p, _ := f.descend(root, rowid, r)
	return p
}

// descend is resolve that also returns how many levels it descended: the
// leaves' depth when it reached a leaf.
func (f *sqliteFile) descend(root uint32, rowid int64, r *reader) (uint32, uint8) {
	m := &f.look.rows
	p := root
	for d := range uint8(maxDepth) {
		c, ok := m.child(p, rowid)
		if !ok && r != nil && m.dropped(p) && f.reread(p, r, false) {
			c, ok = m.child(p, rowid)
		}
		if !ok || c == p {
			return p, d
		}
		p = c
	}
	return p, maxDepth
}

// reread reads table interior page p into the map: a page the program
// read before, or with cached one it has not read but that is in the page
// cache (Config.ReadCached).
func (f *sqliteFile) reread(p uint32, r *reader, cached bool) bool {
	l := &f.look
	if l.buf == nil {
		l.buf = make([]byte, f.pageSize)
	}
	if p > f.pages {
		return false
	}
	off := uint64(p-1) * uint64(f.pageSize)
	if cached {
		ok, unsupported := r.readCached(l.buf, off)
		if unsupported {
			f.readCached = false
		}
		if !ok {
			return false
		}
	} else if r.readEarlier(l.buf, off) != nil {
		return false
	}
	h := 0
	if p == 1 {
		h = 100
	}
	pg := l.buf[:f.usable]
	if pg[h] != sqliteTableInterior {
		r.st.Malformed++ // it was one when the program read it
		return false
	}
	if _, _, ok := f.cells(pg, h, p, r.st); !ok {
		return false
	}
	l.rows.add(p, l.keys, l.pages)
	return true
}

// addTableInterior records a table interior page the program read, and
// maps again the rows whose descent stopped at it.
func (f *sqliteFile) addTableInterior(page uint32) {
	l := &f.look
	l.rows.add(page, l.keys, l.pages)
	for i := range l.lists {
		ls := &l.lists[i]
		if ls.gen == 0 {
			continue
		}
		for j, p := range ls.pages {
			if p == page {
				ls.pages[j], ls.depth[j] = f.descend(ls.table, ls.rows[j], nil)
			}
		}
	}
}

// slot returns the list to reuse for index page page: its own, a free
// one, or the least recently used.
func (l *lookups) slot(page uint32) *lookupList {
	var free, lru *lookupList
	for i := range l.lists {
		ls := &l.lists[i]
		switch {
		case ls.gen != 0 && ls.page == page:
			return ls
		case ls.gen == 0:
			if free == nil {
				free = ls
			}
		case lru == nil || ls.used < lru.used:
			lru = ls
		}
	}
	if free != nil {
		return free
	}
	return lru
}

// addIndexLeaf makes the lookup list of index leaf k (its usable bytes in
// pg, header at h) of an index of the table rooted at table. in is where
// the leaf was entered from. When the leaf follows one whose scan came
// near its end, the scan continues here at once.
func (f *sqliteFile) addIndexLeaf(k uint32, pg []byte, h int, table uint32, in link, r *reader, o *output) {
	l := &f.look
	ls := l.slot(k)
	rows := f.indexRowids(ls.rows[:0], pg, h, r.st)
	if len(rows) == 0 {
		return
	}
	rows = l.withSeparators(rows, in, &f.t)
	l.gen++
	if l.gen == 0 {
		l.gen = 1
	}
	l.clock++
	*ls = lookupList{cursor: cursor{last: noLast}, page: k, table: table, gen: l.gen, used: l.clock, up: in,
		rows: rows, pages: ls.pages[:0], depth: ls.depth[:0], emLo: 1, emHi: 0}
	for _, rowid := range rows {
		p, d := f.descend(table, rowid, nil)
		ls.pages, ls.depth = append(ls.pages, p), append(ls.depth, d)
	}
	d := &l.done
	if d.dir == 0 || d.table != table || !f.follows(in, d.up, d.dir) {
		return
	}
	dir := d.dir
	d.dir = 0
	start := int32(0)
	if dir < 0 {
		start = int32(len(rows) - 1)
	}
	ls.last, ls.run = start, int32(dir)*max(f.t.confirm, 1)
	f.emitLookups(ls, start, dir, r, o)
}

// indexRowids appends to rows the rowids of the cells of index leaf pg
// (header at h), in cell order. A cell whose record spills keeps its rowid
// in its overflow pages and is skipped.
func (f *sqliteFile) indexRowids(rows []int64, pg []byte, h int, st *Stats) []int64 {
	n := int(binary.BigEndian.Uint16(pg[h+3:]))
	ptrs := h + 8
	for i := range min(n, maxKids) {
		off := int(binary.BigEndian.Uint16(pg[ptrs+2*i:]))
		if off < ptrs+2*n || off >= len(pg) {
			continue // counted by cells
		}
		p, vl := sqliteVarint(pg[off:])
		if vl == 0 || p > f.local(p, false) || uint64(len(pg)-off-vl) < p {
			continue // the rowid is in the overflow pages, or the cell is malformed
		}
		rowid, ok := sqliteRecordRowid(pg[off+vl : off+vl+int(p)])
		if !ok {
			st.Malformed++
			continue
		}
		rows = append(rows, rowid)
	}
	return rows
}

// withSeparators puts around rows (a leaf's) the rows of the cells of the
// leaf's parent on either side of it, which in is the position of: a scan
// looks them up right before or after the leaf's rows.
func (l *lookups) withSeparators(rows []int64, in link, t *tracker) []int64 {
	sp, c := l.separatorsOf(in, t)
	if sp == nil {
		return rows
	}
	if c < len(sp.rows) && sp.ok[c] {
		rows = append(rows, sp.rows[c])
	}
	if c > 0 && c-1 < len(sp.rows) && sp.ok[c-1] {
		rows = append(rows, 0)
		copy(rows[1:], rows)
		rows[0] = sp.rows[c-1]
	}
	return rows
}

// addSeparators records the rowids of the cells of index interior page k
// (its usable bytes in pg, header at h) whose tracker slot has generation
// gen.
func (f *sqliteFile) addSeparators(k uint32, pg []byte, h int, gen uint32) {
	l := &f.look
	var sp *separators
	for i := range l.seps {
		x := &l.seps[i]
		if x.page == k || x.gen == 0 {
			sp = x
			break
		}
		if sp == nil || x.used < sp.used {
			sp = x
		}
	}
	l.clock++
	*sp = separators{page: k, gen: gen, used: l.clock, rows: sp.rows[:0], ok: sp.ok[:0]}
	n := int(binary.BigEndian.Uint16(pg[h+3:]))
	ptrs := h + 12
	for i := range min(n, maxKids) {
		off := int(binary.BigEndian.Uint16(pg[ptrs+2*i:]))
		var rowid int64
		ok := false
		if off >= ptrs+2*n && off+4 < len(pg) {
			c := pg[off+4:]
			if p, vl := sqliteVarint(c); vl > 0 && p <= f.local(p, false) && uint64(len(c)-vl) >= p {
				rowid, ok = sqliteRecordRowid(c[vl : vl+int(p)])
			}
		}
		sp.rows = append(sp.rows, rowid)
		sp.ok = append(sp.ok, ok)
	}
}

// separatorsOf returns the separators of the index interior page that
// position in is in, and the child index of in among its children.
func (l *lookups) separatorsOf(in link, t *tracker) (*separators, int) {
	s := t.slotAt(in)
	if s == nil {
		return nil, 0
	}
	for i := range l.seps {
		sp := &l.seps[i]
		if sp.gen != in.gen || sp.page != s.page {
			continue
		}
		c := 0
		for _, k := range s.kids[:in.pos] {
			if k.kind == kindNode {
				c++
			}
		}
		l.clock++
		sp.used = l.clock
		return sp, c
	}
	return nil, 0
}

// follows reports whether position in comes right after prev in a scan
// in direction dir: the next child of the same parent (past the overflow
// entries of the parent's own cells), or the first child of a parent when
// prev was the last of its own.
func (f *sqliteFile) follows(in, prev link, dir int) bool {
	s := f.t.slotAt(in)
	if s == nil {
		return false
	}
	if in.gen == prev.gen && in.pool == prev.pool && in.slot == prev.slot {
		m := (int(in.pos) - int(prev.pos)) * dir
		return m >= 1 && m <= 3
	}
	first := 0
	if dir < 0 {
		first = len(s.kids) - 1
	}
	return int(in.pos) == first
}

// readTableLeaf handles a read of table leaf k (its usable bytes in pg,
// header at h) that is a lookup of an index scan: the scan steps to its
// position, and the row's overflow chain is requested.
func (f *sqliteFile) readTableLeaf(k uint32, pg []byte, h int, r *reader, o *output) {
	ls, j := f.look.find(k, f.t.ahead, f.t.confirm)
	if ls == nil {
		return
	}
	f.look.clock++
	ls.used = f.look.clock
	o.st.Lookups++
	f.look.setHeight(ls.table, ls.depth[j])
	if d := ls.distance(j); ls.last == noLast || d != 0 {
		if dir := ls.step(j, d, f.t.confirm, f.t.ahead, true); dir != 0 {
			f.look.active.table, f.look.active.at = ls.table, f.accesses
			f.emitLookups(ls, j, dir, r, o)
		}
	}
	f.rowOverflow(k, pg, h, ls.rows[j], o)
}

// setHeight records that the leaves of table are depth levels below its
// root.
func (l *lookups) setHeight(table uint32, depth uint8) {
	i := int(table % lookupSlots)
	l.heights[i].table, l.heights[i].depth = table, depth
}

// interior reports whether an entry of table whose descent stopped depth
// levels below the root stopped at an interior page: above the leaves.
func (l *lookups) interior(table uint32, depth uint8) bool {
	h := &l.heights[table%lookupSlots]
	return h.table == table && depth < h.depth
}

// lookupQuiet is how many accesses after an index scan's last lookup its
// table's own pages are still taken as lookups.
const lookupQuiet = 64

// lookingUp reports whether l is a position in a node of the table an
// index scan is looking rows up in: its leaves and the interior pages of
// their descents are read in the index's order, not the table's, so the
// table's nodes must not take them for a scan of their own (random
// children of a node with fewer than Ahead of them would look like one).
func (f *sqliteFile) lookingUp(l link) bool {
	a := &f.look.active
	if a.table == 0 || f.accesses-a.at > lookupQuiet {
		return false
	}
	s := f.t.slotAt(l)
	return s != nil && s.tree == a.table
}

// Positions in a lookup list are counted in distinct pages: entries in a
// row whose rows share a table leaf are read with one read, so such a run
// is one step.

// find returns the lookup list and position that a read of page k is:
// within Ahead pages after the position of a list in a scan, else the
// position nearest the last one entered of the most recently used list
// holding k.
func (l *lookups) find(k uint32, ahead int, confirm int32) (*lookupList, int32) {
	for i := range l.lists {
		ls := &l.lists[i]
		dir := ls.dir(confirm)
		if ls.gen == 0 || ls.last == noLast || dir == 0 {
			continue
		}
		prev, n := ls.pages[ls.last], 0
		for j := int(ls.last); j >= 0 && j < len(ls.pages); j += dir {
			if p := ls.pages[j]; p != prev {
				if n++; n > ahead {
					break
				}
				prev = p
			}
			if prev == k {
				return ls, int32(j)
			}
		}
	}
	var best *lookupList
	bestJ := int32(-1)
	for i := range l.lists {
		ls := &l.lists[i]
		if ls.gen == 0 || (best != nil && ls.used < best.used) {
			continue
		}
		if j := ls.nearest(k); j >= 0 {
			best, bestJ = ls, j
		}
	}
	return best, bestJ
}

// nearest returns the position of page k nearest the last one entered
// (from the start when none was), -1 when k is not in the list.
func (ls *lookupList) nearest(k uint32) int32 {
	from := max(ls.last, 0)
	n := int32(len(ls.pages))
	for d := int32(0); from+d < n || from-d >= 0; d++ {
		if j := from + d; j < n && ls.pages[j] == k {
			return j
		}
		if j := from - d; j >= 0 && ls.pages[j] == k {
			return j
		}
	}
	return -1
}

// distance returns the steps from the last position entered to j, in
// distinct pages, negative backwards: 0 when j is on the same page.
func (ls *lookupList) distance(j int32) int32 {
	if ls.last == noLast {
		return 0
	}
	dir := int32(1)
	if j < ls.last {
		dir = -1
	}
	n := int32(0)
	prev := ls.pages[ls.last]
	for k := ls.last + dir; k != j+dir; k += dir {
		if ls.pages[k] != prev {
			n++
			prev = ls.pages[k]
		}
	}
	return n * dir
}

// emitLookups emits the table pages of the Ahead entries after position j
// of ls in direction dir, and when they reach the list's end, continues
// the scan in the index page's parent so the next index page is
// requested, and remembers the scan for that page's list. Entries whose
// descent stopped at an interior page the map dropped are mapped again
// first, reading that page (the program read it before).
func (f *sqliteFile) emitLookups(ls *lookupList, j int32, dir int, r *reader, o *output) {
	t := &f.t
	t.out = t.out[:0]
	prev, n := ls.pages[j], 0
	k := int(j) + dir
	for ; k >= 0 && k < len(ls.pages); k += dir {
		switch q := ls.pages[k]; {
		case f.look.rows.dropped(q):
			ls.pages[k], ls.depth[k] = f.descend(ls.table, ls.rows[k], r)
		case f.readCached && int32(k) >= ls.emLo && int32(k) <= ls.emHi && f.look.interior(ls.table, ls.depth[k]) && f.reread(q, r, true):
			// Emitted before and now cached: see through it.
			f.addTableInterior(q)
		}
		p := ls.pages[k]
		if p == prev {
			continue
		}
		if n == t.ahead {
			break
		}
		n++
		prev = p
		first, cnt := t.osPages(p, 1)
		for q := first; q < first+cnt && len(t.out) < MaxHintChildren; q++ {
			t.out = append(t.out, q)
		}
	}
	if len(t.out) > 0 {
		parent, _ := t.osPages(ls.page, 1)
		o.tree(parent, uint32(j), t.out)
	}
	if a, b := j+int32(dir), int32(k-dir); (b-a)*int32(dir) >= 0 {
		lo, hi := min(a, b), max(a, b)
		if ls.emLo <= ls.emHi {
			lo, hi = min(lo, ls.emLo), max(hi, ls.emHi)
		}
		ls.emLo, ls.emHi = lo, hi
	}
	if (k < 0 || k >= len(ls.pages)) && !ls.near {
		ls.near = true
		t.propagate(ls.up, dir, o)
		d := &f.look.done
		d.table, d.up, d.dir = ls.table, ls.up, dir
	}
}

// rowOverflow emits the first overflow page of the row rowid in table leaf
// k, if its payload spills. The cells of a table leaf are in rowid order.
func (f *sqliteFile) rowOverflow(k uint32, pg []byte, h int, rowid int64, o *output) {
	n := int(binary.BigEndian.Uint16(pg[h+3:]))
	ptrs := h + 8
	if ptrs+2*n > len(pg) {
		return
	}
	lo, hi := 0, n-1
	for lo <= hi {
		mid := int(uint(lo+hi) >> 1)
		off := int(binary.BigEndian.Uint16(pg[ptrs+2*mid:]))
		if off < ptrs+2*n || off >= len(pg) {
			return
		}
		c := pg[off:]
		p, l1 := sqliteVarint(c)
		r, l2 := sqliteVarint(c[l1:])
		if l1 == 0 || l2 == 0 {
			return
		}
		switch {
		case int64(r) < rowid:
			lo = mid + 1
			continue
		case int64(r) > rowid:
			hi = mid - 1
			continue
		}
		local := f.local(p, true)
		c = c[l1+l2:]
		if p <= local || uint64(len(c)) < local+4 {
			return
		}
		ovf := binary.BigEndian.Uint32(c[local:])
		if ovf == k || !f.valid(ovf) {
			return
		}
		f.t.out = f.t.out[:0]
		first, cnt := f.t.osPages(ovf, 1)
		for p := first; p < first+cnt; p++ {
			f.t.out = append(f.t.out, p)
		}
		parent, _ := f.t.osPages(k, 1)
		o.tree(parent, uint32(mid), f.t.out)
		return
	}
}
