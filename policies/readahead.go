package policies

import (
	"math/bits"

	"github.com/predictio/predictio/formats"
)

// Readahead model constants, as in Linux 6.18.
const (
	// DefaultReadaheadKB is the kernel's default read_ahead_kb
	// (VM_READAHEAD_PAGES).
	DefaultReadaheadKB = 128
	// MmapLotsaMiss is MMAP_LOTSAMISS: mmap read-around stops once a file's
	// mmap_miss exceeds it.
	MmapLotsaMiss = 100
	// maxPagecacheOrder is MAX_PAGECACHE_ORDER on x86-64 with THP (PMD
	// order); ext4 caps folios at the same order.
	maxPagecacheOrder = 9
)

// maxUnboundedRead bounds a read of a file whose end is unknown: 1<<20
// pages, 4 GiB with 4 KiB pages.
const maxUnboundedRead = 1 << 20

// RAKind says which kernel path made a readahead decision.
type RAKind uint8

// Readahead decision kinds.
const (
	// RASync is page_cache_sync_ra: a read missed the page cache.
	RASync RAKind = iota + 1
	// RAAsync is page_cache_async_ra: a read or fault hit a folio marked
	// PG_readahead.
	RAAsync
	// RAMmap is the mmap read-around of do_sync_mmap_readahead: a fault
	// missed the page cache.
	RAMmap
)

// String returns the kind's name: sync, async or mmap.
func (k RAKind) String() string {
	switch k {
	case RASync:
		return "sync"
	case RAAsync:
		return "async"
	case RAMmap:
		return "mmap"
	}
	return "unknown"
}

// RAState is the readahead state of one open file (struct file_ra_state).
type RAState struct {
	Start     uint64
	Size      uint64
	AsyncSize uint64
	Order     uint32
	MmapMiss  uint32
	PrevPos   int64 // byte after the previous read; -1 before any read
}

// RADecision is one readahead decision of the model. It mirrors the
// kernel's tracepoints: Kind, Index, ReqCount and Before are what
// readahead:page_cache_sync_ra / page_cache_async_ra report (RAMmap has no
// tracepoint of its own); Window is set when the decision reached
// page_cache_ra_order, whose tracepoint reports (After.Start, After.Size,
// After.AsyncSize, After.Order).
type RADecision struct {
	File     uint32
	Kind     RAKind
	Index    uint64
	ReqCount uint64
	Before   RAState
	After    RAState
	// Window is true when a readahead window was submitted through
	// page_cache_ra_order; false for the small-random-read path, which
	// reads ReqCount pages without touching the state, and for triggers
	// that decided not to read.
	Window bool
	// Pages is the number of pages the decision inserted into the cache.
	Pages uint64
}

// ReadaheadConfig configures the readahead model.
type ReadaheadConfig struct {
	// RAPages is the readahead maximum in pages (read_ahead_kb / 4 with
	// 4 KiB pages); 0 means DefaultReadaheadKB.
	RAPages uint64
	// IOPages is the device's optimal I/O size in pages (bdi io_pages,
	// max_sectors_kb / 4); reads larger than RAPages may use windows up to
	// it. 0 means RAPages.
	IOPages uint64
	// SmallFolios disables the large-folio model (page_cache_ra_order
	// allocating folios up to order 9, as ext4 does since Linux 6.16) and
	// uses order-0 pages only, as filesystems without large folio support.
	SmallFolios bool
	// FilePages returns end of file in pages; 0 means unknown (no clip).
	FilePages func(file uint32) uint64
	// Resident, when set, is the authority on page-cache residency (a
	// simulator's cache, in which pages this model emits are resident,
	// including in-flight ones, as soon as emit returns). When nil the
	// model remembers the pages it and demand reads brought in, forever.
	Resident func(file uint32, page uint64) bool
	// OnDecision, when set, receives every decision.
	OnDecision func(*RADecision)
	// MaxPages bounds emitted requests; 0 means DefaultMaxPages.
	MaxPages uint32
}

