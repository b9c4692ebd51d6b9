package adapters

import (
	"encoding/binary"
	"fmt"

	"github.com/predictio/predictio/formats"
)

// The LMDB adapter reads the data file (data.mdb) of LMDB 0.9 with the
// LP64 layout (amd64, arm64) in little-endian byte order, as mdb.c defines
// it: a 16-byte page header (pgno, pad, flags, lower/upper or an overflow
// page count), two meta pages holding MDB_meta, branch pages whose nodes
// hold child page numbers, and leaf nodes whose big values (F_BIGDATA)
// live in runs of overflow pages.

const (
	lmdbMagic   = 0xBEEFC0DE
	lmdbVersion = 1
	lmdbHdr     = 16 // PAGEHDRSZ
	lmdbNode    = 8  // NODESIZE

	lmdbBranch   = 0x01
	lmdbLeaf     = 0x02
	lmdbOverflow = 0x04
	lmdbMeta     = 0x08
	lmdbLeaf2    = 0x20
	lmdbSubP     = 0x40

	lmdbBigData = 0x01 // node flag F_BIGDATA
)

type lmdbFile struct {
	t     tracker
	psize uint32
	pages uint64
	buf   []byte
	// readCached: a scan step walks ahead through the pages the page
	// cache holds (Config.ReadCached, while the content can tell).
	readCached bool
}

// lmdbMetaInfo holds the meta page fields the adapter uses.
type lmdbMetaInfo struct {
	psize        uint32
	root, lastPg uint64
	depth        uint16
	txnid        uint64
}

// parseLMDBMeta parses meta page 0 of a data file. ok is false when hdr is
// not an LMDB data file, and err set for one the adapter cannot read.
func parseLMDBMeta(hdr []byte) (m lmdbMetaInfo, ok bool, err error) {
	// MDB_meta after the page header: magic, version, address, mapsize,
	// two MDB_db (48 bytes: pad=psize for FREE_DBI, flags, depth, branch,
	// leaf, overflow pages, entries, root), last_pg, txnid.
	if len(hdr) < lmdbHdr+136 {
		return m, false, nil
	}
	le := binary.LittleEndian
	if le.Uint16(hdr[10:])&lmdbMeta == 0 || le.Uint32(hdr[16:]) != lmdbMagic {
		return m, false, nil
	}
	if v := le.Uint32(hdr[20:]); v != lmdbVersion {
		return m, true, fmt.Errorf("lmdb: meta field version is %d; only data version %d (LMDB 0.9) is supported", v, lmdbVersion)
	}
	if le.Uint64(hdr[0:]) != 0 {
		return m, true, fmt.Errorf("lmdb: meta page 0 has page number %d; not a 64-bit little-endian data file", le.Uint64(hdr[0:]))
	}
	m.psize = le.Uint32(hdr[40:])
	if m.psize < 512 || m.psize > 65536 || m.psize&(m.psize-1) != 0 {
		return m, true, fmt.Errorf("lmdb: meta field page size (offset 40) is %d, not a power of two in [512, 65536]", m.psize)
	}
	m.depth = le.Uint16(hdr[88+6:])
	m.root = le.Uint64(hdr[88+40:])
	m.lastPg = le.Uint64(hdr[136:])
	m.txnid = le.Uint64(hdr[144:])
	return m, true, nil
}

func newLMDB(hdr []byte, size uint64, cfg *Config) (parser, error) {
	m, ok, err := parseLMDBMeta(hdr)
	if !ok || err != nil {
		return nil, err
	}
	f := &lmdbFile{psize: m.psize, pages: size / uint64(m.psize), buf: make([]byte, m.psize), readCached: cfg.ReadCached}
	// Faults hide touches of pages fault-around already mapped, so an
	// established scan continues across gaps.
	f.t.init(1, cfg, 0, uint64(m.psize), true)
	return f, nil
}

func (f *lmdbFile) status() string {
	return fmt.Sprintf("page size %d, %d pages", f.psize, f.pages)
}

func (f *lmdbFile) handle(a *access, r *reader, o *output) {
	ps := uint64(f.psize)
	start, end := a.first*r.ps, (a.first+a.n)*r.ps
	first := (start + ps - 1) / ps
	if a.kind == formats.KindMap {
		f.mapped(first, end, r, o)
		return
	}
	for p, n := first, 0; p*ps < end && n < maxPagesPerAccess; p, n = p+1, n+1 {
		if p >= 1<<32 {
			return
		}
		f.page(uint32(p), r, o)
	}
}

// mapped handles a fault-around mapping: the program touched one page of
// the range, which one is unknown. The entry taken is the listed page
// nearest after (or before, in a backward scan) the position its scan is
// at; only that page is parsed.
func (f *lmdbFile) mapped(first, end uint64, r *reader, o *output) {
	ps := uint64(f.psize)
	var best link
	bestD := int32(-1)
	for p, n := first, 0; p*ps < end && n < maxPagesPerAccess && p < 1<<32; p, n = p+1, n+1 {
		l, ok := f.t.lookup(uint32(p))
		if !ok {
			continue
		}
		s := &f.t.pools[l.pool][l.slot]
		if s.last == noLast {
			continue
		}
		d := int32(l.pos) - s.last
		if s.run < 0 {
			d = -d
		}
		if d > 0 && (bestD < 0 || d < bestD) {
			best, bestD = l, d
		}
	}
	if bestD < 0 {
		return
	}
	page := f.t.pools[best.pool][best.slot].kids[best.pos].page
	f.enterAndParse(page, best, r, o)
}

