package simulate

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/simulate/simtest"
)

// zipfPages returns n page numbers of [0, pages) drawn from a Zipf
// distribution of exponent s (s may be below 1, which math/rand's Zipf
// does not take): rank k has weight 1/k^s, and ranks map to pages through
// a random permutation so that popular pages are scattered.
func zipfPages(rng *rand.Rand, n, pages int, s float64) []uint64 {
	cdf := make([]float64, pages)
	sum := 0.0
	for k := range cdf {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	perm := rng.Perm(pages)
	out := make([]uint64, n)
	for i := range out {
		k := sort.SearchFloat64s(cdf, rng.Float64()*sum)
		out[i] = uint64(perm[min(k, pages-1)])
	}
	return out
}

// TestLRUMissesMatchReference runs the LRU-only lane (--no-readahead, no
// policies, no oracle) over bundles of uniform and Zipf 0.9 page requests
// over 1 Mi pages, at 16 Ki, 64 Ki and 256 Ki pages of cache, and checks
// its miss count against an independent LRU (refLRU: a map and a
// container/list). Half the requests name a file of known size (direct
// page tables), half one of unknown size (the hash index).
func TestLRUMissesMatchReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 12 simulations of 1 Mi requests")
	}
	const pages, n = 1 << 20, 1 << 20
	rng := rand.New(rand.NewSource(14))
	traces := map[string][]uint64{"uniform": make([]uint64, n), "zipf0.9": zipfPages(rng, n, pages, 0.9)}
	for i := range traces["uniform"] {
		traces["uniform"][i] = uint64(rng.Intn(pages))
	}
	for name, trace := range traces {
		b := &simtest.Bundle{Files: []formats.File{{ID: 1, Path: "/data/a", Size: pages / 2 * 4096}, {ID: 2, Path: "/data/b"}}}
		keys := make([]uint64, n)
		for i, p := range trace {
			file := uint32(1 + p%2)
			keys[i] = pageKey(file, p/2)
			b.Accesses = append(b.Accesses, formats.Access{TS: uint64(i) * 100, PID: 1, TID: 1, FileID: file, FirstPage: p / 2, NPages: 1, Kind: formats.KindRead})
		}
		dir := simtest.Write(t, name, b)
		for _, capacity := range []int{16 << 10, 64 << 10, 256 << 10} {
			t.Run(fmt.Sprintf("%s/%dKi", name, capacity>>10), func(t *testing.T) {
				ref := newRefLRU(capacity)
				var misses uint64
				for _, k := range keys {
					if hit, _, _ := ref.access(k); !hit {
						misses++
					}
				}
				r := runBundle(t, dir, Config{CacheBytes: int64(capacity) * 4096, Device: Presets["nvme"], NoReadahead: true})
				if len(r.Policies) != 1 {
					t.Fatalf("%d lanes, want the baseline only", len(r.Policies))
				}
				if got := r.Policies[0].Misses; got != misses {
					t.Errorf("LRU lane: %d misses, reference %d", got, misses)
				}
				if r.Policies[0].Hits+r.Policies[0].Misses != n {
					t.Errorf("hits + misses = %d, want %d", r.Policies[0].Hits+r.Policies[0].Misses, n)
				}
			})
		}
	}
}
