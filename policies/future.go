package policies

import (
	"cmp"
	"slices"
	"sync"

	"github.com/predictio/predictio/formats"
)

// IsDemand reports whether an access kind is a demand access: a read, a
// page fault, a fault-around mapping (KindMap) or an imported access.
// Cache insertions and deletions and kernel readahead decisions are not.
//
// Map rows count as demand because they are the only evidence of most
// mmap touches: the kernel fires mm_filemap_map_pages when fault-around
// maps cached pages on a fault, and the program then touches them without
// another event (an mmap scan of a cold file fires mm_filemap_fault only a
// few times). replay re-issues them as touches, so simulate, train, markov,
// stride and the oracle's Future count them too. The kernel maps only
// pages already cached, so a map row never triggers readahead: Readahead
// feeds it to MapPages (mmap_miss bookkeeping), not to Read or Fault.
func IsDemand(k formats.AccessKind) bool {
	switch k {
	case formats.KindRead, formats.KindFault, formats.KindMap, formats.KindImported:
		return true
	}
	return false
}

// FutureAccess is one demand access in a Future.
type FutureAccess struct {
	File   uint32
	Page   uint64
	NPages uint32
}

type filePage struct {
	file uint32
	page uint64
}

// Packing of a (file, page) pair into one uint64 of a Future.
const (
	futPageBits  = 40
	futMaxPage   = 1<<futPageBits - 1
	futMaxFile   = 1<<(64-futPageBits) - 1
	futBlockBits = 16 // pages per storage block: 2^16 (512 KiB)
)

// Future is the oracle's knowledge: the demand accesses of a bundle in
// timestamp order, expanded into pages. It takes 8 bytes per page: each
// (file, page) is packed into a uint64 (file ids below 2^24, pages below
// 2^40; a Future holding others switches to 16 bytes per page), stored in
// fixed blocks so that building it never copies what it holds. An access
// of several pages adds 8 bytes for its first page's position.
type Future struct {
	n      int        // accesses
	np     int        // pages
	blocks [][]uint64 // packed pages, futBlockBits per block; unused when wide != nil
	wide   []filePage // every page, once one does not pack
	// first holds the position of each access's first page, plus len(pages)
	// at the end; nil while every access has one page (first[i] == i).
	first []int

	byFileOnce sync.Once
	byFile     map[uint32][]int // per file: positions of that file's pages
}

// maxAccessPages bounds the pages one access contributes to per-page
// state (the oracle's future, markov's seen set), so that a corrupt row
// cannot cause a huge allocation.
const maxAccessPages = 1 << 16

// FutureBuilder builds a Future one access at a time, e.g. while reading a
// bundle, without holding the accesses themselves.
type FutureBuilder struct{ f *Future }

// Add appends an access, which must come after those added before. NPages
// 0 counts as one page; at most 65536 pages of one access are kept.
func (b *FutureBuilder) Add(a FutureAccess) {
	if b.f == nil {
		b.f = &Future{}
	}
	f := b.f
	n := min(max(uint64(a.NPages), 1), maxAccessPages)
	if n != 1 && f.first == nil {
		f.first = make([]int, f.n, f.n+f.n/4+16)
		for i := range f.first {
			f.first[i] = i
		}
	}
	if f.first != nil {
		f.first = append(f.first, f.np)
	}
	for p := range n {
		f.push(a.File, a.Page+p)
	}
	f.n++
}

// Future returns the Future of the accesses added; the builder is reset.
func (b *FutureBuilder) Future() *Future {
	f := b.f
	if f == nil {
		f = &Future{}
	}
	b.f = nil
	if f.first != nil {
		f.first = append(f.first, f.np)
	}
	return f
}

func (f *Future) push(file uint32, page uint64) {
	if f.wide == nil && file <= futMaxFile && page <= futMaxPage {
		k := uint64(file)<<futPageBits | page
		if len(f.blocks) == 0 || len(f.blocks[len(f.blocks)-1]) == 1<<futBlockBits {
			c := 1 << futBlockBits
			if len(f.blocks) == 0 {
				c = 64 // small futures stay small; the first block grows
			}
			f.blocks = append(f.blocks, make([]uint64, 0, c))
		}
		last := &f.blocks[len(f.blocks)-1]
		*last = append(*last, k)
		f.np++
		return
	}
	if f.wide == nil {
		wide := make([]filePage, 0, f.np+1)
		for i := range f.np {
			wide = append(wide, f.at(i))
		}
		f.wide, f.blocks = wide, nil
	}
	f.wide = append(f.wide, filePage{file, page})
	f.np++
}

// at returns page i of the expanded accesses.
func (f *Future) at(i int) filePage {
	if f.wide != nil {
		return f.wide[i]
	}
	k := f.blocks[i>>futBlockBits][i&(1<<futBlockBits-1)]
	return filePage{uint32(k >> futPageBits), k & futMaxPage}
}

// firstPage returns the position of access i's first page; for i == Len(),
// the number of pages.
func (f *Future) firstPage(i int) int {
	if f.first == nil {
		return i
	}
	return f.first[i]
}

// positions returns, per file, the positions of that file's pages,
// computed once.
func (f *Future) positions() map[uint32][]int {
	f.byFileOnce.Do(func() {
		f.byFile = map[uint32][]int{}
		for i := range f.np {
			fp := f.at(i)
			f.byFile[fp.file] = append(f.byFile[fp.file], i)
		}
	})
	return f.byFile
}