// Readahead is a model of Linux 6.18 on-demand readahead (mm/readahead.c
// page_cache_sync_ra and page_cache_async_ra, mm/filemap.c filemap_read,
// filemap_fault and its mmap read-around). It is a Policy: FileAccess
// events of kind read and fault drive it, and it emits the pages each
// decision inserts into the page cache (for a sync window this includes
// the demanded page, which the kernel reads as part of the window).
// Accesses of kind map (fault-around) only lower mmap_miss.
//
// Read (and imported) accesses are treated as one read call covering
// [Page, Page+NPages); faults as one page fault at Page. Not modelled: VM_EXEC
// and VM_HUGEPAGE mappings, madvise/fadvise modes, I/O errors, memory
// pressure, and several processes sharing one file description (the model
// keeps one file_ra_state per file).
type Readahead struct {
	cfg   ReadaheadConfig
	files fileTable[raFile]
	norm  Normalizer
	dec   RADecision
	// Decisions counts decisions by kind.
	Decisions [4]uint64
}

type raFile struct {
	id    uint32
	st    RAState
	pages pageMap // per page: raPresent | raMark | folio order
}

const (
	raPresent = 0x80
	raMark    = 0x40 // on every page of a PG_readahead folio
	raOrder   = 0x0f
)

// NewReadahead returns a readahead model.
func NewReadahead(cfg ReadaheadConfig) *Readahead {
	if cfg.RAPages == 0 {
		cfg.RAPages = DefaultReadaheadKB * 1024 / DefaultPageSize
	}
	if cfg.IOPages == 0 {
		cfg.IOPages = cfg.RAPages
	}
	r := &Readahead{cfg: cfg}
	r.norm.MaxPages = cfg.MaxPages
	return r
}

// Accepts reports true for FileAccess events.
func (r *Readahead) Accepts(k EventKind) bool { return k == EventFileAccess }

// Handle feeds one access to the model and emits the pages it reads ahead.
func (r *Readahead) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	switch a.Kind {
	case formats.KindRead, formats.KindImported:
		r.Read(ev.File, a.Page, uint64(max(a.NPages, 1)), emit)
	case formats.KindFault:
		r.Fault(ev.File, a.Page, emit)
	case formats.KindMap:
		r.MapPages(ev.File, a.Page, uint64(a.NPages))
	}
}

// OnDecision sets the function that receives every decision (nil: none),
// e.g. on a model built by Build("readahead", env).
func (r *Readahead) OnDecision(fn func(*RADecision)) { r.cfg.OnDecision = fn }

// State returns the readahead state of file.
func (r *Readahead) State(file uint32) RAState { return r.file(file).st }

// Reset forgets all files.
func (r *Readahead) Reset() {
	r.files.reset()
}

func (r *Readahead) file(id uint32) *raFile {
	f := r.files.get(id)
	if f == nil {
		f = &raFile{id: id, st: RAState{PrevPos: -1}}
		r.files.put(id, f)
	}
	return f
}

func (r *Readahead) eof(id uint32) uint64 {
	if r.cfg.FilePages == nil {
		return 0
	}
	return r.cfg.FilePages(id)
}

func (r *Readahead) present(f *raFile, p uint64) bool {
	if r.cfg.Resident != nil {
		ok := r.cfg.Resident(f.id, p)
		if !ok && f.pages.get(p) != 0 {
			f.pages.set(p, 0) // evicted: forget its folio and mark
		}
		return ok
	}
	return f.pages.get(p)&raPresent != 0
}

// folio returns the head and page count of the folio holding present page p.
func (r *Readahead) folio(f *raFile, p uint64) (head uint64, n uint64, marked bool) {
	b := f.pages.get(p)
	if b&raPresent == 0 {
		return p, 1, false
	}
	n = 1 << (b & raOrder)
	return p &^ (n - 1), n, b&raMark != 0
}

func (r *Readahead) insert(f *raFile, idx uint64, order uint8, mark bool) {
	n := uint64(1) << order
	b := raPresent | order
	if mark {
		b |= raMark
	}
	f.pages.fill(idx, n, b) // folios are aligned: within one chunk
	r.norm.AddRange(idx, uint32(n))
	r.dec.Pages += n
}

func (r *Readahead) clearMark(f *raFile, head uint64) {
	b := f.pages.get(head) &^ raMark
	f.pages.fill(head, uint64(1)<<(b&raOrder), b)
}

