package simulate

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// TestReadaheadFastPathMatches checks that calling the readahead model
// directly with submitAbsent (no residency checks) gives the same reports
// as dispatching it like any policy through the checked submit.
func TestReadaheadFastPathMatches(t *testing.T) {
	defer func() { trustReadahead = true }()
	specs := []string{"readahead", "readahead:kb=512", "readahead:kb=64,folios=small", "readahead:kb=128,io_kb=1024"}
	for seed := int64(1); seed <= 16; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var evs []policies.Event
		ts := uint64(0)
		seqPos := uint64(0)
		for i := 0; i < 4000; i++ {
			ts += uint64(rng.Intn(100_000))
			ev := policies.Event{Kind: policies.EventFileAccess, TS: ts, File: uint32(rng.Intn(3)), PID: 1}
			kinds := []formats.AccessKind{formats.KindRead, formats.KindRead, formats.KindFault, formats.KindMap, formats.KindImported}
			ev.Access = policies.FileAccess{Kind: kinds[rng.Intn(len(kinds))], Page: uint64(rng.Intn(3000)), NPages: uint32(rng.Intn(40))}
			if rng.Intn(2) == 0 { // sequential runs, of reads or faults
				ev.File = 0
				ev.Access.Page = seqPos % 2500
				seqPos += uint64(max(ev.Access.NPages, 1))
			}
			if rng.Intn(20) == 0 {
				ev.Kind = policies.EventTreeChildEnter
				ev.Tree.Children = []uint64{uint64(rng.Intn(3000)), uint64(rng.Intn(3000))}
			}
			evs = append(evs, ev)
		}
		cfg := Config{
			CacheBytes:    int64(4096 * (16 + rng.Intn(4000))),
			CacheModel:    CacheModel(seed % 2),
			Device:        Presets[PresetNames()[seed%3]],
			ReadaheadSpec: specs[seed%int64(len(specs))],
			Policies:      []string{"stride", "tree:window=8"},
		}
		cfg.Env.FilePages = func(f uint32) uint64 { return 2000 + 500*uint64(f) }
		var reports [2]*Report
		for i, trust := range []bool{true, false} {
			trustReadahead = trust
			r, err := Run(cfg, &SliceSource{Events: evs})
			if err != nil {
				t.Fatal(err)
			}
			reports[i] = r
		}
		if !reflect.DeepEqual(reports[0].Policies, reports[1].Policies) {
			t.Errorf("seed %d (%s, cache %d, %v): direct readahead differs:\n%+v\nchecked:\n%+v",
				seed, cfg.ReadaheadSpec, cfg.CacheBytes, cfg.CacheModel, reports[0].Policies, reports[1].Policies)
		}
		if reports[0].Policies[0].Prefetched == 0 || reports[0].Policies[0].Hits == 0 {
			t.Errorf("seed %d: degenerate stream: %+v", seed, reports[0].Policies[0])
		}
	}
}
