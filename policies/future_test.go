package policies

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/predictio/predictio/formats"
)

// TestFuturePacking checks a Future against a plain expansion of its
// accesses: single-page ones (identity positions), multi-page ones, more
// than one storage chunk, and accesses that do not pack (left out).
func TestFuturePacking(t *testing.T) {
	for _, tc := range []struct {
		name        string
		multi, huge bool
	}{{"single", false, false}, {"multi", true, false}, {"single-huge", false, true}, {"multi-huge", true, true}} {
		rng := rand.New(rand.NewSource(1))
		var acc []FutureAccess
		for i := 0; i < 3<<chunkBits/2; i++ {
			a := FutureAccess{File: uint32(rng.Intn(5)), Page: uint64(rng.Intn(1 << 20)), NPages: 1}
			if tc.multi && rng.Intn(100) == 0 {
				a.NPages = uint32(rng.Intn(5))
			}
			if i == 7 {
				a.File, a.Page = futMaxFile, futMaxPage
			}
			if tc.huge && i == 5000 {
				a.File = 1 << 30
			}
			acc = append(acc, a)
		}
		var pages []uint64
		var first []uint64
		byFile := map[uint32][]uint64{}
		kept := 0
		for _, a := range acc {
			if a.File > futMaxFile {
				continue
			}
			kept++
			first = append(first, uint64(len(pages)))
			for p := range max(uint64(a.NPages), 1) {
				byFile[a.File] = append(byFile[a.File], uint64(len(pages)))
				pages = append(pages, futKey(a.File, a.Page+p))
			}
		}
		first = append(first, uint64(len(pages)))
		f := NewFuture(acc)
		if f.Len() != kept || f.np != uint64(len(pages)) || f.Skipped() != uint64(len(acc)-kept) {
			t.Fatalf("%s: %d accesses, %d pages, %d skipped; want %d, %d, %d", tc.name, f.Len(), f.np, f.Skipped(), kept, len(pages), len(acc)-kept)
		}
		if f.ident == tc.multi {
			t.Errorf("%s: identity positions %v", tc.name, f.ident)
		}
		for i, want := range pages {
			if got := f.pages.at(uint64(i)); got != want {
				t.Fatalf("%s: page %d is %x, want %x", tc.name, i, got, want)
			}
		}
		for i, want := range first {
			if got := f.firstPage(uint64(i)); got != want {
				t.Fatalf("%s: access %d starts at %d, want %d", tc.name, i, got, want)
			}
		}
		got := map[uint32][]uint64{}
		for file, s := range f.fileSeqs() {
			got[file] = s.pos
		}
		if !reflect.DeepEqual(got, byFile) {
			t.Errorf("%s: per-file positions differ", tc.name)
		}
	}
}

// refOracle is the oracle's definition, written plainly. After access i
// the window of a scope (the whole trace, or the accessed file) is the
// pages of that scope from pos, the first position after access i, up to
// front: the earliest end where the window holds n distinct pages (or
// horizon pages past pos, or the end), but never before the window's
// previous front. The pages that enter, those after the previous front
// not already between pos and it, are prefetched: a page demanded again
// later enters anew once the demand has passed it.
type refOracle struct {
	pages   []uint64 // packed, expanded
	first   []int
	n, h    int
	perFile bool
	front   map[uint32]int // previous front by scope (file, or 0 for global)
}

func newRefOracle(acc []FutureAccess, n, h int, perFile bool) *refOracle {
	r := &refOracle{n: n, h: h, perFile: perFile, front: map[uint32]int{}}
	for _, a := range acc {
		r.first = append(r.first, len(r.pages))
		for p := range min(max(uint64(a.NPages), 1), maxAccessPages) {
			r.pages = append(r.pages, futKey(a.File, a.Page+p))
		}
	}
	r.first = append(r.first, len(r.pages))
	return r
}

func (r *refOracle) after(i int, file uint32) []uint64 {
	pos := r.first[i+1]
	scope := uint32(0)
	if r.perFile {
		scope = file
	}
	in := func(p int) bool { return !r.perFile || uint32(r.pages[p]>>futPageBits) == file }
	old := max(r.front[scope], pos)
	held := map[uint64]bool{}
	for p := pos; p < old; p++ {
		if in(p) {
			held[r.pages[p]] = true
		}
	}
	win := map[uint64]bool{}
	front := pos
	for ; front < len(r.pages) && front < pos+r.h && len(win) < r.n; front++ {
		if in(front) {
			win[r.pages[front]] = true
		}
	}
	front = max(front, old)
	var enter []uint64
	for p := old; p < front; p++ {
		if k := r.pages[p]; in(p) && !held[k] {
			held[k] = true
			enter = append(enter, k)
		}
	}
	r.front[scope] = front
	slices.Sort(enter)
	return enter
}

