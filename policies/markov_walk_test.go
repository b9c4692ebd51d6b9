package policies

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/predictio/predictio/formats"
)

// refMarkov is the markov policy's det walk computed from scratch on every
// access, as the policy did before it reused walks: the reference that the
// reusing policy must match request for request.
type refMarkov struct {
	model     *MarkovModel
	depth     int
	threshold float64
	seen      map[uint32]map[uint64]bool
	norm      Normalizer
}

func (r *refMarkov) handle(ev *Event, key FileKey, emit Emit) {
	m, _ := r.model.Lookup(key)
	if m == nil {
		return
	}
	seen := r.seen[ev.File]
	if seen == nil {
		seen = map[uint64]bool{}
		r.seen[ev.File] = seen
	}
	a := ev.Access
	n := min(max(uint64(a.NPages), 1), maxAccessPages)
	for i := range n {
		seen[a.Page+i] = true
	}
	state := a.Page + n - 1
	if m.Next(state) == nil {
		state = a.Page
	}
	walk := []uint64{state}
	prob := 1.0
	for d := 0; d < r.depth; d++ {
		var t *Transition
		ts := m.Next(state)
		for i := range ts {
			if !slices.Contains(walk, ts[i].Next) {
				t = &ts[i]
				break
			}
		}
		if t == nil {
			break
		}
		prob *= t.P
		if prob < r.threshold {
			break
		}
		state = t.Next
		walk = append(walk, state)
		if !seen[state] {
			seen[state] = true
			r.norm.Add(state)
		}
	}
	if r.norm.Pending() > 0 {
		r.norm.Flush(ev.File, 1<<12, emit)
	}
}

// TestMarkovWalkReuse drives the policy and the reference with models full
// of branches and cycles (small page spaces, several runs) and accesses
// that mostly follow the trained sequences, so that walks are reused, with
// jumps, multi-page accesses and a second file in between; every request
// must be the same.
func TestMarkovWalkReuse(t *testing.T) {
	total := 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7))
		span := 8 + rng.IntN(200) // small: many cycles
		keys := []FileKey{{Path: "/a", Size: 1 << 24}, {Path: "/b", Size: 1 << 24}}
		mb := NewMarkovBuilder(0)
		var seqs [][]uint64
		for _, k := range keys {
			base := make([]uint64, 50+rng.IntN(400))
			for i := range base {
				base[i] = uint64(rng.IntN(span))
			}
			seqs = append(seqs, base)
			for run := range 1 + rng.IntN(4) {
				s := slices.Clone(base)
				for i := range s {
					if rng.IntN(5) == 0 {
						s[i] = uint64(rng.IntN(span))
					}
				}
				mb.AddRun(run, k, s)
			}
		}
		model := mb.Build()
		depth := 1 + rng.IntN(20)
		threshold := []float64{0, 0.01, 0.1, 0.3}[rng.IntN(4)]
		spec := fmt.Sprintf("markov:depth=%d,threshold=%g", depth, threshold)
		env := Env{
			FilePages: func(uint32) uint64 { return 1 << 12 },
			FileKey:   func(f uint32) (FileKey, bool) { return keys[f-1], true },
			Markov:    model,
		}
		ps, err := BuildAll([]string{spec}, env)
		if err != nil {
			t.Fatal(err)
		}
		pol := ps[0]
		ref := &refMarkov{model: model, depth: depth, threshold: threshold, seen: map[uint32]map[uint64]bool{}}
		var got, want []string
		rec := func(out *[]string) Emit {
			return func(r *Request) { *out = append(*out, fmt.Sprint(r.File, r.Ranges)) }
		}
		pos := []int{0, 0}
		for range 2000 {
			f := uint32(1 + rng.IntN(2))
			seq := seqs[f-1]
			ev := Event{Kind: EventFileAccess, File: f, Access: FileAccess{Kind: formats.KindRead, NPages: 1}}
			switch r := rng.IntN(20); {
			case r == 0:
				pos[f-1] = rng.IntN(len(seq)) // jump
			case r == 1:
				ev.Access.NPages = uint32(2 + rng.IntN(3))
			}
			ev.Access.Page = seq[pos[f-1]%len(seq)]
			pos[f-1]++
			pol.Handle(&ev, rec(&got))
			ref.handle(&ev, keys[f-1], rec(&want))
		}
		if !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("seed %d %s: request %d is %s, want %s", seed, spec, i, got[i], want[i])
				}
			}
			t.Fatalf("seed %d %s: %d requests, want %d", seed, spec, len(got), len(want))
		}
		total += len(want)
	}
	if total < 1000 {
		t.Fatalf("%d requests in all: the models walk too little to test", total)
	}
}
