package policies

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/predictio/predictio/formats"
)

// raRun is what a model did over a stream: its decisions, the requests it
// emitted, and its state and per-page bytes at the end.
type raRun struct {
	decisions []RADecision
	requests  []string
	states    []RAState
	pages     []uint8
	counts    [numRAKinds]uint64
}

// runRA feeds a random stream of reads (random single pages, sequential
// runs, multi-page reads, reads at and past EOF), faults and map rows to a
// model of kernel k, with the simulator's cache as the Resident authority
// (a small FIFO that evicts) when resident is set.
func runRA(seed uint64, k KernelVersion, resident, viaReadPage bool) raRun {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out raRun
	cache := map[uint64]bool{}
	var order []uint64
	const capacity = 300
	key := func(f uint32, p uint64) uint64 { return uint64(f)<<40 | p }
	cfg := ReadaheadConfig{Kernel: k, RAPages: 32, FilePages: func(f uint32) uint64 { return 2000 + 1000*uint64(f) }}
	cfg.OnDecision = func(d *RADecision) { out.decisions = append(out.decisions, *d) }
	if resident {
		cfg.Resident = func(f uint32, p uint64) bool { return cache[key(f, p)] }
	}
	m := NewReadahead(cfg)
	emit := func(r *Request) {
		out.requests = append(out.requests, fmt.Sprint(*r))
		for _, rg := range r.Ranges {
			for p := rg.First; p < rg.First+uint64(rg.N); p++ {
				if k := key(r.File, p); !cache[k] {
					cache[k] = true
					order = append(order, k)
				}
			}
		}
		for len(order) > capacity {
			delete(cache, order[0])
			order = order[1:]
		}
	}
	seq := uint64(0)
	for i := 0; i < 4000; i++ {
		file := uint32(1 + rng.IntN(2))
		ev := Event{Kind: EventFileAccess, File: file, TID: 1}
		a := &ev.Access
		a.Kind, a.NPages = formats.KindRead, 1
		switch c := rng.IntN(10); {
		case c < 5:
			a.Page = uint64(rng.IntN(3500))
		case c < 7:
			a.Page = seq % 2900
			seq++
		case c < 8:
			a.Page, a.NPages = uint64(rng.IntN(3000)), uint32(2+rng.IntN(40))
		case c < 9:
			a.Kind, a.Page = formats.KindFault, uint64(rng.IntN(3000))
		default:
			a.Kind, a.Page, a.NPages = formats.KindMap, uint64(rng.IntN(3000)), 16
		}
		if rng.IntN(100) == 0 {
			a.Page = 2000 + 1000*uint64(file) - uint64(rng.IntN(2)) // the last page, or EOF
		}
		if viaReadPage && a.Kind == formats.KindRead && a.NPages == 1 {
			m.ReadPage(file, a.Page, cache[key(file, a.Page)], a.Page > 0 && cache[key(file, a.Page-1)], emit)
		} else {
			m.Handle(&ev, emit)
		}
		if !resident && rng.IntN(3) == 0 {
			// A model that remembers its pages forgets none; make some
			// misses happen by reading far away.
			seq += 500
		}
	}
	for f := uint32(1); f <= 2; f++ {
		out.states = append(out.states, m.State(f))
		for p := uint64(0); p < 4000; p++ {
			out.pages = append(out.pages, m.file(f).pages.get(p))
		}
	}
	out.counts = m.Decisions
	return out
}

// TestReadMissMatches: the flat path of small random reads (readMiss),
// and ReadPage for one-page reads, give the decisions, requests, state
// and page bytes of the general path, on every kernel era, with and
// without a Resident callback.
func TestReadMissMatches(t *testing.T) {
	defer func() { raMissPath = true }()
	for _, k := range []KernelVersion{{6, 1}, {6, 12}, {6, 18}} {
		for _, resident := range []bool{true, false} {
			for seed := uint64(1); seed <= 6; seed++ {
				raMissPath = true
				fast := runRA(seed, k, resident, false)
				paged := runRA(seed, k, resident, resident)
				raMissPath = false
				slow := runRA(seed, k, resident, false)
				if !reflect.DeepEqual(fast, slow) {
					t.Fatalf("kernel %v, resident %v, seed %d: the flat path differs (%d vs %d decisions, %d vs %d requests)",
						k, resident, seed, len(fast.decisions), len(slow.decisions), len(fast.requests), len(slow.requests))
				}
				if !reflect.DeepEqual(paged, slow) {
					t.Fatalf("kernel %v, seed %d: ReadPage differs from Handle (%d vs %d decisions, %d vs %d requests)",
						k, seed, len(paged.decisions), len(slow.decisions), len(paged.requests), len(slow.requests))
				}
				if fast.counts[RASync] == 0 || fast.counts[RAAsync] == 0 {
					t.Fatalf("kernel %v, seed %d: degenerate stream: %v", k, seed, fast.counts)
				}
			}
		}
	}
}
