package policies

import (
	"slices"

	"github.com/predictio/predictio/formats"
)

// IsDemand reports whether an access kind is a demand access: a read, a
// page fault, or an imported access. Fault-around mappings, cache
// insertions and deletions and kernel readahead decisions are not.
func IsDemand(k formats.AccessKind) bool {
	return k == formats.KindRead || k == formats.KindFault || k == formats.KindImported
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

// Future is the oracle's knowledge: the demand accesses of a bundle in
// timestamp order.
type Future struct {
	acc   []FutureAccess
	first []int      // index into pages of each access's first page
	pages []filePage // accesses expanded into pages
	// per file: positions (indexes into pages) of that file's pages
	byFile map[uint32][]int
}

// maxAccessPages bounds the pages one access contributes to per-page
// state (the oracle's future, markov's seen set), so that a corrupt row
// cannot cause a huge allocation.
const maxAccessPages = 1 << 16

// NewFuture returns a Future of accesses, which must be in timestamp
// order. Accesses with NPages 0 count as one page; at most 65536 pages of
// one access are kept.
func NewFuture(accesses []FutureAccess) *Future {
	f := &Future{acc: slices.Clone(accesses), first: make([]int, len(accesses)+1), byFile: map[uint32][]int{}}
	for i, a := range f.acc {
		f.first[i] = len(f.pages)
		n := min(max(uint64(a.NPages), 1), maxAccessPages)
		for p := range n {
			f.byFile[a.File] = append(f.byFile[a.File], len(f.pages))
			f.pages = append(f.pages, filePage{a.File, a.Page + p})
		}
	}
	f.first[len(f.acc)] = len(f.pages)
	return f
}

// FutureFromAccesses builds a Future from bundle rows, keeping demand
// accesses (IsDemand) in the order given.
func FutureFromAccesses(rows []formats.Access) *Future {
	acc := make([]FutureAccess, 0, len(rows))
	for _, r := range rows {
		if IsDemand(r.Kind) {
			acc = append(acc, FutureAccess{File: r.FileID, Page: r.FirstPage, NPages: r.NPages})
		}
	}
	return NewFuture(acc)
}

// Len returns the number of accesses.
func (f *Future) Len() int { return len(f.acc) }

// oracleSearch is how far ahead of its cursor the oracle looks for the
// access it is told about.
const oracleSearch = 64

// oracleWindow holds the distinct pages of positions [lo, front) of a
// page sequence.
type oracleWindow struct {
	seq       []int // positions into Future.pages; nil means identity
	lo, front int
	count     map[filePage]int
}

func (w *oracleWindow) at(f *Future, i int) filePage {
	if w.seq != nil {
		return f.pages[w.seq[i]]
	}
	return f.pages[i]
}

func (w *oracleWindow) len(f *Future) int {
	if w.seq != nil {
		return len(w.seq)
	}
	return len(f.pages)
}

// advance moves the start of the window to pos and refills it up to n
// distinct pages, appending pages that enter it to out.
func (w *oracleWindow) advance(f *Future, pos, n int, out []filePage) []filePage {
	for w.lo < pos && w.lo < w.front {
		fp := w.at(f, w.lo)
		if c := w.count[fp]; c <= 1 {
			delete(w.count, fp)
		} else {
			w.count[fp] = c - 1
		}
		w.lo++
	}
	if w.lo < pos {
		w.lo, w.front = pos, pos
	}
	end := w.len(f)
	for w.front < end && len(w.count) < n {
		fp := w.at(f, w.front)
		w.count[fp]++
		if w.count[fp] == 1 {
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
	o.global.count = map[filePage]int{}
	o.norm.MaxPages = env.maxPages()
	return o
}

func (o *oracle) Accepts(k EventKind) bool { return k == EventFileAccess }

func (o *oracle) Handle(ev *Event, emit Emit) {
	if !IsDemand(ev.Access.Kind) {
		return
	}
	acc := o.fut.acc
	found := -1
	for i := o.cursor; i < len(acc) && i < o.cursor+oracleSearch; i++ {
		if acc[i].File == ev.File && acc[i].Page == ev.Access.Page {
			found = i
			break
		}
	}
	if found < 0 {
		return
	}
	o.cursor = found + 1
	pos := o.fut.first[o.cursor] // first page after this access
	o.out = o.out[:0]
	if o.perFile {
		w := o.files[ev.File]
		if w == nil {
			w = &oracleWindow{seq: o.fut.byFile[ev.File], count: map[filePage]int{}}
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
		switch {
		case a.page < b.page:
			return -1
		case a.page > b.page:
			return 1
		}
		return 0
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
