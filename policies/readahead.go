package policies

import (
	"math/bits"

	"github.com/predictio/predictio/formats"
)

// Readahead model constants (the same in Linux 6.1, 6.12 and 6.18).
const (
	// DefaultReadaheadKB is the kernel's default read_ahead_kb
	// (VM_READAHEAD_PAGES).
	DefaultReadaheadKB = 128
	// MmapLotsaMiss is MMAP_LOTSAMISS: mmap read-around stops once a file's
	// mmap_miss exceeds it.
	MmapLotsaMiss = 100
	// maxPagecacheOrder is MAX_PAGECACHE_ORDER on x86-64 with THP (PMD
	// order); ext4 and XFS cap folios at the same order.
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
	// RAExec is the VM_EXEC branch of do_sync_mmap_readahead (Linux 6.16
	// and later): a fault on an executable mapping missed the page cache.
	RAExec
	numRAKinds
)

// String returns the kind's name: sync, async, mmap or exec.
func (k RAKind) String() string {
	switch k {
	case RASync:
		return "sync"
	case RAAsync:
		return "async"
	case RAMmap:
		return "mmap"
	case RAExec:
		return "exec"
	}
	return "unknown"
}

// RAState is the readahead state of one open file (struct file_ra_state).
// Order is ra->order, which Linux 6.16 added; it stays 0 on older kernels.
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
// readahead:page_cache_sync_ra / page_cache_async_ra report (RAMmap and
// RAExec have no tracepoint of their own); Window is set when the decision
// reached page_cache_ra_order, whose tracepoint reports (After.Start,
// After.Size, After.AsyncSize, After.Order) as they are on entry.
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
	// Kernel selects the kernel whose readahead the model follows: Linux
	// 6.1 code before 6.11, 6.12 code from 6.11 to 6.15, 6.18 code from
	// 6.16 on. The zero value means the running kernel.
	Kernel KernelVersion
	// RAPages is the readahead maximum in pages (read_ahead_kb / 4 with
	// 4 KiB pages) of files FileRA knows nothing about; 0 means
	// DefaultReadaheadKB.
	RAPages uint64
	// IOPages is the device's optimal I/O size in pages (bdi io_pages,
	// max_sectors_kb / 4); reads larger than RAPages may use windows up to
	// it. 0 means RAPages.
	IOPages uint64
	// Folios says whether page_cache_ra_order allocates large folios
	// (up to order 9) or order-0 pages; FoliosAuto follows Kernel for
	// ext4 (large from 6.16).
	Folios Folios
	// FileRA returns the readahead parameters of one file's device; its
	// zero fields fall back to RAPages, IOPages and Folios. nil: none.
	FileRA func(file uint32) RAParams
	// PageSize converts FileRA's kilobytes to pages; 0 means
	// DefaultPageSize.
	PageSize int
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

// FaultInfo describes one page fault on a file mapping.
type FaultInfo struct {
	// Page is the faulting file page (vmf->pgoff).
	Page uint64
	// Prot is the mapping's protection (formats.ProtRead, ProtExec, ...);
	// 0 is unknown and treated as a plain read mapping.
	Prot uint8
	// MapFirst and MapPages are the mapping's file range (vm_pgoff and the
	// VMA's length in pages); MapPages 0 is unknown (no clamp).
	MapFirst, MapPages uint64
	// Retry is the second attempt of a fault whose first attempt dropped
	// the mmap lock for I/O (FAULT_FLAG_TRIED): it finds the page cached
	// and does no readahead and no mmap_miss accounting.
	Retry bool
}

