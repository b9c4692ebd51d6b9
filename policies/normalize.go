package policies

import (
	"cmp"
	"slices"
)

// Normalizer turns page lists and ranges into normalized requests: sorted,
// deduplicated, coalesced, clipped at end of file and split into chunks of
// at most MaxPages pages (and at most MaxRanges ranges) per request. It
// reuses its buffers, so steady-state normalization allocates nothing.
//
// Use it incrementally (Add, AddRange, then Flush) or in one call (Pages,
// Ranges). A Normalizer is not safe for concurrent use.
type Normalizer struct {
	// MaxPages bounds the pages of one request; 0 means DefaultMaxPages.
	MaxPages uint32
	// MaxRanges bounds the ranges of one request; 0 means no bound.
	MaxRanges int

	// Clipped counts pages dropped because they were at or beyond EOF.
	Clipped uint64

	pages        []uint64 // single pages (Add)
	buf          []Range  // ranges (AddRange)
	out          []Range
	req          Request
	inReq, total uint64
}

// Add queues one page for the next Flush.
func (n *Normalizer) Add(page uint64) { n.pages = append(n.pages, page) }

// AddRange queues count pages starting at first. count 0 is ignored.
func (n *Normalizer) AddRange(first uint64, count uint32) {
	if count > 0 {
		n.buf = append(n.buf, Range{First: first, N: count})
	}
}

// Pending returns the number of queued ranges.
func (n *Normalizer) Pending() int { return len(n.buf) + len(n.pages) }

// Reset drops queued pages.
func (n *Normalizer) Reset() {
	n.buf = n.buf[:0]
	n.pages = n.pages[:0]
}

// Pages normalizes pages of file and emits the requests. pages is not
// modified. eof is the end of file in pages; 0 means unknown.
func (n *Normalizer) Pages(file uint32, pages []uint64, eof uint64, emit Emit) {
	for _, p := range pages {
		n.Add(p)
	}
	n.Flush(file, eof, emit)
}

// Ranges normalizes ranges of file and emits the requests. rs is not
// modified.
func (n *Normalizer) Ranges(file uint32, rs []Range, eof uint64, emit Emit) {
	for _, r := range rs {
		n.AddRange(r.First, r.N)
	}
	n.Flush(file, eof, emit)
}

func cmpRange(a, b Range) int { return cmp.Compare(a.First, b.First) }

// sortRanges sorts by First: insertion sort for the short lists policies
// usually emit, pdqsort beyond.
func sortRanges(rs []Range) {
	if len(rs) > 24 {
		if !slices.IsSortedFunc(rs, cmpRange) {
			slices.SortFunc(rs, cmpRange)
		}
		return
	}
	for i := 1; i < len(rs); i++ {
		r := rs[i]
		j := i
		for j > 0 && rs[j-1].First > r.First {
			rs[j] = rs[j-1]
			j--
		}
		rs[j] = r
	}
}

// sortPages sorts page numbers: insertion sort for short lists, pdqsort
// beyond.
func sortPages(ps []uint64) {
	if len(ps) > 24 {
		if !slices.IsSorted(ps) {
			slices.Sort(ps)
		}
		return
	}
	for i := 1; i < len(ps); i++ {
		p := ps[i]
		j := i
		for j > 0 && ps[j-1] > p {
			ps[j] = ps[j-1]
			j--
		}
		ps[j] = p
	}
}

// Flush normalizes the queued pages of file, emits them as one or more
// requests and clears the queue. It returns the number of pages emitted.
func (n *Normalizer) Flush(file uint32, eof uint64, emit Emit) uint64 {
	maxPages := uint64(n.MaxPages)
	if maxPages == 0 {
		maxPages = DefaultMaxPages
	}
	n.out = n.out[:0]
	n.inReq, n.total = 0, 0
	if len(n.buf) == 0 {
		// Pages only, the common case of sparse predictions: sort the
		// page numbers themselves.
		pages := n.pages
		n.pages = n.pages[:0]
		if len(pages) == 0 {
			return 0
		}
		sortPages(pages)
		cur, end := pages[0], pages[0]+1
		for _, p := range pages[1:] {
			if p <= end {
				if p == end {
					end++
				}
				continue
			}
			n.put(file, cur, end, eof, maxPages, emit)
			cur, end = p, p+1
		}
		if end == 0 { // page 2^64-1
			end = ^uint64(0)
		}
		n.put(file, cur, end, eof, maxPages, emit)
		n.emitOut(file, emit)
		return n.total
	}
	for _, p := range n.pages {
		n.buf = append(n.buf, Range{First: p, N: 1})
	}
	n.pages = n.pages[:0]
	buf := n.buf
	n.buf = n.buf[:0]
	sortRanges(buf)
	// Coalesce into [cur, end) and cut it into chunks.
	cur, end := buf[0].First, buf[0].First
	for _, r := range buf {
		last := r.First + uint64(r.N)
		if last < r.First { // wrapped
			last = ^uint64(0)
		}
		if r.First <= end {
			if last > end {
				end = last
			}
			continue
		}
		n.put(file, cur, end, eof, maxPages, emit)
		cur, end = r.First, last
	}
	n.put(file, cur, end, eof, maxPages, emit)
	n.emitOut(file, emit)
	return n.total
}

// put appends pages [first, last) to the current request, clipped at eof
// and cut at maxPages.
func (n *Normalizer) put(file uint32, first, last, eof, maxPages uint64, emit Emit) {
	if last <= first {
		return
	}
	if eof > 0 {
		if first >= eof {
			n.Clipped += last - first
			return
		}
		if last > eof {
			n.Clipped += last - eof
			last = eof
		}
	}
	for first < last {
		if n.inReq == maxPages || (n.MaxRanges > 0 && len(n.out) == n.MaxRanges) {
			n.emitOut(file, emit)
		}
		c := min(last-first, maxPages-n.inReq)
		n.out = append(n.out, Range{First: first, N: uint32(c)})
		n.inReq += c
		n.total += c
		first += c
	}
}

func (n *Normalizer) emitOut(file uint32, emit Emit) {
	if len(n.out) > 0 {
		n.req.File = file
		n.req.Ranges = n.out
		emit(&n.req)
		n.out = n.out[:0]
		n.inReq = 0
	}
}

// Valid reports whether req is normalized with the given bound: ranges
// non-empty, sorted, disjoint, non-adjacent, and at most maxPages pages in
// all. It is meant for tests and for backends that validate input.
func (req *Request) Valid(maxPages uint32) bool {
	var total uint64
	for i, r := range req.Ranges {
		if r.N == 0 {
			return false
		}
		if i > 0 {
			p := req.Ranges[i-1]
			if p.First+uint64(p.N) >= r.First {
				return false
			}
		}
		total += uint64(r.N)
	}
	return len(req.Ranges) > 0 && (maxPages == 0 || total <= uint64(maxPages))
}

// Pages returns the number of pages named by req.
func (req *Request) Pages() uint64 {
	var t uint64
	for _, r := range req.Ranges {
		t += uint64(r.N)
	}
	return t
}
