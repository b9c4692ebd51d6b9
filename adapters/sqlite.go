package adapters

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/predictio/predictio/formats"
)

// The SQLite adapter follows the database file format of
// https://www.sqlite.org/fileformat2.html (sections 1.3 to 1.7): the
// 100-byte header, B-tree pages, cell payload overflow and pointer-map
// pages.

const sqliteMagic = "SQLite format 3\x00"

// SQLite B-tree page types.
const (
	sqliteIndexInterior = 0x02
	sqliteTableInterior = 0x05
	sqliteIndexLeaf     = 0x0a
	sqliteTableLeaf     = 0x0d
)

// Slot pools: table B-trees and index B-trees (WITHOUT ROWID tables and
// indexes), so the lookups of a rowid table do not evict an index scan.
const (
	poolTable = 0
	poolIndex = 1
)

// isSQLiteWAL reports whether hdr starts a write-ahead log: magic
// 0x377f0682 or 0x377f0683 and file format 3007000 (fileformat2 section
// 4.1).
func isSQLiteWAL(hdr []byte) bool {
	if len(hdr) < 32 {
		return false
	}
	m := binary.BigEndian.Uint32(hdr)
	return (m == 0x377f0682 || m == 0x377f0683) && binary.BigEndian.Uint32(hdr[4:]) == 3007000
}

// sqliteWAL is a database's -wal file. It derives nothing: it is
// recognized so that reads of it are reported, since every page read from
// it is one the database file's B-tree pages may name but the program no
// longer reads from the database file.
type sqliteWAL struct {
	pageSize uint32
	reads    uint64
}

func (w *sqliteWAL) handle(a *access, r *reader, o *output) {
	if w.reads == 0 {
		o.warnf("a SQLite write-ahead log is being read: pages with frames there are read from it, not from the database file, so predictions for them are wasted until a checkpoint")
	}
	w.reads++
}

func (w *sqliteWAL) status() string {
	return fmt.Sprintf("SQLite write-ahead log, page size %d, %d accesses", w.pageSize, w.reads)
}

// sqlitePending is the byte offset of SQLite's lock-byte page.
const sqlitePending = 0x40000000

type sqliteFile struct {
	t        tracker
	pageSize uint32
	usable   uint32
	pages    uint32 // database size in pages
	fileSize uint64
	autoVac  bool
	wal      bool
	warned   bool
	trunks   [8]uint32 // freelist trunk pages known
	chain    [32]chainLink
	chainAt  int
	buf      []byte
	ovf      [4]byte
	pend     pending
	schema   sqliteSchema
	look     lookups
	accesses uint64
	// readCached: table interior pages the lookups predicted may be read
	// once cached (Config.ReadCached, while the content can tell).
	readCached bool
}

// chainLink is a page of an overflow chain expected next: left pages of
// the chain remain from page on.
type chainLink struct{ page, left uint32 }

// sqliteHeader holds the header fields the adapter uses.
type sqliteHeader struct {
	pageSize, usable uint32
	pages            uint32 // in-header database size, 0 when not valid
	trunk            uint32
	autoVac, wal     bool
}