// Readahead is a model of Linux on-demand readahead: mm/readahead.c
// (page_cache_sync_ra, page_cache_async_ra, page_cache_ra_order,
// do_page_cache_ra; ondemand_readahead in 6.1) and its callers in
// mm/filemap.c (filemap_read/filemap_get_pages, filemap_fault with
// do_sync_mmap_readahead and do_async_mmap_readahead, filemap_map_pages),
// as Linux 6.1, 6.12 and 6.18 run them (ReadaheadConfig.Kernel). It is a
// Policy: FileAccess events of kind read and fault drive it, and it emits
// the pages each decision inserts into the page cache (for a sync window
// this includes the demanded page, which the kernel reads as part of the
// window). Accesses of kind map (fault-around) only lower mmap_miss.
//
// Read (and imported) accesses are treated as one read call covering
// [Page, Page+NPages); faults as one page fault at Page, on a mapping with
// the access's Prot and file range. Not modelled: VM_HUGEPAGE,
// VM_SEQ_READ and VM_RAND_READ mappings (madvise), fadvise modes, I/O
// errors, memory pressure (workingset refaults), folios still locked for
// I/O when a fault or fault-around meets them, and several processes
// sharing one file description (the model keeps one file_ra_state per
// file).
type Readahead struct {
	cfg ReadaheadConfig
	era raEra
	// ioAuto: IOPages was 0, so a file's io_pages is its ra_pages unless
	// FileRA knows the device's.
	ioAuto bool
	files  fileTable[raFile]
	norm   Normalizer
	dec    RADecision
	// one is readMiss's request: one range of one page.
	one      Request
	oneRange [1]Range
	// Decisions counts decisions by kind.
	Decisions [numRAKinds]uint64
}

