package adapters

// The tracker is the B-tree logic the sqlite and lmdb adapters share. A
// parsed node becomes a slot holding its traversal list: its children in
// key order (for SQLite index nodes interleaved with the overflow chains of
// the node's own cells, and for leaves the overflow chains of their cells).
// When a page in some slot's list is accessed, the scan entered that
// position; once it has made Confirm adjacent steps in one direction the
// slot is in a scan and every entry emits the upcoming entries, and a node
// entered in a scan emits its own list as soon as it is parsed. When a scan
// leaves a node's last entry, its parent continues from the node's
// position. Memory is bounded: a fixed number of slots per pool, each list
// bounded, and a bounded index from page to list position. Nothing follows
// pointers transitively, so cyclic or out-of-range pointers cannot loop.

const (
	poolSlots = 64      // slots per pool
	maxKids   = 4096    // entries of one node's traversal list
	maxDepth  = 32      // bound on propagation to ancestors
	maxProbe  = 16      // index probe length
	minIndex  = 1 << 10 // initial index entries
	maxIndex  = 1 << 17 // index entries at most (1.5 MiB)
	noLast    = -1 << 30
	maxRun    = 1 << 20
)

// Kinds of traversal-list entries.
const (
	kindNode     uint8 = iota // a child node
	kindOverflow              // the first page of an overflow chain (sqlite) or run (lmdb)
)

// child is one entry of a traversal list.
type child struct {
	page uint32 // the format's page number
	span uint32 // format pages the entry covers from page (lmdb overflow runs), ≥ 1
	// aux is, for sqlite overflow entries, the chain's length in pages; for
	// node entries the generation of the slot a walk parsed the node into
	// (pools[apool][aslot]), 0 when none did, noList when it has no list.
	aux          uint32
	kind         uint8
	apool, aslot uint8
}

// noList marks a node entry a walk parsed that has no traversal list.
const noList = ^uint32(0)

// link locates a position in a slot; gen 0 is no link.
type link struct {
	gen  uint32
	pool uint8
	slot uint8
	pos  uint16
}

// cursor is a scan's position in a list: the position last entered and
// the run of adjacent steps that led there.
type cursor struct {
	last int32 // position last entered, or noLast
	run  int32 // > 0: adjacent forward steps; < 0: backward steps
}

type slot struct {
	cursor
	probe int32 // the entry a walk continues from, noLast before any
	asked int32 // the entry from which a walk last emitted, noLast before any
	ahead bool  // parsed by a walk; the scan has not reached it yet
	// noWalk: no walk starts in this node (sqlite: an index of a rowid
	// table, whose entries' lookups are predicted otherwise)
	noWalk bool
	pool   uint8 // where the slot is: pools[pool][idx]
	idx    uint8
	kids   []child
	page   uint32
	gen    uint32 // 0: free
	tree   uint32 // root page of the B-tree the node belongs to, 0 unknown (sqlite)
	used   uint64
	up     link // where this node sits in its parent's list
}

type ientry struct {
	page uint32
	gen  uint32
	pool uint8
	slot uint8
	pos  uint16
}

type tracker struct {
	pools   [][]slot
	idx     []ientry
	gen     uint32
	clock   uint64
	confirm int32
	ahead   int
	nAhead  int    // slots a walk parsed that the scan has not reached (ahead)
	lenient bool   // an established run continues across gaps up to ahead
	base    uint64 // number of the format's first page (sqlite 1, lmdb 0)
	fps     uint64 // the format's page size
	ops     uint64 // the Stage's page size
	out     []uint64
	kids    []child // scratch list for parsers
}

func (t *tracker) init(pools int, cfg *Config, base, fps uint64, lenient bool) {
	t.pools = make([][]slot, pools)
	for i := range t.pools {
		t.pools[i] = make([]slot, poolSlots)
	}
	t.idx = make([]ientry, minIndex)
	t.confirm = int32(cfg.Confirm)
	t.ahead = cfg.Ahead
	t.lenient = lenient
	t.base, t.fps, t.ops = base, fps, uint64(cfg.PageSize)
}

// osPages returns the Stage pages [first, first+n) that format pages
// [page, page+span) occupy.
func (t *tracker) osPages(page, span uint32) (first, n uint64) {
	off := (uint64(page) - t.base) * t.fps
	end := off + uint64(max(span, 1))*t.fps
	first = off / t.ops
	return first, (end+t.ops-1)/t.ops - first
}

func (t *tracker) hash(page uint32) uint64 {
	return (uint64(page) * 0x9e3779b97f4a7c15) >> 20
}