// Read models one read call of n pages at index (filemap_read).
func (r *Readahead) Read(file uint32, index, n uint64, emit Emit) {
	f := r.file(file)
	eof := r.eof(file)
	if n == 0 {
		return
	}
	if eof == 0 && n > maxUnboundedRead {
		n = maxUnboundedRead // bound a bogus length when EOF is unknown
	}
	last := index + n
	if last < index {
		last = ^uint64(0)
	}
	pos := index
	if n == 1 && (eof == 0 || index < eof) {
		// Fast path: a one-page read of a cached page without a mark.
		if b := f.pages.get(index); b&raMark == 0 && r.present(f, index) {
			f.st.PrevPos = int64(last) * DefaultPageSize
			return
		}
	}
	for pos < last && (eof == 0 || pos < eof) {
		if !r.present(f, pos) {
			r.syncRA(f, pos, last-pos, eof, emit)
			if !r.present(f, pos) {
				f.pages.set(pos, raPresent) // filemap_create_folio
			}
		}
		// filemap_get_read_batch: consecutive present folios, ending at
		// a gap, at the end of the read or at a PG_readahead folio.
		// The page at pos is in the cache now (a Resident callback may not
		// know yet): always consume its folio, so the loop progresses.
		p := pos
		var head, np uint64
		var marked bool
		for p < last && (p == pos || r.present(f, p)) {
			head, np, marked = r.folio(f, p)
			p = head + np
			if marked {
				break
			}
		}
		if marked {
			r.clearMark(f, head)
			r.asyncRA(f, head, last-head, np, eof, emit)
		}
		pos = min(p, last)
	}
	if eof > 0 && pos > eof {
		pos = eof
	}
	f.st.PrevPos = int64(pos) * DefaultPageSize
}

// Fault models one page fault at page (filemap_fault).
func (r *Readahead) Fault(file uint32, page uint64, emit Emit) {
	f := r.file(file)
	eof := r.eof(file)
	if eof > 0 && page >= eof {
		return // SIGBUS
	}
	if r.present(f, page) {
		// do_async_mmap_readahead
		if f.st.MmapMiss > 0 {
			f.st.MmapMiss--
		}
		head, np, marked := r.folio(f, page)
		if marked {
			r.clearMark(f, head)
			r.asyncRA(f, page, r.cfg.RAPages, np, eof, emit)
		}
		return
	}
	// do_sync_mmap_readahead
	if f.st.MmapMiss < MmapLotsaMiss*10 {
		f.st.MmapMiss++
	}
	if f.st.MmapMiss <= MmapLotsaMiss {
		r.begin(f, RAMmap, page, r.cfg.RAPages)
		ra := r.cfg.RAPages
		start := uint64(0)
		if page > ra/2 {
			start = page - ra/2
		}
		f.st.Start, f.st.Size, f.st.AsyncSize, f.st.Order = start, ra, ra/4, 0
		r.raOrder(f, eof)
		r.end(f, emit)
	}
	if !r.present(f, page) {
		f.pages.set(page, raPresent)
	}
}

// MapPages models fault-around mapping pages [first, first+n): cached
// pages mapped without a fault lower mmap_miss (filemap_map_pages).
func (r *Readahead) MapPages(file uint32, first, n uint64) {
	f := r.file(file)
	var hits uint32
	n = min(n, maxAccessPages) // fault-around covers fault_around_bytes
	for p := first; p < first+n && p >= first; p++ {
		if r.present(f, p) {
			if _, _, marked := r.folio(f, p); !marked {
				hits++
			}
		}
	}
	f.st.MmapMiss -= min(hits, f.st.MmapMiss)
}

func (r *Readahead) begin(f *raFile, k RAKind, index, req uint64) {
	d := &r.dec
	d.Kind, d.Window, d.Pages = k, false, 0
	if r.cfg.OnDecision != nil {
		d.File, d.Index, d.ReqCount, d.Before = f.id, index, req, f.st
	}
	r.norm.Reset()
}

func (r *Readahead) end(f *raFile, emit Emit) {
	r.Decisions[r.dec.Kind]++
	if r.cfg.OnDecision != nil {
		r.dec.After = f.st
		r.cfg.OnDecision(&r.dec)
	}
	if r.norm.Pending() > 0 {
		r.norm.Flush(f.id, 0, emit)
	}
}