// TestOracleMatchesReference: the oracle, from a materialized Future and
// from a streamed one fed only as far as Needs asks (and trimmed behind),
// prefetches exactly the pages the plain definition says, for both scopes
// and for horizons that bind.
func TestOracleMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var acc []FutureAccess
	for i := 0; i < 6000; i++ {
		a := FutureAccess{File: uint32(rng.Intn(3)), Page: uint64(rng.Intn(300)), NPages: uint32(rng.Intn(3))}
		if rng.Intn(50) == 0 {
			a.NPages = 300 // runs longer than a horizon
		}
		acc = append(acc, a)
	}
	for _, tc := range []struct {
		n, h    int
		perFile bool
	}{{16, 0, false}, {64, 0, true}, {16, 40, false}, {8, 20, true}, {300, 300, false}} {
		spec := fmt.Sprintf("oracle:n=%d,horizon=%d", tc.n, tc.h)
		h := tc.h
		if h == 0 {
			h = max(DefaultHorizon, 16*tc.n)
		}
		if tc.perFile {
			spec += ",scope=file"
		}
		for _, streamed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streamed=%v", spec, streamed), func(t *testing.T) {
				ref := newRefOracle(acc, tc.n, h, tc.perFile)
				fut := NewFuture(acc)
				if streamed {
					fut = NewStreamFuture()
				}
				p := mustBuild(t, spec, Env{Future: fut})
				fed := 0
				for i, a := range acc {
					for streamed && fut.Needs(i) {
						if fed == len(acc) {
							fut.Close()
							continue
						}
						fut.Add(acc[fed])
						fed++
					}
					var got []uint64
					p.Handle(access(a.File, a.Page, a.NPages), func(r *Request) {
						for _, rg := range r.Ranges {
							for q := range uint64(rg.N) {
								got = append(got, futKey(r.File, rg.First+q))
							}
						}
					})
					slices.Sort(got)
					if want := ref.after(i, a.File); !slices.Equal(got, want) {
						t.Fatalf("access %d (%v): prefetched %x, want %x", i, a, got, want)
					}
				}
				if streamed && fed > 0 && len(fut.pages.chunks) > 2 {
					t.Errorf("streamed future holds %d chunks at the end", len(fut.pages.chunks))
				}
			})
		}
	}
}

// TestStreamFutureStaysBounded: 100 000 accesses of 256 pages each (a
// bundle of 1 MiB reads) streamed through the oracle keep at most a
// horizon and two chunks of pages, not 25.6 M of them.
func TestStreamFutureStaysBounded(t *testing.T) {
	fut := NewStreamFuture()
	p := mustBuild(t, "oracle", Env{Future: fut})
	const n = 100_000
	a := func(i int) FutureAccess { return FutureAccess{File: 1, Page: uint64(i) * 256, NPages: 256} }
	fed, most := 0, 0
	for i := 0; i < n; i++ {
		for fut.Needs(i) {
			if fed == n {
				fut.Close()
				continue
			}
			fut.Add(a(fed))
			fed++
		}
		p.Handle(access(1, uint64(i)*256, 256), func(*Request) {})
		held := int(fut.pages.n - fut.pages.base)
		most = max(most, held)
	}
	if limit := DefaultHorizon + 2<<chunkBits + 256; most > limit {
		t.Fatalf("streamed future held up to %d pages, limit %d", most, limit)
	}
	if fut.np != n*256 {
		t.Fatalf("fed %d pages", fut.np)
	}
}

// TestMapRowsAreDemand: fault-around map rows are demand (replay re-issues
// them as touches), so the oracle's Future holds them and the oracle both
// follows them and prefetches their pages; cache insertions and readahead
// decisions are not. The readahead model sees a map row only through
// MapPages: it never reads ahead for one.
func TestMapRowsAreDemand(t *testing.T) {
	for k, want := range map[formats.AccessKind]bool{
		formats.KindRead: true, formats.KindFault: true, formats.KindMap: true, formats.KindImported: true,
		formats.KindCacheAdd: false, formats.KindReadaheadSync: false,
	} {
		if IsDemand(k) != want {
			t.Errorf("IsDemand(%v) = %v, want %v", k, !want, want)
		}
	}
	rows := []formats.Access{
		{FileID: 1, FirstPage: 0, NPages: 1, Kind: formats.KindFault},
		{FileID: 1, FirstPage: 40, NPages: 2, Kind: formats.KindCacheAdd},
		{FileID: 1, FirstPage: 16, NPages: 2, Kind: formats.KindMap},
		{FileID: 1, FirstPage: 30, NPages: 1, Kind: formats.KindMap},
	}
	fut := FutureFromAccesses(rows)
	if fut.Len() != 3 {
		t.Fatalf("future holds %d accesses, want 3 (fault and 2 map rows)", fut.Len())
	}
	p := mustBuild(t, "oracle:n=3", Env{Future: fut})
	var got []Request
	p.Handle(&Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindFault, Page: 0, NPages: 1}}, collect(&got))
	if pg := pagesOf(got); !slices.Equal(pg, []uint64{16, 17, 30}) {
		t.Fatalf("oracle after the fault prefetched %v, want the mapped pages 16, 17, 30", pg)
	}
	got = nil
	p.Handle(&Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindMap, Page: 16, NPages: 2}}, collect(&got))
	if len(got) != 0 { // window already holds 30; nothing new enters
		t.Fatalf("oracle after the map row emitted %+v", got)
	}
	ra := mustBuild(t, "readahead", Env{FilePages: func(uint32) uint64 { return 1000 }})
	got = nil
	ra.Handle(&Event{Kind: EventFileAccess, File: 2, Access: FileAccess{Kind: formats.KindMap, Page: 0, NPages: 16}}, collect(&got))
	if len(got) != 0 {
		t.Fatalf("readahead read ahead for a map row: %+v", got)
	}
	ra.Handle(&Event{Kind: EventFileAccess, File: 2, Access: FileAccess{Kind: formats.KindRead, Page: 0, NPages: 1}}, collect(&got))
	if len(got) == 0 {
		t.Fatal("readahead did not read ahead for a read: the check above proves nothing")
	}
}