func (t *tracker) valid(e *ientry) bool {
	return e.gen != 0 && t.pools[e.pool][e.slot].gen == e.gen
}

// lookup returns the position page was last listed at.
func (t *tracker) lookup(page uint32) (link, bool) {
	mask := uint64(len(t.idx) - 1)
	h := t.hash(page)
	var best link
	for i := range uint64(maxProbe) {
		e := &t.idx[(h+i)&mask]
		if e.gen == 0 {
			break
		}
		if e.page == page && e.gen > best.gen && t.valid(e) {
			best = link{gen: e.gen, pool: e.pool, slot: e.slot, pos: e.pos}
		}
	}
	return best, best.gen != 0
}

func (t *tracker) insert(e ientry) {
	for {
		if t.place(e) {
			return
		}
		if len(t.idx) >= maxIndex {
			t.idx[t.hash(e.page)&uint64(len(t.idx)-1)] = e
			return
		}
		t.grow()
	}
}

// place puts e in the first free or stale entry of its probe window. An
// entry is never moved across an empty one, so lookups may stop at empty
// entries.
func (t *tracker) place(e ientry) bool {
	mask := uint64(len(t.idx) - 1)
	h := t.hash(e.page)
	for i := range uint64(maxProbe) {
		x := &t.idx[(h+i)&mask]
		if x.gen == 0 || !t.valid(x) {
			*x = e
			return true
		}
	}
	return false
}

func (t *tracker) grow() {
	old := t.idx
	t.idx = make([]ientry, 2*len(old))
	for i := range old {
		if t.valid(&old[i]) {
			t.place(old[i])
		}
	}
}

// enter records that the scan entered position l and emits what it
// implies. It returns the direction of the scan the entry is part of
// (+1, -1, or 0 when it is not in a scan).
func (t *tracker) enter(l link, o *output) int {
	s := &t.pools[l.pool][l.slot]
	j := int32(l.pos)
	t.clock++
	s.used = t.clock
	if s.last == j {
		return s.dir(t.confirm)
	}
	dir := s.step(j, j-s.last, t.confirm, t.ahead, t.lenient)
	if dir == 0 {
		return 0
	}
	t.emitFrom(s, j, dir, o)
	if s.atEnd(j, dir) {
		t.propagate(s.up, dir, o)
	}
	return dir
}

// step moves the cursor to position j, d steps from the last one, and
// returns the direction of the scan it is then in (0: none). A scan is
// confirm adjacent steps in one direction; once established and when
// lenient, a step may skip up to ahead positions in the scan's direction.
func (c *cursor) step(j, d, confirm int32, ahead int, lenient bool) int {
	switch {
	case c.last == noLast:
		c.run = 0
	case d == 1:
		c.run = min(max(c.run, 0)+1, maxRun)
	case d == -1:
		c.run = max(min(c.run, 0)-1, -maxRun)
	case lenient && c.run >= confirm && c.run > 0 && d > 1 && int(d) <= ahead:
		c.run = min(c.run+1, maxRun)
	case lenient && -c.run >= confirm && c.run < 0 && d < -1 && int(-d) <= ahead:
		c.run = max(c.run-1, -maxRun)
	default:
		c.run = 0
	}
	c.last = j
	return c.dir(confirm)
}

// dir is the direction of the scan a cursor is in, 0 when none. With
// confirm 0 every entry counts, forward unless the last step was back.
func (s *cursor) dir(confirm int32) int {
	switch {
	case confirm == 0 && s.run < 0:
		return -1
	case confirm == 0:
		return 1
	case s.run >= confirm:
		return 1
	case -s.run >= confirm:
		return -1
	}
	return 0
}

func (s *slot) atEnd(j int32, dir int) bool {
	return (dir > 0 && int(j) == len(s.kids)-1) || (dir < 0 && j == 0)
}

// propagate continues a scan that left a node in the node's parent: l is
// where the node sits in its parent's list.
func (t *tracker) propagate(l link, dir int, o *output) {
	for range maxDepth {
		if l.gen == 0 {
			return
		}
		p := &t.pools[l.pool][l.slot]
		j := int32(l.pos)
		if p.gen != l.gen || int(j) >= len(p.kids) {
			return
		}
		if p.last == j && p.dir(t.confirm) == dir {
			return // the parent already continued from there
		}
		p.last = j
		p.run = int32(dir) * max(t.confirm, 1)
		t.clock++
		p.used = t.clock
		t.emitFrom(p, j, dir, o)
		if !p.atEnd(j, dir) {
			return
		}
		l = p.up
	}
}

