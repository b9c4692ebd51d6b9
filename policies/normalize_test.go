package policies

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func collect(reqs *[]Request) Emit {
	return func(r *Request) {
		*reqs = append(*reqs, Request{File: r.File, Ranges: slices.Clone(r.Ranges)})
	}
}

func TestNormalizerPages(t *testing.T) {
	var n Normalizer
	var got []Request
	n.Pages(7, []uint64{5, 3, 4, 10, 10, 11, 100, 4}, 0, collect(&got))
	want := []Range{{3, 3}, {10, 2}, {100, 1}}
	if len(got) != 1 || got[0].File != 7 || !slices.Equal(got[0].Ranges, want) {
		t.Fatalf("got %+v, want one request %v", got, want)
	}
}

func TestNormalizerChunksAndEOF(t *testing.T) {
	n := Normalizer{MaxPages: 4}
	var got []Request
	n.Ranges(1, []Range{{0, 10}, {8, 4}, {20, 3}, {50, 10}}, 52, collect(&got))
	// [0,12) coalesced, [20,23), [50,52) clipped at EOF 52.
	want := [][]Range{{{0, 4}}, {{4, 4}}, {{8, 4}}, {{20, 3}, {50, 1}}, {{51, 1}}}
	if len(got) != len(want) {
		t.Fatalf("got %d requests %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !slices.Equal(got[i].Ranges, want[i]) {
			t.Errorf("request %d: got %v, want %v", i, got[i].Ranges, want[i])
		}
	}
	if n.Clipped != 8 {
		t.Errorf("Clipped = %d, want 8", n.Clipped)
	}
	got = nil
	n = Normalizer{MaxPages: 100, MaxRanges: 2}
	n.Pages(1, []uint64{1, 3, 5, 7, 9}, 0, collect(&got))
	if len(got) != 3 || len(got[0].Ranges) != 2 || len(got[2].Ranges) != 1 {
		t.Errorf("MaxRanges 2: got %+v", got)
	}
}

func TestNormalizerEmptyAndBeyondEOF(t *testing.T) {
	var n Normalizer
	calls := 0
	n.Pages(1, nil, 0, func(*Request) { calls++ })
	n.Pages(1, []uint64{10, 11}, 10, func(*Request) { calls++ })
	if calls != 0 {
		t.Fatalf("emitted %d requests for nothing", calls)
	}
}

// TestNormalizerProperties checks, on random input, that requests are
// sorted, disjoint, non-adjacent, bounded, within EOF, and cover exactly
// the input pages below EOF.
func TestNormalizerProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for iter := range 2000 {
		n := Normalizer{MaxPages: uint32(1 + rng.IntN(64))}
		if rng.IntN(3) == 0 {
			n.MaxRanges = 1 + rng.IntN(4)
		}
		eof := uint64(0)
		if rng.IntN(2) == 0 {
			eof = uint64(rng.IntN(2000))
		}
		want := map[uint64]bool{}
		mode := iter % 3 // 0: ranges only, 1: single pages only, 2: mixed
		for range rng.IntN(50) {
			first := uint64(rng.IntN(1500))
			cnt := uint32(rng.IntN(40))
			if mode == 1 || (mode == 2 && rng.IntN(2) == 0) {
				cnt = 1
				n.Add(first)
			} else {
				n.AddRange(first, cnt)
			}
			for p := first; p < first+uint64(cnt); p++ {
				if eof == 0 || p < eof {
					want[p] = true
				}
			}
		}
		got := map[uint64]bool{}
		var lastEnd uint64
		started := false
		n.Flush(3, eof, func(r *Request) {
			if !r.Valid(n.MaxPages) {
				t.Fatalf("iter %d: invalid request %+v (max %d)", iter, r.Ranges, n.MaxPages)
			}
			if n.MaxRanges > 0 && len(r.Ranges) > n.MaxRanges {
				t.Fatalf("iter %d: %d ranges > %d", iter, len(r.Ranges), n.MaxRanges)
			}
			for _, rg := range r.Ranges {
				if started && rg.First < lastEnd {
					t.Fatalf("iter %d: requests overlap or are unsorted at %d", iter, rg.First)
				}
				started = true
				lastEnd = rg.First + uint64(rg.N)
				for p := rg.First; p < lastEnd; p++ {
					if eof > 0 && p >= eof {
						t.Fatalf("iter %d: page %d beyond EOF %d", iter, p, eof)
					}
					got[p] = true
				}
			}
		})
		if len(got) != len(want) {
			t.Fatalf("iter %d: emitted %d pages, want %d", iter, len(got), len(want))
		}
		for p := range want {
			if !got[p] {
				t.Fatalf("iter %d: page %d missing", iter, p)
			}
		}
	}
}

func TestNormalizerNoAllocs(t *testing.T) {
	n := Normalizer{MaxPages: 8}
	pages := []uint64{9, 1, 2, 3, 40, 41, 100, 7, 8, 500}
	emit := func(*Request) {}
	n.Pages(1, pages, 0, emit) // warm the buffers
	if a := testing.AllocsPerRun(100, func() { n.Pages(1, pages, 0, emit) }); a != 0 {
		t.Fatalf("Pages allocates %.1f times per call", a)
	}
}

func TestNormalizerMixedAndExtremes(t *testing.T) {
	var n Normalizer
	var got []Request
	n.Add(9)
	n.AddRange(3, 4) // 3..6
	n.Add(7)
	n.Add(2)
	n.Add(^uint64(0))
	n.Add(^uint64(0))
	n.Flush(1, 0, collect(&got))
	if len(got) != 1 || !slices.Equal(got[0].Ranges, []Range{{2, 6}, {9, 1}}) {
		t.Fatalf("mixed pages and ranges: %+v", got)
	}
	if n.Pending() != 0 {
		t.Fatal("queue not cleared")
	}
}

func TestPageMap(t *testing.T) {
	var m pageMap
	pages := []uint64{0, 1, 4095, 4096, 1 << 29, 1<<30 - 1, 1 << 30, 1 << 40, ^uint64(0)}
	for i, p := range pages {
		if m.get(p) != 0 {
			t.Fatalf("page %d set before", p)
		}
		m.set(p, uint8(i+1))
	}
	for i, p := range pages {
		if got := m.get(p); got != uint8(i+1) {
			t.Fatalf("page %d = %d, want %d", p, got, i+1)
		}
	}
	if m.get(2) != 0 || m.get(1<<40+1) != 0 {
		t.Fatal("neighbours set")
	}
}