// parseSQLiteHeader parses the 100-byte database header. It returns
// ok false when hdr is not a SQLite database and an error when it is one
// this adapter cannot read.
func parseSQLiteHeader(hdr []byte) (h sqliteHeader, ok bool, err error) {
	if len(hdr) < 100 || string(hdr[:16]) != sqliteMagic {
		return h, false, nil
	}
	ps := uint32(binary.BigEndian.Uint16(hdr[16:]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps&(ps-1) != 0 {
		return h, true, fmt.Errorf("sqlite: header field page size (offset 16) is %d, not a power of two in [512, 65536]", ps)
	}
	res := uint32(hdr[20])
	if ps-res < 480 {
		return h, true, fmt.Errorf("sqlite: header field reserved bytes (offset 20) is %d, leaving less than 480 usable bytes of %d", res, ps)
	}
	if hdr[21] != 64 || hdr[22] != 32 || hdr[23] != 32 {
		return h, true, errors.New("sqlite: header payload fractions (offsets 21-23) are not 64, 32, 32")
	}
	h = sqliteHeader{pageSize: ps, usable: ps - res, wal: hdr[18] == 2 || hdr[19] == 2}
	h.trunk = binary.BigEndian.Uint32(hdr[32:])
	h.autoVac = binary.BigEndian.Uint32(hdr[52:]) != 0
	// The in-header size is valid when the version-valid-for number
	// matches the change counter (fileformat2 section 1.3.7).
	if n := binary.BigEndian.Uint32(hdr[28:]); n != 0 && binary.BigEndian.Uint32(hdr[24:]) == binary.BigEndian.Uint32(hdr[92:]) {
		h.pages = n
	}
	return h, true, nil
}

func newSQLite(hdr []byte, size uint64, cfg *Config) (parser, error) {
	if isSQLiteWAL(hdr) {
		return &sqliteWAL{pageSize: binary.BigEndian.Uint32(hdr[8:])}, nil
	}
	h, ok, err := parseSQLiteHeader(hdr)
	if !ok || err != nil {
		return nil, err
	}
	f := &sqliteFile{buf: make([]byte, h.pageSize), fileSize: size, readCached: cfg.ReadCached}
	f.t.init(2, cfg, 1, uint64(h.pageSize), true)
	f.setHeader(h)
	if len(hdr) >= int(h.pageSize) && hdr[100] == sqliteTableLeaf {
		// Page 1 is the schema table's only page: parse it now.
		var st Stats
		f.readSchema(1, hdr[:h.usable], 100, &st)
	}
	return f, nil
}

func (f *sqliteFile) setHeader(h sqliteHeader) {
	f.pageSize, f.usable, f.autoVac, f.wal = h.pageSize, h.usable, h.autoVac, h.wal
	f.pages = h.pages
	if f.pages == 0 {
		f.pages = uint32(min(f.fileSize/uint64(h.pageSize), 1<<31))
	}
	if h.trunk != 0 {
		f.addTrunk(h.trunk)
	}
}

func (f *sqliteFile) addTrunk(p uint32) {
	for _, t := range f.trunks {
		if t == p {
			return
		}
	}
	copy(f.trunks[1:], f.trunks[:len(f.trunks)-1])
	f.trunks[0] = p
}

func (f *sqliteFile) status() string {
	mode := "rollback journal"
	if f.wal {
		mode = "WAL: pages with frames in the -wal file are read from there, so predictions are exact only up to the last checkpoint"
	}
	av := ""
	if f.autoVac {
		av = ", auto-vacuum (pointer-map pages skipped)"
	}
	tables, indexes := f.schema.counts()
	return fmt.Sprintf("page size %d, %d usable, %d pages%s, %s, schema: %d tables, %d indexes", f.pageSize, f.usable, f.pages, av, mode, tables, indexes)
}

// maxPagesPerAccess bounds the database pages one access is examined for.
const maxPagesPerAccess = 64

func (f *sqliteFile) handle(a *access, r *reader, o *output) {
	f.accesses++
	ps := uint64(f.pageSize)
	start, end := a.first*r.ps, (a.first+a.n)*r.ps
	if start == 0 {
		f.refreshHeader(r, o)
	}
	if f.wal && !f.warned {
		f.warned = true
		o.warnf("%s", f.status())
	}
	// Database page k (from 1) occupies bytes [(k-1)*ps, k*ps). The scan
	// enters it at the access that reads its first byte; it is parsed at
	// the one that reads its last, when the program has read all of it
	// (a page larger than the accounting page may come in several
	// accesses, and the header alone is often read in 100 bytes).
	first := start / ps
	for k, n := first, 0; k*ps < end && n < maxPagesPerAccess; k, n = k+1, n+1 {
		if k+1 > 1<<31 {
			return
		}
		page := uint32(k + 1)
		if k*ps >= start {
			f.enterPage(page, a, r, o)
		}
		if last := (k+1)*ps - 1; last < end {
			f.parsePage(page, a, r, o)
		}
	}
}

// pending is an entered database page that waits for its last byte to be
// read before it is parsed.
type pending struct {
	page  uint32
	in    link
	dir   int
	osLo  uint64 // first accounting page of the database page
	valid bool
}

// enterPage handles the start of a read of database page k: its entry in
// a traversal list, and overflow pages, which need only their first bytes.
func (f *sqliteFile) enterPage(k uint32, a *access, r *reader, o *output) {
	p := pending{page: k, osLo: uint64(k-1) * uint64(f.pageSize) / r.ps, valid: true}
	if l, ok := f.t.lookup(k); ok {
		p.in = l
		if !f.lookingUp(l) {
			p.dir = f.t.enter(l, o)
		}
		if p.dir != 0 && f.readCached {
			f.walk(l, p.dir, r, o)
		}
		c := &f.t.pools[l.pool][l.slot].kids[l.pos]
		if c.kind == kindOverflow {
			f.overflow(k, c.aux, r, o)
			f.pend = pending{}
			return
		}
	} else if a.kind == formats.KindMap {
		f.pend = pending{} // fault-around mapped it; the program may not have touched it
		return
	}
	if left, ok := f.chained(k); ok {
		f.overflow(k, left, r, o)
		f.pend = pending{}
		return
	}
	f.pend = p
}

// parsePage handles the end of a read of database page k.
func (f *sqliteFile) parsePage(k uint32, a *access, r *reader, o *output) {
	p := f.pend
	f.pend = pending{}
	if !p.valid || p.page != k || f.skip(k) || f.t.reached(k, p.in) {
		return
	}
	r.eLo, r.eHi = p.osLo, a.first
	f.parse(k, p.in, p.dir, r, o)
	r.eLo, r.eHi = 0, 0
}

// refreshHeader rereads the header when the program reads page 1: the
// database size and the freelist change as it is written.
func (f *sqliteFile) refreshHeader(r *reader, o *output) {
	hdr := f.buf[:100]
	if err := r.readAt(hdr, 0); err != nil {
		return
	}
	h, ok, err := parseSQLiteHeader(hdr)
	if !ok || err != nil || h.pageSize != f.pageSize {
		r.st.Malformed++
		return
	}
	f.fileSize = r.size()
	f.setHeader(h)
}

// chained reports whether k is a page of an overflow chain being read.
func (f *sqliteFile) chained(k uint32) (uint32, bool) {
	for i := range f.chain {
		if f.chain[i].page == k && f.chain[i].left > 0 {
			left := f.chain[i].left
			f.chain[i] = chainLink{}
			return left, true
		}
	}
	return 0, false
}

// overflow handles a page of an overflow chain with left pages from it
// on: its first four bytes are the next page, which it predicts. A chain
// is read to its end once started, so this needs no scan.
func (f *sqliteFile) overflow(k, left uint32, r *reader, o *output) {
	if left <= 1 {
		return
	}
	if err := r.readAt(f.ovf[:], uint64(k-1)*uint64(f.pageSize)); err != nil {
		return
	}
	next := binary.BigEndian.Uint32(f.ovf[:])
	if next == k || !f.valid(next) {
		r.st.Malformed++
		return
	}
	f.chain[f.chainAt] = chainLink{page: next, left: left - 1}
	f.chainAt = (f.chainAt + 1) % len(f.chain)
	first, n := f.t.osPages(next, 1)
	f.t.out = f.t.out[:0]
	for p := first; p < first+n; p++ {
		f.t.out = append(f.t.out, p)
	}
	parent, _ := f.t.osPages(k, 1)
	o.tree(parent, 0, f.t.out)
}

// valid reports whether p may be a B-tree or overflow page.
func (f *sqliteFile) valid(p uint32) bool {
	return p >= 2 && p <= f.pages && !f.lockByte(p) && !f.ptrmap(p)
}

func (f *sqliteFile) lockByte(p uint32) bool {
	return uint64(p) == sqlitePending/uint64(f.pageSize)+1
}

// ptrmap reports whether p is a pointer-map page of an auto-vacuum
// database (btree.c ptrmapPageno).
func (f *sqliteFile) ptrmap(p uint32) bool {
	if !f.autoVac || p < 2 {
		return false
	}
	per := f.usable/5 + 1
	m := (p-2)/per*per + 2
	if f.lockByte(m) {
		m++
	}
	return m == p
}

// skip reports pages that are never B-tree pages: the lock-byte page,
// pointer-map pages and known freelist trunks.
func (f *sqliteFile) skip(k uint32) bool {
	if f.lockByte(k) || f.ptrmap(k) {
		return true
	}
	for _, t := range f.trunks {
		if t == k {
			return true
		}
	}
	return false
}

// parse reads database page k and, for a B-tree page, makes its traversal
// list: interior pages list their children in key order (index interior
// pages interleave the overflow chains of their own cells, which an
// in-order scan reads between children); leaves list the overflow chains
// of their cells.
func (f *sqliteFile) parse(k uint32, in link, dir int, r *reader, o *output) {
	if !f.inFile(k, r) {
		return
	}
	pg := f.buf
	if err := r.readAt(pg, uint64(k-1)*uint64(f.pageSize)); err != nil {
		return
	}
	f.parsed(k, pg, in, dir, false, r, o)
}

// inFile reports whether page k is within the database; the file may have
// grown since the header was read.
func (f *sqliteFile) inFile(k uint32, r *reader) bool {
	if k > f.pages {
		f.fileSize = r.size()
		if n := uint32(min(f.fileSize/uint64(f.pageSize), 1<<31)); n > f.pages {
			f.pages = n
		}
	}
	return k <= f.pages
}

// parsed makes the traversal list of page k, whose content is pg, and
// returns the link of its slot (gen 0: none). ahead says that the scan has
// not reached it yet (a walk).
func (f *sqliteFile) parsed(k uint32, pg []byte, in link, dir int, ahead bool, r *reader, o *output) link {
	h := 0
	if k == 1 {
		h = 100
	}
	kids, pool, ok := f.cells(pg[:f.usable], h, k, r.st)
	if !ok {
		return link{}
	}
	tree := f.treeOf(k, in)
	var node link
	add := f.t.add
	if ahead {
		add = f.t.addAhead
	}
	if s := add(pool, k, kids, in, dir, o); s != nil {
		s.tree = tree
		// The index of a rowid table predicts its lookups (lookups.go),
		// which a walk would predict far beyond the scan.
		_, s.noWalk = f.schema.tableOf(tree)
		node = s.linkOf()
	}
	f.structure(k, pg[:f.usable], h, tree, node.gen, in, r, o)
	return node
}

// walk runs the tracker's walk ahead of the scan at l (Config.ReadCached):
// it parses the B-tree pages after l that the page cache holds, reading
// nothing that is not cached.
func (f *sqliteFile) walk(l link, dir int, r *reader, o *output) {
	if s := f.t.slotAt(l); s == nil || s.noWalk {
		return
	}
	f.t.walk(l, dir, func(c child, in link, dir int, o *output) (link, bool) {
		return f.parseAhead(c.page, in, dir, r, o)
	}, o)
}

// parseAhead parses B-tree page k for a walk if it is cached; ok is false
// when it is not (or the kernel cannot tell).
func (f *sqliteFile) parseAhead(k uint32, in link, dir int, r *reader, o *output) (node link, ok bool) {
	if !f.valid(k) || f.skip(k) || !f.inFile(k, r) {
		return link{}, true
	}
	pg := f.buf
	cached, unsupported := r.readCached(pg, uint64(k-1)*uint64(f.pageSize))
	if unsupported {
		f.readCached = false
	}
	if !cached {
		return link{}, false
	}
	return f.parsed(k, pg, in, dir, true, r, o), true
}

// treeOf returns the root page of the B-tree that page k, entered from
// position in, belongs to: k itself for a root the schema names (and
// page 1), else its parent's; 0 when unknown.
func (f *sqliteFile) treeOf(k uint32, in link) uint32 {
	if k == 1 || f.schema.object(k) != nil {
		return k
	}
	if s := f.t.slotAt(in); s != nil {
		return s.tree
	}
	return 0
}

// structure handles what a parsed B-tree page k of tree says beyond its
// traversal list (whose tracker slot has generation gen): table interior
// pages map rowids to pages, index pages of rowid tables list their table
// lookups, table leaves may be such lookups, and the schema table's
// leaves give the B-trees' roots.
func (f *sqliteFile) structure(k uint32, pg []byte, h int, tree, gen uint32, in link, r *reader, o *output) {
	switch pg[h] {
	case sqliteIndexInterior:
		if _, ok := f.schema.tableOf(tree); ok && gen != 0 {
			f.addSeparators(k, pg, h, gen)
		}
	case sqliteTableInterior:
		f.addTableInterior(k)
	case sqliteTableLeaf:
		if tree == 1 {
			f.readSchema(k, pg, h, r.st)
		}
		f.readTableLeaf(k, pg, h, r, o)
	case sqliteIndexLeaf:
		if table, ok := f.schema.tableOf(tree); ok {
			f.addIndexLeaf(k, pg, h, table, in, r, o)
		}
	}
	if pg[h] == sqliteIndexInterior || pg[h] == sqliteIndexLeaf {
		if obj := f.schema.object(k); obj != nil && !obj.index {
			obj.noRowid = true // a WITHOUT ROWID table: its root is an index page
		}
	}
}

// readSchema reads the schema records of sqlite_schema leaf k (its usable
// bytes in pg, header at h), replacing those read from it before.
func (f *sqliteFile) readSchema(k uint32, pg []byte, h int, st *Stats) {
	f.schema.drop(k)
	n := int(binary.BigEndian.Uint16(pg[h+3:]))
	ptrs := h + 8
	if ptrs+2*n > len(pg) {
		return
	}
	for i := range n {
		off := int(binary.BigEndian.Uint16(pg[ptrs+2*i:]))
		if off < ptrs+2*n || off >= len(pg) {
			continue
		}
		c := pg[off:]
		p, l1 := sqliteVarint(c)
		_, l2 := sqliteVarint(c[l1:])
		if l1 == 0 || l2 == 0 {
			st.Malformed++
			continue
		}
		c = c[l1+l2:]
		rec := c[:min(uint64(len(c)), p, f.local(p, true))]
		if !f.schema.addRecord(rec, k) {
			st.Malformed++
		}
	}
}

// cells parses the B-tree page in pg (its usable bytes) whose header
// starts at h and returns its traversal list. ok is false for a page that
// is not a B-tree page.
func (f *sqliteFile) cells(pg []byte, h int, k uint32, st *Stats) (kids []child, pool int, ok bool) {
	typ := pg[h]
	interior := typ == sqliteIndexInterior || typ == sqliteTableInterior
	switch typ {
	case sqliteTableInterior, sqliteTableLeaf:
		pool = poolTable
	case sqliteIndexInterior, sqliteIndexLeaf:
		pool = poolIndex
	default:
		return nil, 0, false
	}
	hdrLen := 8
	if interior {
		hdrLen = 12
	}
	if h+hdrLen > len(pg) {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint16(pg[h+3:]))
	ptrs := h + hdrLen
	if ptrs+2*n > len(pg) {
		st.Malformed++
		return nil, 0, false
	}
	kids = f.t.kids[:0]
	f.look.keys, f.look.pages = f.look.keys[:0], f.look.pages[:0]
	for i := range n {
		off := int(binary.BigEndian.Uint16(pg[ptrs+2*i:]))
		if off < ptrs+2*n || off >= len(pg) {
			st.Malformed++
			continue
		}
		kids = f.cell(kids, pg, off, typ, k, st)
	}
	if interior {
		right := binary.BigEndian.Uint32(pg[h+8:])
		if n := len(kids); typ == sqliteTableInterior {
			if kids = f.appendChild(kids, right, k, st); len(kids) > n {
				f.look.keys = append(f.look.keys, tableInteriorKey)
				f.look.pages = append(f.look.pages, right)
			}
		} else {
			kids = f.appendChild(kids, right, k, st)
		}
	}
	f.t.kids = kids
	return kids, pool, true
}

// cell appends the entries of the cell at off of a page of type typ.
func (f *sqliteFile) cell(kids []child, pg []byte, off int, typ byte, k uint32, st *Stats) []child {
	c := pg[off:]
	if typ == sqliteIndexInterior || typ == sqliteTableInterior {
		if len(c) < 4 {
			st.Malformed++
			return kids
		}
		n := len(kids)
		kids = f.appendChild(kids, binary.BigEndian.Uint32(c), k, st)
		if typ == sqliteTableInterior {
			// A child pointer and a rowid, no payload: the child holds
			// the rowids up to this one (the rowid map's key).
			if key, l := sqliteVarint(c[4:]); len(kids) > n && l > 0 {
				f.look.keys = append(f.look.keys, int64(key))
				f.look.pages = append(f.look.pages, kids[n].page)
			}
			return kids
		}
		c = c[4:]
	}
	p, l := sqliteVarint(c)
	if l == 0 {
		st.Malformed++
		return kids
	}
	c = c[l:]
	if typ == sqliteTableLeaf {
		if _, l := sqliteVarint(c); l == 0 {
			st.Malformed++
			return kids
		} else {
			c = c[l:]
		}
	}
	local := f.local(p, typ == sqliteTableLeaf)
	if p <= local {
		return kids
	}
	if uint64(len(c)) < local+4 {
		st.Malformed++
		return kids
	}
	ovf := binary.BigEndian.Uint32(c[local:])
	if ovf == k || !f.valid(ovf) {
		st.Malformed++
		return kids
	}
	chain := (p - local + uint64(f.usable) - 5) / uint64(f.usable-4)
	return append(kids, child{page: ovf, span: 1, aux: uint32(min(chain, 1<<31)), kind: kindOverflow})
}

func (f *sqliteFile) appendChild(kids []child, p, k uint32, st *Stats) []child {
	if p == k || !f.valid(p) {
		st.Malformed++
		return kids
	}
	return append(kids, child{page: p, span: 1, kind: kindNode})
}

// local returns how many bytes of a p-byte payload stay in the cell
// (fileformat2 section 1.6): X = U-35 for table leaves and
// ((U-12)*64/255)-23 for index pages, M = ((U-12)*32/255)-23,
// K = M+((P-M)%(U-4)); P ≤ X stays whole, else K if K ≤ X, else M.
func (f *sqliteFile) local(p uint64, tableLeaf bool) uint64 {
	return sqliteLocal(uint64(f.usable), p, tableLeaf)
}

func sqliteLocal(u, p uint64, tableLeaf bool) uint64 {
	x := (u-12)*64/255 - 23
	if tableLeaf {
		x = u - 35
	}
	m := (u-12)*32/255 - 23
	if p <= x {
		return p
	}
	if k := m + (p-m)%(u-4); k <= x {
		return k
	}
	return m
}

// sqliteVarint decodes a SQLite varint (big-endian, 7 bits a byte, the
// ninth byte 8 bits). It returns the length 0 when b ends first.
func sqliteVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0
		}
		if i == 8 {
			return v<<8 | uint64(b[i]), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return v, 9
}