func (r *Readahead) maxPages(req uint64) uint64 {
	m := r.cfg.RAPages
	if req > m && r.cfg.IOPages > m {
		m = min(req, r.cfg.IOPages)
	}
	return m
}

func initRASize(size, max uint64) uint64 {
	n := uint64(1)
	if size > 1 {
		n = 1 << bits.Len64(size-1)
	}
	switch {
	case n <= max/32:
		return n * 4
	case n <= max/4:
		return n * 2
	}
	return max
}

func nextRASize(cur, max uint64) uint64 {
	switch {
	case cur < max/16:
		return 4 * cur
	case cur <= max/2:
		return 2 * cur
	}
	return max
}

// syncRA is page_cache_sync_ra.
func (r *Readahead) syncRA(f *raFile, index, req, eof uint64, emit Emit) {
	r.begin(f, RASync, index, req)
	defer r.end(f, emit)
	st := &f.st
	max := r.maxPages(req)
	prevIndex := uint64(st.PrevPos) >> 12
	if index == 0 || req > max || index-prevIndex <= 1 {
		st.Start = index
		st.Size = initRASize(req, max)
		if st.Size > req {
			st.AsyncSize = st.Size - req
		} else {
			st.AsyncSize = st.Size >> 1
		}
	} else {
		miss := r.prevMiss(f, index-1, max)
		contig := index - miss - 1
		if contig <= req {
			r.doPageCacheRA(f, index, req, 0, eof)
			return
		}
		if miss == ^uint64(0) {
			contig *= 2
		}
		st.Start = index
		st.Size = min(contig+req, max)
		st.AsyncSize = 1
	}
	st.Order = 0
	r.raOrder(f, eof)
}

// asyncRA is page_cache_async_ra, triggered by the marked folio of
// folioPages pages.
func (r *Readahead) asyncRA(f *raFile, index, req, folioPages, eof uint64, emit Emit) {
	r.begin(f, RAAsync, index, req)
	defer r.end(f, emit)
	st := &f.st
	max := r.maxPages(req)
	expected := (st.Start + st.Size - st.AsyncSize) &^ (folioPages - 1)
	if index == expected {
		st.Start += st.Size
		st.Size = maxU(st.Size, nextRASize(st.Size, max))
	} else {
		start := r.nextMiss(f, index+1, max)
		if start == 0 || start-index > max {
			return
		}
		st.Start = start
		st.Size = nextRASize(start-index+req, max)
	}
	st.Order += 2
	align := uint64(1) << min(uint64(st.Order), uint64(bits.TrailingZeros64(max)))
	end := st.Start + st.Size
	if aligned := end &^ (align - 1); aligned > st.Start {
		st.Size -= end - aligned
	}
	st.AsyncSize = st.Size
	r.raOrder(f, eof)
}

// xarray leaf nodes hold 64 slots; folios of order 1 to 5 occupy several
// slots of one leaf (a canonical slot plus sibling slots).
const xaChunkMask = 63

// lag returns how far page p is from the canonical slot of its folio
// when that folio lives in an xarray leaf node (order 1 to 5). A walk
// started there with xas_next/xas_prev reads slots that far behind the
// index it reports, until it crosses the leaf's boundary; the kernel's
// page_cache_next_miss and page_cache_prev_miss inherit that, and so does
// this model.
func (r *Readahead) lag(f *raFile, p uint64) uint64 {
	b := f.pages.get(p)
	if b&raPresent == 0 || r.cfg.Resident != nil && !r.cfg.Resident(f.id, p) {
		return 0
	}
	o := b & raOrder
	if o == 0 || o > 5 {
		return 0
	}
	return p & (1<<o - 1)
}

// nextMiss is page_cache_next_miss(index, max): the first index of a gap
// in [index, index+max), or index+max when there is none.
func (r *Readahead) nextMiss(f *raFile, index, max uint64) uint64 {
	rep, off := index, index-r.lag(f, index)
	act := index // the first load reads the folio itself
	for n := max; n > 0; n-- {
		if !r.present(f, act) {
			return rep
		}
		if off&xaChunkMask == xaChunkMask {
			rep++
			off = rep // climbs to the parent and descends at rep
		} else {
			rep++
			off++
		}
		act = off
		if rep == 0 {
			return 0 // wrapped
		}
	}
	return rep
}