// slotAt returns the slot l points into, nil when l is no longer valid.
func (t *tracker) slotAt(l link) *slot {
	if l.gen == 0 {
		return nil
	}
	s := &t.pools[l.pool][l.slot]
	if s.gen != l.gen || int(l.pos) >= len(s.kids) {
		return nil
	}
	return s
}

// emitFrom emits the entries after position j of s in direction dir.
func (t *tracker) emitFrom(s *slot, j int32, dir int, o *output) {
	t.out = t.out[:0]
	for k, n := int(j)+dir, 0; k >= 0 && k < len(s.kids) && n < t.ahead; k, n = k+dir, n+1 {
		c := &s.kids[k]
		first, cnt := t.osPages(c.page, c.span)
		for p := first; p < first+cnt && len(t.out) < MaxHintChildren; p++ {
			if len(t.out) > 0 && t.out[len(t.out)-1] == p {
				continue
			}
			t.out = append(t.out, p)
		}
	}
	if len(t.out) == 0 {
		return
	}
	parent, _ := t.osPages(s.page, 1)
	o.tree(parent, uint32(max(j, 0)), t.out)
}

// add makes kids the traversal list of node page in pool and returns its
// slot (nil for an empty list). in is where the node was entered from
// (gen 0: not a listed child) and dir the scan that entered it: in a scan
// the node emits its list from its first entry in that direction at once.
func (t *tracker) add(pool int, page uint32, kids []child, in link, dir int, o *output) *slot {
	if len(kids) == 0 {
		return nil
	}
	kids = kids[:min(len(kids), maxKids)]
	ps := t.pools[pool]
	si := -1
	for i := range ps {
		if ps[i].gen != 0 && ps[i].page == page {
			si = i
			break
		}
	}
	if si < 0 {
		si = t.victim(ps)
	}
	if ps[si].gen != 0 && ps[si].ahead {
		t.nAhead--
	}
	t.gen++
	if t.gen == 0 { // wrapped: forget everything
		t.reset()
		t.gen = 1
	}
	s := &ps[si]
	t.clock++
	*s = slot{cursor: cursor{last: noLast}, probe: noLast, asked: noLast, pool: uint8(pool), idx: uint8(si), kids: append(s.kids[:0], kids...), page: page, gen: t.gen, used: t.clock, up: in}
	for k := range s.kids {
		t.insert(ientry{page: s.kids[k].page, gen: s.gen, pool: uint8(pool), slot: uint8(si), pos: uint16(k)})
	}
	if dir == 0 {
		return s
	}
	start := int32(0)
	if dir < 0 {
		start = int32(len(s.kids) - 1)
	}
	s.last = start
	s.run = int32(dir) * max(t.confirm, 1)
	t.emitFrom(s, start, dir, o)
	return s
}

// addAhead is add for a node a walk parsed before the scan reached it:
// its list is emitted from its first entry in direction dir, which the
// scan has not entered yet, and its cursor waits just before that entry,
// so that entering it continues the scan.
func (t *tracker) addAhead(pool int, page uint32, kids []child, in link, dir int, o *output) *slot {
	s := t.add(pool, page, kids, in, 0, o)
	if s == nil || dir == 0 {
		return s
	}
	before := int32(-1)
	if dir < 0 {
		before = int32(len(s.kids))
	}
	s.last = before
	s.run = int32(dir) * max(t.confirm, 1)
	s.ahead = true
	t.nAhead++
	t.emitFrom(s, before, dir, o)
	return s
}

// reached notes that the scan reached node page, which a walk parsed into
// a slot listed at in; it reports whether that slot still exists (the
// program's read of the page then needs no second parse).
func (t *tracker) reached(page uint32, in link) bool {
	p := t.slotAt(in)
	if p == nil {
		return false
	}
	c := &p.kids[in.pos]
	s := t.nodeSlot(c)
	if c.page != page || s == nil {
		return false
	}
	if s.ahead {
		s.ahead = false
		t.nAhead--
	}
	return true
}

// nodeSlot returns the slot a walk parsed node entry c into, nil when none
// did or the slot was reused.
func (t *tracker) nodeSlot(c *child) *slot {
	if c.kind != kindNode || c.aux == 0 || c.aux == noList || int(c.apool) >= len(t.pools) {
		return nil
	}
	s := &t.pools[c.apool][c.aslot]
	if s.gen != c.aux || s.page != c.page {
		return nil
	}
	return s
}

