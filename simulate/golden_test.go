package simulate

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/simulate/simtest"
)

func runBundle(t *testing.T, dir string, cfg Config) *Report {
	t.Helper()
	in, err := OpenInput(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cfg.PageSize = in.PageSize
	env := cfg.Env
	cfg.Env = in.Env()
	cfg.Env.Markov = env.Markov
	cfg.Env.Warn = func(msg string) { t.Log(msg) }
	if cfg.Oracle {
		if cfg.Env.Future, err = in.Future(); err != nil {
			t.Fatal(err)
		}
	}
	src, err := in.Source()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := Run(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const ms = 1_000_000

// TestGoldenSequentialScan: 256 one-page reads of a 256-page file, 1 ms
// apart. Without readahead every page misses. The readahead model misses
// only page 0: its sync window is 4 pages (get_init_ra_size(1, 32) = 4),
// and each PG_readahead hit starts the next window long before it is
// needed. Windows stop at end of file, so nothing is wasted.
func TestGoldenSequentialScan(t *testing.T) {
	const n = 256
	b := &simtest.Bundle{Files: []formats.File{{ID: 1, Path: "/data/seq", Size: n * 4096, MtimeNS: 1}}}
	pages := make([]uint64, n)
	for i := range pages {
		pages[i] = uint64(i)
	}
	b.Reads(1, 1e9, ms, pages...)
	dir := simtest.Write(t, "seq", b)
	nvme := Presets["nvme"]
	r := runBundle(t, dir, Config{CacheBytes: 64 << 20, Device: nvme, NoReadahead: true, Policies: []string{"readahead"}, Oracle: true})
	base, ra, or := r.Lane(BaselineName), r.Lane("readahead"), r.Lane("oracle")
	if base.Misses != n || base.Hits != 0 || base.PagesRead != n {
		t.Errorf("no-readahead baseline: %+v", *base)
	}
	xfer := int64(4096/nvme.BytesPerSec*1e9 + 0.5)
	if base.StallNS != n*(nvme.LatencyNS+xfer) {
		t.Errorf("baseline stall %d, want %d x %d", base.StallNS, n, nvme.LatencyNS+xfer)
	}
	if ra.Misses != 1 || ra.Hits != n-1 || ra.Late != 0 || ra.Wasted != 0 {
		t.Errorf("readahead: %+v", *ra)
	}
	if want := float64(n-1) / n; ra.Coverage != want || ra.Accuracy != 1 || ra.IOAmplification != 1 {
		t.Errorf("readahead coverage %v accuracy %v io_amp %v, want %v 1 1", ra.Coverage, ra.Accuracy, ra.IOAmplification, want)
	}
	if want := nvme.LatencyNS + int64(4*4096/nvme.BytesPerSec*1e9+0.5); ra.StallNS != want {
		t.Errorf("readahead stall %d, want one 4-page sync window, %d", ra.StallNS, want)
	}
	if or.Misses > ra.Misses || or.Coverage < ra.Coverage {
		t.Errorf("oracle (%d misses) below readahead (%d)", or.Misses, ra.Misses)
	}

	// With the default baseline (readahead on), readahead as a policy adds
	// nothing: coverage 0, speedup 1.
	r = runBundle(t, dir, Config{CacheBytes: 64 << 20, Device: nvme, Policies: []string{"readahead"}})
	if ra := r.Lane("readahead"); ra.Coverage != 0 || ra.Speedup != 1 || r.Policies[0].Misses != 1 {
		t.Errorf("readahead over readahead: coverage %v speedup %v baseline misses %d", ra.Coverage, ra.Speedup, r.Policies[0].Misses)
	}
}

// btreeBundle: 8 parents of 16 children each. Before reading a parent's
// children the application sends one tree_child_enter that lists all 16 as
// upcoming (ascending pages, 64 pages apart, so readahead sees only
// standalone random reads), then reads them 1 ms apart. (A cursor would
// send one hint per child listing the children after it, docs/hints.md;
// the tree policy uses only the list, so one hint per parent isolates the
// window: the first w listed children are prefetched.)
func btreeBundle(t *testing.T) string {
	const parents, children = 8, 16
	b := &simtest.Bundle{Files: []formats.File{{ID: 1, Path: "/data/tree.db", Size: 64 * 4096 * (parents*children + 2), MtimeNS: 1}}}
	ts := uint64(1e9)
	for p := 0; p < parents; p++ {
		h := formats.Hint{TS: ts, PID: 1, Kind: formats.HintTreeChildEnter, FileID: 1, ParentPage: uint64(p), Position: 0}
		var pages []uint64
		for c := 0; c < children; c++ {
			pg := uint64(64 * (1 + p*children + c))
			h.Children = append(h.Children, pg)
			pages = append(pages, pg)
		}
		b.Hints = append(b.Hints, h)
		ts = b.Reads(1, ts+ms, ms, pages...)
	}
	return simtest.Write(t, "btree", b)
}

// TestGoldenBTree: the baseline misses all 128 children. tree with a
// window of w prefetches the first w children of each parent: coverage is
// w/16 with enough cache. When the window exceeds an LRU cache, each
// demand miss evicts the next prefetched child: coverage drops to 0.
func TestGoldenBTree(t *testing.T) {
	dir := btreeBundle(t)
	for _, tc := range []struct {
		window   int
		cache    int64
		coverage float64
		wasted   uint64
	}{
		{16, 64 << 20, 1, 0},
		{8, 64 << 20, 0.5, 0},
		{4, 64 << 20, 0.25, 0},
		{1, 64 << 20, 1.0 / 16, 0},
		{16, 12 * 4096, 0, 8 * 16},
	} {
		t.Run(fmt.Sprintf("window%d-cache%d", tc.window, tc.cache), func(t *testing.T) {
			r := runBundle(t, dir, Config{CacheBytes: tc.cache, Device: Presets["nvme"], Policies: []string{fmt.Sprintf("tree:window=%d", tc.window)}, Oracle: true})
			base, tree := r.Lane(BaselineName), r.Lane("tree")
			if base.Misses != 128 || base.Prefetched != 0 {
				t.Fatalf("baseline: %+v", *base)
			}
			if tree.Coverage != tc.coverage || tree.Wasted != tc.wasted || tree.Late != 0 {
				t.Errorf("tree: coverage %v wasted %d late %d, want %v %d 0 (%+v)", tree.Coverage, tree.Wasted, tree.Late, tc.coverage, tc.wasted, *tree)
			}
			if tc.coverage == 1 && (tree.Accuracy != 1 || tree.IOAmplification != 1 || tree.StallNS != 0 || tree.Speedup <= 1) {
				t.Errorf("tree: accuracy %v io_amp %v stall %d speedup %v, want 1 1 0 >1", tree.Accuracy, tree.IOAmplification, tree.StallNS, tree.Speedup)
			}
		})
	}
}

// TestStreamedFutureMatchesMaterialized: Run streaming the oracle's future
// from the batches ahead of each lane gives the same report as a future
// read whole beforehand, for both scopes and with a policy lane of its own
// oracle spec.
func TestStreamedFutureMatchesMaterialized(t *testing.T) {
	dir := t.TempDir() + "/sparse"
	if err := formats.Synth(dir, formats.SynthSpec{Pattern: "sparse", Events: 30000, Files: 3, FilePages: 4096}); err != nil {
		t.Fatal(err)
	}
	var reports [2]*Report
	for i, streamed := range []bool{false, true} {
		in, err := OpenInput(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{CacheBytes: 8 << 20, Device: Presets["nvme"], Oracle: true, Policies: []string{"oracle:n=16,scope=file", "stride"},
			PageSize: in.PageSize, Env: in.Env()}
		if !streamed {
			if cfg.Env.Future, err = in.Future(); err != nil {
				t.Fatal(err)
			}
		}
		src, err := in.Source()
		if err != nil {
			t.Fatal(err)
		}
		if reports[i], err = Run(cfg, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		in.Close()
	}
	if !reflect.DeepEqual(reports[0].Policies, reports[1].Policies) {
		t.Errorf("streamed future differs:\nmaterialized %+v\nstreamed     %+v", reports[0].Policies, reports[1].Policies)
	}
	if o := reports[1].Lane("oracle"); o == nil || o.Coverage < 0.5 {
		t.Errorf("oracle lane %+v: too little coverage for the comparison to mean much", o)
	}
}
