package policies

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/predictio/predictio/formats"
)

// TestFuturePacking checks the packed Future against a plain expansion of
// its accesses: single-page ones (identity positions), multi-page ones,
// more than one storage block, and a page too large to pack arriving late
// (the switch to 16-byte pages).
func TestFuturePacking(t *testing.T) {
	for _, tc := range []struct {
		name           string
		multi, hugeEnd bool
	}{{"single", false, false}, {"multi", true, false}, {"single-then-huge", false, true}, {"multi-then-huge", true, true}} {
		rng := rand.New(rand.NewSource(1))
		var acc []FutureAccess
		for i := 0; i < 3<<futBlockBits/2; i++ {
			a := FutureAccess{File: uint32(rng.Intn(5)), Page: uint64(rng.Intn(1 << 20)), NPages: 1}
			if tc.multi && rng.Intn(100) == 0 {
				a.NPages = uint32(rng.Intn(5))
			}
			if i == 7 {
				a.File = futMaxFile
				a.Page = futMaxPage
			}
			acc = append(acc, a)
		}
		if tc.hugeEnd {
			acc = append(acc, FutureAccess{File: 1 << 30, Page: 1 << 50, NPages: 2})
		}
		var pages []filePage
		var first []int
		byFile := map[uint32][]int{}
		for _, a := range acc {
			first = append(first, len(pages))
			for p := range max(uint64(a.NPages), 1) {
				byFile[a.File] = append(byFile[a.File], len(pages))
				pages = append(pages, filePage{a.File, a.Page + p})
			}
		}
		first = append(first, len(pages))
		f := NewFuture(acc)
		if f.Len() != len(acc) || f.np != len(pages) {
			t.Fatalf("%s: %d accesses, %d pages; want %d, %d", tc.name, f.Len(), f.np, len(acc), len(pages))
		}
		if (f.wide != nil) != tc.hugeEnd || (f.first != nil) != (tc.multi || tc.hugeEnd) {
			t.Errorf("%s: wide %v, first %v", tc.name, f.wide != nil, f.first != nil)
		}
		for i, want := range pages {
			if got := f.at(i); got != want {
				t.Fatalf("%s: page %d is %v, want %v", tc.name, i, got, want)
			}
		}
		for i, want := range first {
			if got := f.firstPage(i); got != want {
				t.Fatalf("%s: access %d starts at %d, want %d", tc.name, i, got, want)
			}
		}
		if !reflect.DeepEqual(f.positions(), byFile) {
			t.Errorf("%s: per-file positions differ", tc.name)
		}
	}
}

// TestOracleWideFutureMatches checks that the oracle emits the same
// requests from a packed Future as from the same Future held unpacked.
func TestOracleWideFutureMatches(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var acc []FutureAccess
	for i := 0; i < 4000; i++ {
		acc = append(acc, FutureAccess{File: uint32(rng.Intn(3)), Page: uint64(rng.Intn(300)), NPages: uint32(rng.Intn(3))})
	}
	packed := NewFuture(acc)
	wide := NewFuture(acc)
	var pages []filePage
	for i := range wide.np {
		pages = append(pages, wide.at(i))
	}
	wide.wide, wide.blocks = pages, nil
	for _, spec := range []string{"oracle:n=16", "oracle:n=64,scope=file"} {
		var got [2][]string
		for j, f := range []*Future{packed, wide} {
			p := mustBuild(t, spec, Env{Future: f, FilePages: func(uint32) uint64 { return 400 }})
			for _, a := range acc {
				p.Handle(access(a.File, a.Page, a.NPages), func(r *Request) { got[j] = append(got[j], fmt.Sprint(r.File, r.Ranges)) })
			}
		}
		if len(got[0]) == 0 || !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("%s: packed %d requests, wide %d, or they differ", spec, len(got[0]), len(got[1]))
		}
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
