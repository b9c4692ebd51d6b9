package policies

import (
	"math/rand"
	"reflect"
	"testing"
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