func (f *lmdbFile) page(p uint32, r *reader, o *output) {
	l, ok := f.t.lookup(p)
	if !ok {
		f.parse(p, link{}, 0, r, o)
		return
	}
	f.enterAndParse(p, l, r, o)
}

func (f *lmdbFile) enterAndParse(p uint32, l link, r *reader, o *output) {
	dir := f.t.enter(l, o)
	// Every scan step walks, an overflow run's too: a leaf of big values
	// is a long list of runs, and the walk from its runs is what asks for
	// the next leaf early.
	overflow := f.t.pools[l.pool][l.slot].kids[l.pos].kind == kindOverflow
	if dir != 0 && f.readCached {
		f.walk(l, dir, r, o)
	}
	if overflow {
		return // overflow pages hold values only
	}
	if f.t.reached(p, l) {
		return // a walk parsed it before the scan got there
	}
	f.parse(p, l, dir, r, o)
}

// walk runs the tracker's walk ahead of the scan at l (Config.ReadCached):
// it parses the pages after l that the page cache holds, reading nothing
// that is not cached, so that the next branch's first leaves and a leaf's
// overflow runs are asked for before the program faults on them.
func (f *lmdbFile) walk(l link, dir int, r *reader, o *output) {
	f.t.walk(l, dir, func(c child, in link, dir int, o *output) (link, bool) {
		return f.parseAhead(c.page, in, dir, r, o)
	}, o)
}

// parseAhead parses page p for a walk if it is cached; ok is false when
// it is not (or the kernel cannot tell).
func (f *lmdbFile) parseAhead(p uint32, in link, dir int, r *reader, o *output) (node link, ok bool) {
	if uint64(p) >= f.pages {
		return link{}, true
	}
	pg := f.buf
	cached, unsupported := r.readCached(pg, uint64(p)*uint64(f.psize))
	if unsupported {
		f.readCached = false
	}
	if !cached {
		return link{}, false
	}
	kids, isNode := f.nodes(pg, p, r.st)
	if !isNode {
		return link{}, true
	}
	if s := f.t.addAhead(0, p, kids, in, dir, o); s != nil {
		return s.linkOf(), true
	}
	return link{}, true
}

// parse reads page p and, for a branch page, lists its children in key
// order; for a leaf, the overflow runs of its big values.
func (f *lmdbFile) parse(p uint32, in link, dir int, r *reader, o *output) {
	if uint64(p) >= f.pages {
		f.pages = r.size() / uint64(f.psize)
		if uint64(p) >= f.pages {
			return
		}
	}
	pg := f.buf
	if err := r.readAt(pg, uint64(p)*uint64(f.psize)); err != nil {
		return
	}
	kids, ok := f.nodes(pg, p, r.st)
	if ok {
		f.t.add(0, p, kids, in, dir, o)
	}
}

// nodes returns the traversal list of page p held in pg, ok false for a
// page that is neither a branch nor a plain leaf page.
func (f *lmdbFile) nodes(pg []byte, p uint32, st *Stats) ([]child, bool) {
	le := binary.LittleEndian
	if le.Uint64(pg) != uint64(p) {
		return nil, false // not the start of a page: meta, free or inside an overflow run
	}
	flags := le.Uint16(pg[10:])
	branch := flags&lmdbBranch != 0
	leaf := flags&lmdbLeaf != 0 && flags&(lmdbLeaf2|lmdbSubP) == 0
	if branch == leaf || flags&(lmdbOverflow|lmdbMeta) != 0 {
		return nil, false
	}
	lower, upper := int(le.Uint16(pg[12:])), int(le.Uint16(pg[14:]))
	if lower < lmdbHdr || lower > upper || upper > len(pg) || (lower-lmdbHdr)%2 != 0 {
		st.Malformed++
		return nil, false
	}
	kids := f.t.kids[:0]
	for i := range (lower - lmdbHdr) / 2 {
		off := int(le.Uint16(pg[lmdbHdr+2*i:]))
		if off < upper || off+lmdbNode > len(pg) {
			st.Malformed++
			continue
		}
		nd := pg[off:]
		lo, hi, nf := uint64(le.Uint16(nd)), uint64(le.Uint16(nd[2:])), le.Uint16(nd[4:])
		if branch {
			kids = f.appendPage(kids, lo|hi<<16|uint64(nf)<<32, 1, p, kindNode, st)
			continue
		}
		if nf&lmdbBigData == 0 {
			continue
		}
		data := off + lmdbNode + int(le.Uint16(nd[6:]))
		if data+8 > len(pg) {
			st.Malformed++
			continue
		}
		size := lo | hi<<16
		run := (lmdbHdr - 1 + size) / uint64(f.psize) // OVPAGES
		kids = f.appendPage(kids, le.Uint64(pg[data:]), run+1, p, kindOverflow, st)
	}
	f.t.kids = kids
	return kids, true
}

func (f *lmdbFile) appendPage(kids []child, pg, span uint64, p uint32, kind uint8, st *Stats) []child {
	if pg < 2 || pg == uint64(p) || pg >= f.pages || pg >= 1<<32 || span > f.pages-pg {
		st.Malformed++
		return kids
	}
	return append(kids, child{page: uint32(pg), span: uint32(span), kind: kind})
}
