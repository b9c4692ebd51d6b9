package policies

import (
	"math/rand"
	"reflect"
	"testing"
)

// TestMarkovBuilderMatchesReference compares the builder's flat transition
// table with a plain map of maps over random runs with repeats, recurring
// sequences and several files, and again after more runs are added to a
// builder that has built a model.
func TestMarkovBuilderMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	b := NewMarkovBuilder(0)
	ref := map[string]map[uint64]map[uint64]uint32{}
	for run := 0; run < 6; run++ {
		if run == 4 {
			checkMarkovReference(t, b.Build(), ref)
		}
		for _, path := range []string{"/a", "/b", "/c"} {
			var pages []uint64
			for i := 0; i < 5000; i++ {
				p := uint64(rng.Intn(3000))
				if rng.Intn(2) == 0 {
					p = uint64(i % 700) // recurring
				}
				if rng.Intn(10) == 0 && len(pages) > 0 {
					p = pages[len(pages)-1] // repeat, collapsed
				}
				pages = append(pages, p)
			}
			b.AddRun(run, FileKey{Path: path, Size: 1 << 20}, pages)
			if ref[path] == nil {
				ref[path] = map[uint64]map[uint64]uint32{}
			}
			for i := 1; i < len(pages); i++ {
				from, to := pages[i-1], pages[i]
				if from == to {
					continue
				}
				if ref[path][from] == nil {
					ref[path][from] = map[uint64]uint32{}
				}
				ref[path][from][to]++
			}
		}
	}
	checkMarkovReference(t, b.Build(), ref)
	checkMarkovReference(t, b.Build(), ref)
}

func checkMarkovReference(t *testing.T, m *MarkovModel, ref map[string]map[uint64]map[uint64]uint32) {
	t.Helper()
	for path, rows := range ref {
		fm, err := m.Lookup(FileKey{Path: path, Size: 1 << 20})
		if err != nil || fm == nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := map[uint64][]Transition{}
		for from, row := range rows {
			var total uint64
			for _, c := range row {
				total += uint64(c)
			}
			var ts []Transition
			for to, c := range row {
				ts = append(ts, Transition{Next: to, P: float64(c) / float64(total)})
			}
			sortTransitions(ts)
			want[from] = ts
		}
		got := map[uint64][]Transition{}
		for _, p := range fm.states.pages() {
			got[p] = fm.Next(p)
		}
		if !reflect.DeepEqual(got, want) || fm.States() != len(want) {
			t.Errorf("%s: %d states, want %d; transitions differ", path, fm.States(), len(want))
		}
	}
}
