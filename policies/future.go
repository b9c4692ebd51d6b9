package policies

import (
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
func IsDemand(k formats.AccessKind) bool { return k.Demand() }

// FutureAccess is one demand access in a Future.
type FutureAccess struct {
	File   uint32
	Page   uint64
	NPages uint32
}

// Packing of a (file, page) pair into one uint64 of a Future.
const (
	futPageBits = 40
	futMaxPage  = 1<<futPageBits - 1
	futMaxFile  = 1<<(64-futPageBits) - 1
)

func futKey(file uint32, page uint64) uint64 { return uint64(file)<<futPageBits | page }

// maxAccessPages bounds the pages one access contributes to per-page
// state (the oracle's future, markov's seen set), so that a corrupt row
// cannot cause a huge allocation.
const maxAccessPages = 1 << 16

// DefaultHorizon is how many pages ahead of the current access the oracle
// looks, by default, for its next n distinct pages: at least this, and at
// least 16 n.
const DefaultHorizon = 1 << 16

// Future is the oracle's knowledge: the demand accesses of a bundle in
// timestamp order, expanded into pages, each (file, page) packed into a
// uint64 (file ids below 2^24, pages below 2^40; accesses beyond them are
// left out and counted by Skipped). At most 65536 pages of one access are
// kept.
//
// A Future is either materialized, built whole by a FutureBuilder (8 bytes
// per page, plus 8 per access once one has several pages) and then
// read-only, so that several lanes may share it; or streamed
// (NewStreamFuture): its owner adds accesses as it reads them, ahead of
// the access being served, while Needs says more are wanted, and the
// oracle drops what lies behind it. A streamed Future holds about the
// oracle's horizon, whatever the bundle's size.
type Future struct {
	pages  chunked // packed pages, by position
	first  chunked // position of each access's first page, unless ident
	ident  bool    // every access so far has one page: first[i] == i
	na, np uint64  // accesses and pages added

	stream, closed bool
	oracles        []*oracle // attached, for trimming and the horizon
	horizon        uint64    // the largest horizon of oracles
	skipped        uint64

	// File-scope sequences: for a materialized Future built once on first
	// use; for a streamed one kept up as accesses are added, once an
	// oracle of file scope is attached.
	byFileOnce sync.Once
	byFile     map[uint32]*fileSeq
	lastFile   uint32
	lastSeq    *fileSeq
}

// NewStreamFuture returns an empty streamed Future.
func NewStreamFuture() *Future { return &Future{ident: true, stream: true} }

// Streaming reports whether f is streamed.
func (f *Future) Streaming() bool { return f.stream }

// Attached reports whether a policy built with f reads it.
func (f *Future) Attached() bool { return len(f.oracles) > 0 }

// Skipped returns the number of accesses left out because their file id
// or page does not pack. A streamed Future's owner must not add such
// accesses (simulate refuses them before): Needs counts accesses added.
func (f *Future) Skipped() uint64 { return f.skipped }

// Add appends an access, which must come after those added before. NPages
// 0 counts as one page.
func (f *Future) Add(a FutureAccess) {
	if a.File > futMaxFile || a.Page > futMaxPage {
		f.skipped++
		return
	}
	n := min(max(uint64(a.NPages), 1), maxAccessPages, futMaxPage+1-a.Page)
	if n != 1 && f.ident {
		f.ident = false
		f.first.base = f.pagesBaseAccess()
		f.first.n = f.first.base
		for i := f.first.base; i < f.na; i++ {
			f.first.push(i)
		}
	}
	if !f.ident {
		f.first.push(f.np)
	}
	for p := range n {
		k := futKey(a.File, a.Page+p)
		if f.byFile != nil {
			f.seq(a.File).push(f.np, k)
		}
		f.pages.push(k)
		f.np++
	}
	f.na++
}

// pagesBaseAccess is the first access still held while ident holds.
func (f *Future) pagesBaseAccess() uint64 { return f.pages.base }

// Close marks a streamed Future complete: no more accesses follow.
func (f *Future) Close() { f.closed = true }

// Needs reports whether a streamed Future wants more accesses before its
// owner serves access k (0-based, in the order added): until access k is
// in and the pages after it reach the horizon of every attached oracle,
// or the Future is closed.
func (f *Future) Needs(k int) bool {
	if !f.stream || f.closed {
		return false
	}
	if uint64(k) >= f.na {
		return true
	}
	return f.np < f.firstPage(uint64(k)+1)+f.horizon
}

// firstPage returns the position of access i's first page; for i == na,
// the number of pages.
func (f *Future) firstPage(i uint64) uint64 {
	if f.ident || i == f.na {
		if i == f.na {
			return f.np
		}
		return i
	}
	return f.first.at(i)
}

// Upcoming returns the page d positions past the front of the window of
// f's first attached oracle of global scope: one the oracle is about to
// request, for its owner to prefetch memory for. ok is false when there is
// none (no such oracle, or not fed that far).
func (f *Future) Upcoming(d int) (file uint32, page uint64, ok bool) {
	for _, o := range f.oracles {
		if o.perFile {
			continue
		}
		if p := o.global.front + uint64(d); p >= f.pages.base && p < f.np {
			k := f.pages.at(p)
			return uint32(k >> futPageBits), k & futMaxPage, true
		}
		return 0, 0, false
	}
	return 0, 0, false
}

// Held returns the number of pages f holds in memory.
func (f *Future) Held() uint64 { return f.pages.n - f.pages.base }

// Len returns the number of accesses.
func (f *Future) Len() int { return int(f.na) }

// FutureBuilder builds a materialized Future one access at a time, e.g.
// while reading a bundle, without holding the accesses themselves.
type FutureBuilder struct{ f *Future }

// Add appends an access, which must come after those added before. NPages
// 0 counts as one page; at most 65536 pages of one access are kept.
func (b *FutureBuilder) Add(a FutureAccess) {
	if b.f == nil {
		b.f = &Future{ident: true}
	}
	b.f.Add(a)
}

// Future returns the Future of the accesses added; the builder is reset.
func (b *FutureBuilder) Future() *Future {
	f := b.f
	if f == nil {
		f = &Future{ident: true}
	}
	b.f = nil
	f.closed = true
	return f
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

// seq returns the file-scope sequence of file.
func (f *Future) seq(file uint32) *fileSeq {
	if f.lastSeq != nil && f.lastFile == file {
		return f.lastSeq
	}
	s := f.byFile[file]
	if s == nil {
		s = &fileSeq{}
		f.byFile[file] = s
	}
	f.lastFile, f.lastSeq = file, s
	return s
}

// fileSeqs returns the file-scope sequences, building them once for a
// materialized Future.
func (f *Future) fileSeqs() map[uint32]*fileSeq {
	if f.stream {
		if f.byFile == nil {
			f.byFile = map[uint32]*fileSeq{}
			for i := f.pages.base; i < f.np; i++ {
				k := f.pages.at(i)
				f.seq(uint32(k>>futPageBits)).push(i, k)
			}
		}
		return f.byFile
	}
	f.byFileOnce.Do(func() {
		f.byFile = map[uint32]*fileSeq{}
		for i := uint64(0); i < f.np; i++ {
			k := f.pages.at(i)
			f.seq(uint32(k>>futPageBits)).push(i, k)
		}
		f.lastSeq = nil
	})
	return f.byFile
}

// trim drops what no attached oracle needs any more (streamed only).
func (f *Future) trim() {
	lo, acc := f.np, f.na
	for _, o := range f.oracles {
		acc = min(acc, uint64(o.cursor))
		if o.perFile {
			lo = min(lo, f.firstPage(uint64(o.cursor)))
		} else {
			lo = min(lo, o.global.lo)
		}
	}
	f.pages.trim(lo)
	if !f.ident {
		f.first.trim(acc)
	}
}

// chunked is an append-only sequence of uint64 in fixed chunks, indexed by
// absolute position; trim drops whole chunks from the front. Growing never
// copies what it holds.
type chunked struct {
	chunks [][]uint64
	base   uint64 // absolute index of chunks[0][0]
	n      uint64 // absolute end
	spare  []uint64
}

const chunkBits = 16

func (c *chunked) push(v uint64) {
	if len(c.chunks) == 0 || len(c.chunks[len(c.chunks)-1]) == 1<<chunkBits {
		var ch []uint64
		switch {
		case c.spare != nil:
			ch, c.spare = c.spare[:0], nil
		case len(c.chunks) == 0 && c.base == 0:
			ch = make([]uint64, 0, 64) // small futures stay small; the first chunk grows
		default:
			ch = make([]uint64, 0, 1<<chunkBits)
		}
		c.chunks = append(c.chunks, ch)
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, v)
	c.n++
}

func (c *chunked) at(i uint64) uint64 {
	i -= c.base
	return c.chunks[i>>chunkBits][i&(1<<chunkBits-1)]
}

// trim drops the chunks that lie wholly before lo.
func (c *chunked) trim(lo uint64) {
	for len(c.chunks) > 1 && c.base+1<<chunkBits <= lo {
		if cap(c.chunks[0]) == 1<<chunkBits {
			c.spare = c.chunks[0]
		}
		c.chunks[0] = nil
		c.chunks = c.chunks[1:]
		c.base += 1 << chunkBits
	}
}

// fileSeq is one file's pages of a Future, with their global positions.
type fileSeq struct {
	pos, key []uint64
	off      int // absolute index of pos[0]: entries before it were dropped
}

func (s *fileSeq) push(pos, key uint64) {
	s.pos = append(s.pos, pos)
	s.key = append(s.key, key)
}

func (s *fileSeq) end() int           { return s.off + len(s.pos) }
func (s *fileSeq) posAt(i int) uint64 { return s.pos[i-s.off] }
func (s *fileSeq) keyAt(i int) uint64 { return s.key[i-s.off] }

// search returns the first index at or after from whose position is at
// least pos.
func (s *fileSeq) search(from int, pos uint64) int {
	i, _ := slices.BinarySearch(s.pos[from-s.off:], pos)
	return from + i
}

// drop forgets the entries before index i (streamed Futures), compacting
// now and then.
func (s *fileSeq) drop(i int) {
	if k := i - s.off; k > 1024 && 2*k > len(s.pos) {
		n := copy(s.pos, s.pos[k:])
		copy(s.key, s.key[k:])
		s.pos, s.key, s.off = s.pos[:n], s.key[:n], i
	}
}

// oracleSearch is how far ahead of its cursor the oracle looks for the
// access it is told about.
const oracleSearch = 64

// oracle prefetches the next n distinct pages of the Future ahead of the
// current position, within horizon pages, globally or per file.
type oracle struct {
	env     Env
	fut     *Future
	n       int
	horizon int
	perFile bool
	cursor  int // next unmatched access
	global  window
	files   map[uint32]*window
	out     []uint64
	norm    Normalizer
	// one is the request of a single page.
	one      Request
	oneRange [1]Range
}

func newOracle(env Env, n, horizon int, perFile bool) *oracle {
	o := &oracle{env: env, fut: env.Future, n: n, horizon: horizon, perFile: perFile, files: map[uint32]*window{}}
	o.norm.MaxPages = env.maxPages()
	if o.fut.stream { // a materialized Future stays read-only: lanes share it
		o.fut.oracles = append(o.fut.oracles, o)
		o.fut.horizon = max(o.fut.horizon, uint64(horizon))
		if perFile {
			o.fut.fileSeqs()
		}
	}
	return o
}

func (o *oracle) Accepts(k EventKind) bool { return k == EventFileAccess }

func (o *oracle) Handle(ev *Event, emit Emit) {
	if !IsDemand(ev.Access.Kind) || ev.File > futMaxFile || ev.Access.Page > futMaxPage {
		return
	}
	fut := o.fut
	want := futKey(ev.File, ev.Access.Page)
	found := -1
	for i := o.cursor; uint64(i) < fut.na && i < o.cursor+oracleSearch; i++ {
		if fut.pages.at(fut.firstPage(uint64(i))) == want {
			found = i
			break
		}
	}
	if found < 0 {
		return
	}
	o.cursor = found + 1
	pos := fut.firstPage(uint64(o.cursor)) // first page after this access
	limit := pos + uint64(o.horizon)
	o.out = o.out[:0]
	if o.perFile {
		o.out = o.fileAdvance(ev.File, pos, limit)
	} else {
		o.out = o.global.advance(fut, pos, limit, o.n, o.out)
	}
	if fut.stream {
		fut.trim()
	}
	switch len(o.out) {
	case 0:
		return
	case 1:
		// One new page, the common case: the request Flush would make.
		k := o.out[0]
		file, p := uint32(k>>futPageBits), k&futMaxPage
		if eof := o.env.eof(file); eof > 0 && p >= eof {
			o.norm.Clipped++
			return
		}
		o.oneRange[0] = Range{First: p, N: 1}
		o.one = Request{File: file, Ranges: o.oneRange[:]}
		emit(&o.one)
		return
	}
	slices.Sort(o.out) // by file, then page
	start := 0
	for i := 1; i <= len(o.out); i++ {
		if i == len(o.out) || o.out[i]>>futPageBits != o.out[start]>>futPageBits {
			file := uint32(o.out[start] >> futPageBits)
			for _, k := range o.out[start:i] {
				o.norm.Add(k & futMaxPage)
			}
			o.norm.Flush(file, o.env.eof(file), emit)
			start = i
		}
	}
}

// fileAdvance advances the window of file to the pages of that file from
// position pos on.
func (o *oracle) fileAdvance(file uint32, pos, limit uint64) []uint64 {
	s := o.fut.fileSeqs()[file]
	if s == nil {
		return o.out
	}
	w := o.files[file]
	if w == nil {
		w = &window{lo: uint64(s.off), front: uint64(s.off)}
		o.files[file] = w
	}
	out := w.advanceSeq(s, pos, limit, o.n, o.out)
	if o.fut.stream {
		s.drop(int(w.lo))
	}
	return out
}

// window holds the distinct pages of entries [lo, front) of a page
// sequence, counted by packed key.
type window struct {
	lo, front uint64
	counts    countTable
}

// advance moves the window over the Future's pages to start at pos and
// refills it, up to position limit, to n distinct pages, appending the
// pages that enter it to out.
func (w *window) advance(f *Future, pos, limit uint64, n int, out []uint64) []uint64 {
	for w.lo < pos && w.lo < w.front {
		w.counts.dec(f.pages.at(w.lo))
		w.lo++
	}
	if w.lo < pos {
		w.lo, w.front = pos, pos
	}
	end := min(f.np, limit)
	for w.front < end && w.counts.n < n {
		if k := f.pages.at(w.front); w.counts.inc(k) {
			out = append(out, k)
		}
		w.front++
	}
	return out
}

// advanceSeq is advance over a file's sequence: it starts at the first
// entry at position pos or later.
func (w *window) advanceSeq(s *fileSeq, pos, limit uint64, n int, out []uint64) []uint64 {
	for w.lo < w.front && s.posAt(int(w.lo)) < pos {
		w.counts.dec(s.keyAt(int(w.lo)))
		w.lo++
	}
	if w.lo == w.front {
		i := uint64(s.search(int(w.lo), pos))
		w.lo, w.front = i, i
	}
	end := uint64(s.end())
	for w.front < end && s.posAt(int(w.front)) < limit && w.counts.n < n {
		if k := s.keyAt(int(w.front)); w.counts.inc(k) {
			out = append(out, k)
		}
		w.front++
	}
	return out
}

// countTable counts packed keys: linear probing, load at most 1/8 (so
// that a probe rarely goes past its home slot and a deletion rarely
// shifts: the window adds and removes a key per access; 96 bytes per
// key), backward-shift deletion. n is the number of distinct keys.
type countTable struct {
	keys   []uint64 // key+1; 0 empty
	counts []int32
	mask   uint64
	shift  uint8
	n      int
}

func (t *countTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

func (t *countTable) grow() {
	size := max(2*len(t.keys), 16)
	old, oldc := t.keys, t.counts
	t.keys, t.counts = make([]uint64, size), make([]int32, size)
	t.mask = uint64(size - 1)
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	for i, k := range old {
		if k != 0 {
			j := t.slot(k - 1)
			for t.keys[j] != 0 {
				j = (j + 1) & t.mask
			}
			t.keys[j], t.counts[j] = k, oldc[i]
		}
	}
}

// inc counts k in and reports whether it is new.
func (t *countTable) inc(k uint64) bool {
	if 8*(t.n+1) > len(t.keys) {
		t.grow()
	}
	j := t.slot(k)
	for t.keys[j] != 0 {
		if t.keys[j] == k+1 {
			t.counts[j]++
			return false
		}
		j = (j + 1) & t.mask
	}
	t.keys[j], t.counts[j] = k+1, 1
	t.n++
	return true
}

// dec counts k out.
func (t *countTable) dec(k uint64) {
	if len(t.keys) == 0 {
		return
	}
	j := t.slot(k)
	for t.keys[j] != k+1 {
		if t.keys[j] == 0 {
			return
		}
		j = (j + 1) & t.mask
	}
	if t.counts[j]--; t.counts[j] > 0 {
		return
	}
	t.n--
	for { // backward-shift deletion
		t.keys[j] = 0
		i := j
		for {
			i = (i + 1) & t.mask
			if t.keys[i] == 0 {
				return
			}
			home := t.slot(t.keys[i] - 1)
			if (i > j && (home <= j || home > i)) || (i < j && home <= j && home > i) {
				t.keys[j], t.counts[j] = t.keys[i], t.counts[i]
				j = i
				break
			}
		}
	}
}