type raFile struct {
	id    uint32
	st    RAState
	pages pageMap // per page: raPresent | raMark | folio order
	// raPages and ioPages are the file's ra_pages and bdi io_pages; large
	// says whether its mapping supports large folios.
	raPages, ioPages uint64
	large            bool
	// The file's previous fault, to recognise a retried attempt when the
	// access does not say (Op 0).
	lastOp   uint64
	lastTID  uint32
	lastPage uint64
	lastOK   bool
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
	ioAuto := cfg.IOPages == 0
	if ioAuto {
		cfg.IOPages = cfg.RAPages
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Kernel == (KernelVersion{}) {
		cfg.Kernel = RunningKernel()
	}
	r := &Readahead{cfg: cfg, era: eraOf(cfg.Kernel), ioAuto: ioAuto}
	r.norm.MaxPages = cfg.MaxPages
	return r
}

// Kernel returns the kernel version the model follows.
func (r *Readahead) Kernel() KernelVersion { return r.cfg.Kernel }

// Accepts reports true for FileAccess events.
func (r *Readahead) Accepts(k EventKind) bool { return k == EventFileAccess }

// Handle feeds one access to the model and emits the pages it reads ahead.
func (r *Readahead) Handle(ev *Event, emit Emit) {
	a := &ev.Access
	switch a.Kind {
	case formats.KindRead, formats.KindImported:
		r.Read(ev.File, a.Page, uint64(max(a.NPages, 1)), emit)
		if f := r.files.get(ev.File); f != nil {
			f.lastOK = false
		}
	case formats.KindFault:
		f := r.file(ev.File)
		fi := FaultInfo{Page: a.Page, Prot: a.Prot, MapFirst: a.MapFirst, MapPages: a.MapPages}
		if a.Op != 0 {
			fi.Retry = f.lastOK && a.Op == f.lastOp
		} else {
			fi.Retry = f.lastOK && ev.TID == f.lastTID && a.Page == f.lastPage
		}
		f.lastOp, f.lastTID, f.lastPage, f.lastOK = a.Op, ev.TID, a.Page, true
		r.FaultWith(ev.File, fi, emit)
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
		r.params(f)
		r.files.put(id, f)
	}
	return f
}

// params sets f's readahead parameters from FileRA and the configuration.
func (r *Readahead) params(f *raFile) {
	f.raPages, f.ioPages = r.cfg.RAPages, r.cfg.IOPages
	folios := r.cfg.Folios
	if r.cfg.FileRA != nil {
		p := r.cfg.FileRA(f.id)
		kb := uint64(r.cfg.PageSize) / 1024
		if p.ReadAheadKB > 0 && kb > 0 {
			f.raPages = max(uint64(p.ReadAheadKB)/kb, 1)
			if r.ioAuto {
				f.ioPages = f.raPages
			}
		}
		if p.MaxSectorsKB > 0 && kb > 0 {
			f.ioPages = max(uint64(p.MaxSectorsKB)/kb, 1)
		}
		if p.Folios != FoliosAuto {
			folios = p.Folios
		}
	}
	f.large = folios.large(r.era)
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
		if raMissPath && r.readMiss(f, index, emit) {
			return
		}
	}
	for pos < last && (eof == 0 || pos < eof) {
		if !r.present(f, pos) {
			if r.era == era61 && pos > index {
				// 6.1's filemap_read sets prev_pos after every batch
				// it copies; later kernels once, when the call ends.
				f.st.PrevPos = int64(pos) * DefaultPageSize
			}
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

// ReadPage is Handle of a one-page read (or imported) access at index of
// file, for a caller whose Resident callback it would ask: here and before
// are what Resident says now of page index and page index-1. It saves
// those calls and the Event; the model does what Handle does.
func (r *Readahead) ReadPage(file uint32, index uint64, here, before bool, emit Emit) {
	f := r.file(file)
	defer func() { f.lastOK = false }()
	eof := r.eof(file)
	if r.cfg.Resident == nil || eof > 0 && index >= eof || !raMissPath {
		r.Read(file, index, 1, emit)
		return
	}
	b := f.pages.get(index)
	if here {
		if b&raMark == 0 { // Read's fast path
			f.st.PrevPos = int64(index+1) * DefaultPageSize
			return
		}
	} else if b != 0 {
		f.pages.set(index, 0) // present(index) forgets an evicted page
	}
	if here || before || !r.readMissOK(f, index) {
		r.Read(file, index, 1, emit)
		return
	}
	if f.pages.get(index-1) != 0 {
		f.pages.set(index-1, 0) // present(index-1), likewise
	}
	r.readMissDo(f, index, emit)
}

// raMissPath turns readMiss on; tests turn it off to compare.
var raMissPath = true

// readMiss is Read's path for the small random read, kept flat: a one-page
// read at index (before end of file) that misses, whose page before is
// missing too, and that does not follow the previous read. The general
// path makes it a sync decision that reads the page alone
// (page_cache_sync_ra finds no cached history before index and calls
// do_page_cache_ra for one page), leaving the state but prev_pos; so does
// this, with the same decision, pages and request. It reports false,
// having changed nothing the general path would not (present forgets
// evicted pages), when the read is not such a read. Linux 6.1's
// ondemand_readahead takes the general path.
func (r *Readahead) readMiss(f *raFile, index uint64, emit Emit) bool {
	if !r.readMissOK(f, index) || r.present(f, index) || r.present(f, index-1) {
		return false
	}
	r.readMissDo(f, index, emit)
	return true
}

// readMissOK reports whether a read at index that misses, as does the
// page before it, is readMiss's small random read.
func (r *Readahead) readMissOK(f *raFile, index uint64) bool {
	return r.era != era61 && index != 0 && index-uint64(f.st.PrevPos)>>12 > 1
}

// readMissDo makes readMiss's decision.
func (r *Readahead) readMissDo(f *raFile, index uint64, emit Emit) {
	r.begin(f, RASync, index, 1)
	f.pages.set(index, raPresent) // insert of one order-0 page, unmarked
	r.dec.Pages = 1
	r.Decisions[RASync]++
	if r.cfg.OnDecision != nil {
		r.dec.After = f.st
		r.cfg.OnDecision(&r.dec)
	}
	r.one.File = f.id
	r.oneRange[0] = Range{First: index, N: 1}
	r.one.Ranges = r.oneRange[:]
	emit(&r.one)
	f.st.PrevPos = int64(index+1) * DefaultPageSize
}

// PageState returns the address of the model's byte for page of file,
// or nil when it holds none there yet, for a simulator to prefetch the
// memory the model is about to read for an access a few events ahead.
func (r *Readahead) PageState(file uint32, page uint64) *uint8 {
	f := r.files.get(file)
	if f == nil {
		return nil
	}
	c := f.pages.peek(page)
	if c == nil {
		return nil
	}
	return &c[page&(pageChunk-1)]
}

// Fault models one read fault at page of a plain (not executable) mapping;
// see FaultWith.
func (r *Readahead) Fault(file uint32, page uint64, emit Emit) {
	r.FaultWith(file, FaultInfo{Page: page}, emit)
}

// FaultWith models one page fault (filemap_fault): a cached page goes
// through do_async_mmap_readahead, a missing one through
// do_sync_mmap_readahead, which on Linux 6.16 and later reads an executable
// mapping from the fault on, clamped to the mapping, without a PG_readahead
// mark.
func (r *Readahead) FaultWith(file uint32, fi FaultInfo, emit Emit) {
	f := r.file(file)
	eof := r.eof(file)
	page := fi.Page
	if eof > 0 && page >= eof {
		return // SIGBUS
	}
	if fi.MapPages > 0 && (page < fi.MapFirst || page-fi.MapFirst >= fi.MapPages) {
		fi.MapFirst, fi.MapPages = 0, 0 // inconsistent: the range is unknown
	}
	if r.present(f, page) {
		if fi.Retry {
			return // FAULT_FLAG_TRIED: no do_async_mmap_readahead
		}
		// do_async_mmap_readahead
		if f.st.MmapMiss > 0 {
			f.st.MmapMiss--
		}
		head, np, marked := r.folio(f, page)
		if marked {
			r.clearMark(f, head)
			r.asyncRA(f, page, f.raPages, np, eof, emit)
		}
		return
	}
	// do_sync_mmap_readahead
	if f.st.MmapMiss < MmapLotsaMiss*10 {
		f.st.MmapMiss++
	}
	if f.st.MmapMiss <= MmapLotsaMiss {
		r.readAround(f, fi, eof, emit)
	}
	if !r.present(f, page) {
		f.pages.set(page, raPresent)
	}
}

// readAround sets the window of a fault that missed and submits it.
func (r *Readahead) readAround(f *raFile, fi FaultInfo, eof uint64, emit Emit) {
	ra := f.raPages
	st := &f.st
	page := fi.Page
	if r.era == era618 && fi.Prot&formats.ProtExec != 0 {
		// VM_EXEC: exec_folio_order() is 0 on x86-64, so the window
		// starts at the fault; it ends ra_pages later or at the end of
		// the mapping, and has no async part.
		r.begin(f, RAExec, page, ra)
		start := max(page, fi.MapFirst)
		end := start + ra
		if fi.MapPages > 0 {
			end = min(end, fi.MapFirst+fi.MapPages)
		}
		st.Start, st.Size, st.AsyncSize, st.Order = start, end-start, 0, 0
	} else {
		r.begin(f, RAMmap, page, ra)
		start := uint64(0)
		if page > ra/2 {
			start = page - ra/2
		}
		st.Start, st.Size, st.AsyncSize, st.Order = start, ra, ra/4, 0
	}
	r.raOrder(f, eof, 0)
	r.end(f, emit)
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

// windowed records the state page_cache_ra_order sees on entry.
func (r *Readahead) windowed(f *raFile) {
	r.dec.Window = true
	if r.cfg.OnDecision != nil {
		r.dec.After = f.st
	}
}

func (r *Readahead) end(f *raFile, emit Emit) {
	r.Decisions[r.dec.Kind]++
	if r.cfg.OnDecision != nil {
		if !r.dec.Window {
			r.dec.After = f.st
		}
		r.cfg.OnDecision(&r.dec)
	}
	if r.norm.Pending() > 0 {
		r.norm.Flush(f.id, 0, emit)
	}
}

// maxPages is ractl_max_pages: a read larger than ra_pages may use windows
// up to the device's io_pages.
func (f *raFile) maxPages(req uint64) uint64 {
	m := f.raPages
	if req > m && f.ioPages > m {
		m = min(req, f.ioPages)
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
	if r.era == era61 {
		r.ondemand61(f, index, req, false, 0, eof)
		return
	}
	st := &f.st
	max := f.maxPages(req)
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
	if r.era == era618 {
		st.Order = 0
	}
	r.raOrder(f, eof, 0)
}

// asyncRA is page_cache_async_ra, triggered by the marked folio of
// folioPages pages.
func (r *Readahead) asyncRA(f *raFile, index, req, folioPages, eof uint64, emit Emit) {
	r.begin(f, RAAsync, index, req)
	defer r.end(f, emit)
	order := uint64(bits.TrailingZeros64(folioPages))
	if r.era == era61 {
		r.ondemand61(f, index, req, true, order, eof)
		return
	}
	st := &f.st
	max := f.maxPages(req)
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
	if r.era == era612 {
		st.AsyncSize = st.Size
		r.raOrder(f, eof, order)
		return
	}
	st.Order += 2
	align := uint64(1) << min(uint64(st.Order), uint64(bits.TrailingZeros64(max)))
	end := st.Start + st.Size
	if aligned := end &^ (align - 1); aligned > st.Start {
		st.Size -= end - aligned
	}
	st.AsyncSize = st.Size
	r.raOrder(f, eof, 0)
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