// prevMiss is page_cache_prev_miss(index, max): the last index of a gap
// in [index-max+1, index], index-max when there is none, or ULONG_MAX when
// the walk wrapped below page 0. A walk that starts lagging (see lag)
// keeps reading a block below the index it reports once it crosses a leaf
// boundary, as the kernel's xas_prev does; the gap it reports is then the
// index it had reached when it read an empty slot.
func (r *Readahead) prevMiss(f *raFile, index, max uint64) uint64 {
	rep, act := index, index
	off := index - r.lag(f, index)
	for n := max; n > 0; n-- {
		if !r.present(f, act) {
			return rep
		}
		if off&xaChunkMask != 0 {
			rep--
			off--
			act = off
			continue
		}
		rep--
		if rep&xaChunkMask == 0 && rep == off {
			act = off // offset already matches: re-read the same slot
			continue
		}
		// The offset wraps: climb until a slot to the left exists, then
		// descend at rep's offsets.
		k := uint(6)
		for (off>>k)&xaChunkMask == 0 {
			if off>>k == 0 {
				return rep // fell off the root: set_bounds, NULL
			}
			k += 6
		}
		off = ((off>>k)-1)<<k | rep&(1<<k-1)
		act = off
		if !r.blockUsed(f, act) {
			return rep
		}
	}
	return rep
}

// blockUsed reports whether any page of the 64-page xarray leaf holding p
// is present, i.e. whether the leaf node exists.
func (r *Readahead) blockUsed(f *raFile, p uint64) bool {
	base := p &^ xaChunkMask
	for i := range uint64(64) {
		if r.present(f, base+i) {
			return true
		}
	}
	return false
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// raOrder is page_cache_ra_order: allocate the window [Start, Start+Size)
// in folios and mark the folio holding Start+Size-AsyncSize.
func (r *Readahead) raOrder(f *raFile, eof uint64) {
	r.dec.Window = true
	st := &f.st
	start := st.Start
	if r.cfg.SmallFolios {
		st.Order = 0
		r.doPageCacheRA(f, start, st.Size, st.AsyncSize, eof)
		return
	}
	if eof > 0 && start >= eof {
		return // limit < index: nothing allocated, no fallback reads
	}
	// Linux 6.18 marks the folio at start+size-async even when the
	// window reaches end of file (later kernels skip the mark there).
	limit := start + st.Size - 1
	mark := start + st.Size - st.AsyncSize
	if eof > 0 && eof-1 < limit {
		limit = eof - 1
	}
	newOrder := min(uint64(maxPagecacheOrder), uint64(st.Order), uint64(bits.Len64(st.Size)-1))
	st.Order = uint32(newOrder)
	idx := start
	failed := false
	for idx <= limit {
		order := newOrder
		if idx&(1<<order-1) != 0 {
			order = uint64(bits.TrailingZeros64(idx))
		}
		for order > 0 && idx+(1<<order)-1 > limit {
			order--
		}
		n := uint64(1) << order
		busy := false
		for i := range n {
			if r.present(f, idx+i) {
				busy = true
				break
			}
		}
		if busy {
			failed = true
			break
		}
		r.insert(f, idx, uint8(order), mark&^(n-1) == idx)
		idx += n
	}
	if !failed {
		return
	}
	if st.Size > idx-start {
		r.doPageCacheRA(f, idx, st.Size-(idx-start), st.AsyncSize, eof)
	}
}

// doPageCacheRA is do_page_cache_ra + page_cache_ra_unbounded: order-0
// pages, skipping present ones, marking page nr-lookahead.
func (r *Readahead) doPageCacheRA(f *raFile, index, nr, lookahead, eof uint64) {
	if eof > 0 {
		if index > eof-1 {
			return
		}
		if nr > eof-1-index {
			nr = eof - index
		}
	}
	mark := nr - lookahead
	for i := range nr {
		if r.present(f, index+i) {
			continue
		}
		r.insert(f, index+i, 0, i == mark && lookahead > 0)
	}
}