// NewFuture returns a Future of accesses, which must be in timestamp
// order. Accesses with NPages 0 count as one page; at most 65536 pages of
// one access are kept.
func NewFuture(accesses []FutureAccess) *Future {
	var b FutureBuilder
	for _, a := range accesses {
		b.Add(a)
	}
	return b.Future()
}

// FutureFromAccesses builds a Future from bundle rows, keeping demand
// accesses (IsDemand) in the order given.
func FutureFromAccesses(rows []formats.Access) *Future {
	var b FutureBuilder
	for _, r := range rows {
		if IsDemand(r.Kind) {
			b.Add(FutureAccess{File: r.FileID, Page: r.FirstPage, NPages: r.NPages})
		}
	}
	return b.Future()
}

// Len returns the number of accesses.
func (f *Future) Len() int { return f.n }

// oracleSearch is how far ahead of its cursor the oracle looks for the
// access it is told about.
const oracleSearch = 64

// oracleWindow holds the distinct pages of positions [lo, front) of a
// page sequence.
type oracleWindow struct {
	seq       []int // positions into the Future's pages; nil means identity
	lo, front int
	// count counts the window's pages by packed key; wideCount is used
	// instead for a Future whose pages do not pack.
	count     map[uint64]int32
	wideCount map[filePage]int32
}

func (w *oracleWindow) at(f *Future, i int) filePage {
	if w.seq != nil {
		return f.at(w.seq[i])
	}
	return f.at(i)
}

// distinct returns the number of distinct pages in the window.
func (w *oracleWindow) distinct() int { return len(w.count) + len(w.wideCount) }

// inc counts fp in and reports whether it is new to the window.
func (w *oracleWindow) inc(f *Future, fp filePage) bool {
	if f.wide == nil {
		if w.count == nil {
			w.count = map[uint64]int32{}
		}
		k := uint64(fp.file)<<futPageBits | fp.page
		c := w.count[k] + 1
		w.count[k] = c
		return c == 1
	}
	if w.wideCount == nil {
		w.wideCount = map[filePage]int32{}
	}
	c := w.wideCount[fp] + 1
	w.wideCount[fp] = c
	return c == 1
}

// dec counts fp out.
func (w *oracleWindow) dec(f *Future, fp filePage) {
	if f.wide == nil {
		k := uint64(fp.file)<<futPageBits | fp.page
		if c := w.count[k]; c <= 1 {
			delete(w.count, k)
		} else {
			w.count[k] = c - 1
		}
		return
	}
	if c := w.wideCount[fp]; c <= 1 {
		delete(w.wideCount, fp)
	} else {
		w.wideCount[fp] = c - 1
	}
}

func (w *oracleWindow) len(f *Future) int {
	if w.seq != nil {
		return len(w.seq)
	}
	return f.np
}

// advance moves the start of the window to pos and refills it up to n
// distinct pages, appending pages that enter it to out.
func (w *oracleWindow) advance(f *Future, pos, n int, out []filePage) []filePage {
	for w.lo < pos && w.lo < w.front {
		w.dec(f, w.at(f, w.lo))
		w.lo++
	}
	if w.lo < pos {
		w.lo, w.front = pos, pos
	}
	end := w.len(f)
	for w.front < end && w.distinct() < n {
		fp := w.at(f, w.front)
		if w.inc(f, fp) {
			out = append(out, fp)
		}
		w.front++
	}
	return out
}

// oracle prefetches the next n distinct pages of the Future ahead of the
// current position, globally or per file.
type oracle struct {
	env     Env
	fut     *Future
	n       int
	perFile bool
	cursor  int // next unmatched access
	global  oracleWindow
	files   map[uint32]*oracleWindow
	out     []filePage
	norm    Normalizer
}

func newOracle(env Env, n int, perFile bool) *oracle {
	o := &oracle{env: env, fut: env.Future, n: n, perFile: perFile, files: map[uint32]*oracleWindow{}}
	o.norm.MaxPages = env.maxPages()
	return o
}

func (o *oracle) Accepts(k EventKind) bool { return k == EventFileAccess }

func (o *oracle) Handle(ev *Event, emit Emit) {
	if !IsDemand(ev.Access.Kind) {
		return
	}
	fut := o.fut
	found := -1
	for i := o.cursor; i < fut.n && i < o.cursor+oracleSearch; i++ {
		if fp := fut.at(fut.firstPage(i)); fp.file == ev.File && fp.page == ev.Access.Page {
			found = i
			break
		}
	}
	if found < 0 {
		return
	}
	o.cursor = found + 1
	pos := fut.firstPage(o.cursor) // first page after this access
	o.out = o.out[:0]
	if o.perFile {
		w := o.files[ev.File]
		if w == nil {
			w = &oracleWindow{seq: fut.positions()[ev.File]}
			o.files[ev.File] = w
		}
		fpos, _ := slices.BinarySearch(w.seq, pos)
		o.out = w.advance(o.fut, fpos, o.n, o.out)
	} else {
		o.out = o.global.advance(o.fut, pos, o.n, o.out)
	}
	if len(o.out) == 0 {
		return
	}
	slices.SortFunc(o.out, func(a, b filePage) int {
		if a.file != b.file {
			return int(a.file) - int(b.file)
		}
		return cmp.Compare(a.page, b.page)
	})
	start := 0
	for i := 1; i <= len(o.out); i++ {
		if i == len(o.out) || o.out[i].file != o.out[start].file {
			file := o.out[start].file
			for _, fp := range o.out[start:i] {
				o.norm.Add(fp.page)
			}
			o.norm.Flush(file, o.env.eof(file), emit)
			start = i
		}
	}
}