// aheadParser parses node c, listed at position in, if the page cache
// holds it, into a slot (tracker.addAhead) of which it returns the link
// (gen 0: the node has no list); ok is false when c is not cached.
type aheadParser func(c child, in link, dir int, o *output) (node link, ok bool)

// maxAhead bounds the nodes parsed by walks that the scan has not reached:
// half a pool, so that they are not reused for one another first.
const maxAhead = poolSlots / 2

// walkSteps bounds the entries one walk looks at, so that cyclic pointers
// in a hostile file cannot make it loop.
const walkSteps = 4 * maxAhead

// walk runs ahead of a scan that entered position l in direction dir: in
// key order, it parses the nodes after l that are cached (the policies
// prefetched them) and walks their lists in turn, climbing to the parents
// when a list ends. Each node parsed ahead emits its own list, so the
// pages below it are asked for before the scan reaches them, instead of
// when the program reads the node, which is too late for the pages it
// reads right after. A walk stops at the first node that is not cached
// yet, once asking for it and the entries after it; the slots remember
// where (probe), so that the next walk continues there. At most maxAhead
// nodes are parsed ahead of the scan.
func (t *tracker) walk(l link, dir int, parse aheadParser, o *output) {
	steps := walkSteps
	for range maxDepth {
		s := t.slotAt(l)
		if s == nil || t.nAhead >= maxAhead {
			return
		}
		if !t.walkFrom(s, l, int32(l.pos)+int32(dir), dir, parse, o, 0, &steps) {
			return
		}
		l = s.up
	}
}

// walkFrom walks the entries of slot s (at l's pool and slot) from
// position k in direction dir and reports whether it reached the end.
func (t *tracker) walkFrom(s *slot, l link, k int32, dir int, parse aheadParser, o *output, depth int, steps *int) bool {
	d, gen := int32(dir), s.gen
	if s.probe != noLast && (s.probe-k)*d > 0 {
		k = s.probe
	}
	for ; k >= 0 && int(k) < len(s.kids); k += d {
		if *steps--; *steps < 0 || t.nAhead >= maxAhead {
			s.probe = k
			return false
		}
		c := s.kids[k]
		if c.kind != kindNode || c.aux == noList {
			continue
		}
		cs := t.nodeSlot(&c)
		var cl link
		if cs == nil {
			n, ok := parse(c, link{gen: gen, pool: l.pool, slot: l.slot, pos: uint16(k)}, dir, o)
			if s.gen != gen {
				return false // the parse reused s
			}
			if !ok {
				s.probe = k
				t.ask(s, k, dir, o)
				return false
			}
			e := &s.kids[k]
			if cs = t.slotAt(n); cs == nil {
				e.aux = noList
				continue
			}
			e.aux, e.apool, e.aslot = n.gen, n.pool, n.slot
		}
		cl = link{gen: cs.gen, pool: s.kids[k].apool, slot: s.kids[k].aslot}
		start := int32(0)
		if dir < 0 {
			start = int32(len(cs.kids) - 1)
		}
		if depth+1 < maxDepth && (!t.walkFrom(cs, cl, start, dir, parse, o, depth+1, steps) || s.gen != gen) {
			if s.gen == gen {
				s.probe = k
			}
			return false
		}
	}
	s.probe = k
	return true
}

// ask emits, once per position, the entries of s from k on in direction
// dir: a walk stopped at k, whose node is not cached yet.
func (t *tracker) ask(s *slot, k int32, dir int, o *output) {
	if s.asked == k {
		return
	}
	s.asked = k
	t.emitFrom(s, k-int32(dir), dir, o)
}

// linkOf returns the link of slot s (position 0).
func (s *slot) linkOf() link { return link{gen: s.gen, pool: s.pool, slot: s.idx} }

// victim picks the slot to reuse: a free one, else the least recently used
// one the scan has finished, else the least recently used.
func (t *tracker) victim(ps []slot) int {
	best, bestDone := -1, -1
	for i := range ps {
		s := &ps[i]
		if s.gen == 0 {
			return i
		}
		d := s.dir(1)
		if d == 0 {
			d = 1
		}
		if s.last != noLast && s.atEnd(s.last, d) && (bestDone < 0 || s.used < ps[bestDone].used) {
			bestDone = i
		}
		if best < 0 || s.used < ps[best].used {
			best = i
		}
	}
	if bestDone >= 0 {
		return bestDone
	}
	return best
}

func (t *tracker) reset() {
	for _, ps := range t.pools {
		for i := range ps {
			ps[i] = slot{kids: ps[i].kids[:0]}
		}
	}
	clear(t.idx)
	t.nAhead = 0
}
