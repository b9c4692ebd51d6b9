package formats

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSynthPatterns(t *testing.T) {
	for _, p := range []string{"seq", "stride", "random", "zipf", "sparse", "btree"} {
		t.Run(p, func(t *testing.T) {
			d1 := filepath.Join(t.TempDir(), "a")
			d2 := filepath.Join(t.TempDir(), "b")
			spec := SynthSpec{Pattern: p, Events: 5000, Files: 3, Seed: 7}
			if p == "zipf" {
				spec.Files = 1 // zipf reads one file
			}
			if err := Synth(d1, spec); err != nil {
				t.Fatal(err)
			}
			if err := Synth(d2, spec); err != nil {
				t.Fatal(err)
			}
			if errs := Verify(d1); len(errs) != 0 {
				t.Fatalf("verify: %v", errs)
			}
			b1, _ := Open(d1)
			b2, _ := Open(d2)
			for _, name := range []string{FilesFile, AccessesFile, HintsFile} {
				if b1.Manifest().Tables[name] != b2.Manifest().Tables[name] {
					t.Fatalf("%s differs between two runs of the same spec", name)
				}
			}
			r := readRows(t, d1)
			if len(r.accesses) != 5000 || len(r.files) != spec.Files {
				t.Fatalf("%d accesses, %d files", len(r.accesses), len(r.files))
			}
			for i := 1; i < len(r.accesses); i++ {
				if r.accesses[i].TS <= r.accesses[i-1].TS {
					t.Fatalf("timestamps not increasing at %d", i)
				}
			}
			switch p {
			case "seq":
				for i, a := range r.accesses[:100] {
					if a.FirstPage != uint64(i) || a.FileID != 1 {
						t.Fatalf("seq row %d: %+v", i, a)
					}
				}
			case "btree":
				if len(r.hints) == 0 {
					t.Fatal("btree wrote no hints")
				}
				checkSynthBtree(t, r, 64)
			default:
				if len(r.hints) != 0 {
					t.Fatalf("%s wrote %d hints", p, len(r.hints))
				}
			}
		})
	}
}

func TestSynthSparseRunsShareMostOfTheSequence(t *testing.T) {
	var runs [][]Access
	for run := 0; run < 2; run++ {
		d := filepath.Join(t.TempDir(), "s")
		if err := Synth(d, SynthSpec{Pattern: "sparse", Events: 4000, Run: run, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, readRows(t, d).accesses)
	}
	same := 0
	for i := range runs[0] {
		if runs[0][i].FirstPage == runs[1][i].FirstPage {
			same++
		}
	}
	if frac := float64(same) / 4000; frac < 0.75 || frac > 0.95 {
		t.Fatalf("runs share %.2f of positions, want about 0.81", frac)
	}
}

// TestSynthZipf: zipf is deterministic for a seed, stays in the file, gives
// the most frequent page about the share Zipf predicts (1/H(n, s)),
// scatters the ranks over the file and refuses a bad exponent, naming the
// flag.
func TestSynthZipf(t *testing.T) {
	const n, events, s = 1000, 200000, 0.9
	spec := SynthSpec{Pattern: "zipf", Events: events, FilePages: n, ZipfS: s, Seed: 3}
	d1, d2, d3 := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "c")
	for _, d := range []string{d1, d2} {
		if err := Synth(d, spec); err != nil {
			t.Fatal(err)
		}
	}
	other := spec
	other.Seed = 4
	if err := Synth(d3, other); err != nil {
		t.Fatal(err)
	}
	if errs := Verify(d1); len(errs) != 0 {
		t.Fatalf("verify: %v", errs)
	}
	b1, b2, b3 := mustOpen(t, d1), mustOpen(t, d2), mustOpen(t, d3)
	if b1.Manifest().Tables[AccessesFile] != b2.Manifest().Tables[AccessesFile] {
		t.Fatal("two runs of one spec differ")
	}
	if b1.Manifest().Tables[AccessesFile] == b3.Manifest().Tables[AccessesFile] {
		t.Fatal("seeds 3 and 4 give the same accesses")
	}
	r := readRows(t, d1)
	if len(r.accesses) != events || len(r.files) != 1 || r.files[0].Size != n*synthPageSize {
		t.Fatalf("%d accesses, files %+v", len(r.accesses), r.files)
	}
	count := make([]int, n)
	for i, a := range r.accesses {
		if a.FileID != 1 || a.FirstPage >= n || a.NPages != 1 || a.Kind != KindRead {
			t.Fatalf("row %d: %+v", i, a)
		}
		count[a.FirstPage]++
	}
	h := 0.0
	for k := 1; k <= n; k++ {
		h += 1 / math.Pow(float64(k), s)
	}
	want := 1 / h
	order := make([]int, n) // pages, most frequent first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return count[b] - count[a] })
	got := float64(count[order[0]]) / events
	sigma := math.Sqrt(want * (1 - want) / events)
	if math.Abs(got-want) > 5*sigma {
		t.Fatalf("most frequent page %d holds %.4f of accesses, Zipf(%d, %g) predicts %.4f (±%.4f)", order[0], got, n, s, want, 5*sigma)
	}
	// The second rank's share is 2^-s of the first's.
	if got2 := float64(count[order[1]]) / events; math.Abs(got2-want/math.Pow(2, s)) > 5*sigma {
		t.Fatalf("second page holds %.4f, want %.4f", got2, want/math.Pow(2, s))
	}
	if slices.Equal(order[:10], []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatal("ranks 1..10 are pages 0..9: not scattered")
	}

	for _, bad := range []float64{-1, 10.5, math.NaN(), math.Inf(1)} {
		err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zipf", Events: 10, FilePages: 10, ZipfS: bad})
		if err == nil || !strings.Contains(err.Error(), "--zipf-s") {
			t.Errorf("ZipfS %g: error %v, want one naming --zipf-s", bad, err)
		}
	}
	if err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zipf", Events: 10, FilePages: 10, ZipfS: 10}); err != nil {
		t.Errorf("ZipfS 10: %v", err)
	}
	if err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zipf", Events: 10, Files: 2}); err == nil || !strings.Contains(err.Error(), "--files") {
		t.Errorf("zipf with 2 files: %v", err)
	}
	if err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zipf", Events: 10, FilePages: SynthZipfMaxPages + 1}); err == nil || !strings.Contains(err.Error(), "--file-pages") {
		t.Errorf("zipf over SynthZipfMaxPages: %v", err)
	}
	// Defaults: 1048576 pages, s = 0.9.
	dd := filepath.Join(t.TempDir(), "d")
	if err := Synth(dd, SynthSpec{Pattern: "zipf", Events: 100}); err != nil {
		t.Fatal(err)
	}
	if b := mustOpen(t, dd); !strings.Contains(b.Manifest().Notes[0], "file_pages=1048576") || !strings.Contains(b.Manifest().Notes[0], "zipf_s=0.9") {
		t.Fatalf("notes %q", b.Manifest().Notes)
	}
}

func TestSynthRejectsUnknownPattern(t *testing.T) {
	if err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zigzag"}); err == nil {
		t.Fatal("no error")
	}
}

// checkSynthBtree checks the btree pattern's hints against its accesses:
// each hint precedes the read of the child it enters, which its children
// (the upcoming ones) do not include, and lists exactly the parent's
// children after position, the pages the next hints at that parent enter.
func checkSynthBtree(t *testing.T, r rows, fanout int) {
	t.Helper()
	if r.accesses[0].FirstPage != 0 || r.hints[0].ParentPage != 0 {
		t.Fatalf("the first scan does not start at the root (page 0): %+v %+v", r.accesses[0], r.hints[0])
	}
	entered := make([]uint64, len(r.hints)) // page each hint enters
	a := 0
	for i, h := range r.hints {
		for a < len(r.accesses) && r.accesses[a].TS < h.TS {
			a++
		}
		if a == len(r.accesses) {
			t.Fatalf("hint %d has no access after it", i)
		}
		entered[i] = r.accesses[a].FirstPage
		if h.Kind != HintTreeChildEnter || h.FileID != 1 || int(h.Position) >= fanout || len(h.Children) != fanout-1-int(h.Position) {
			t.Fatalf("hint %d: %+v, want position < %d and %d upcoming children", i, h, fanout, fanout-1-int(h.Position))
		}
		if slices.Contains(h.Children, entered[i]) {
			t.Fatalf("hint %d lists the child it enters (page %d) as upcoming: %+v", i, entered[i], h)
		}
	}
	next := 0 // hints whose successor at the same parent enters Children[0]
	for i := 1; i < len(r.hints); i++ {
		prev, h := r.hints[i-1], r.hints[i]
		if h.ParentPage == prev.ParentPage && h.Position == prev.Position+1 {
			if entered[i] != prev.Children[0] {
				t.Fatalf("hint %d enters page %d, hint %d named %d as the next child", i, entered[i], i-1, prev.Children[0])
			}
			if !slices.Equal(h.Children, prev.Children[1:]) {
				t.Fatalf("hint %d children %v are not hint %d's after the first %v", i, h.Children, i-1, prev.Children)
			}
			next++
		}
	}
	if next < len(r.hints)/2 {
		t.Fatalf("only %d of %d hints move on to the next sibling: no key-order scans", next, len(r.hints))
	}
}

// TestSynthLaunch: the launch pattern is deterministic, verifies, and has
// every kind of format 1.1 with service times, mappings and a path-only file.
func TestSynthLaunch(t *testing.T) {
	d1, d2 := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	spec := SynthSpec{Pattern: "launch", Events: 3000, Files: 3, Seed: 2}
	for _, d := range []string{d1, d2} {
		if err := Synth(d, spec); err != nil {
			t.Fatal(err)
		}
	}
	if errs := Verify(d1); len(errs) != 0 {
		t.Fatalf("verify: %v", errs)
	}
	b1, b2 := mustOpen(t, d1), mustOpen(t, d2)
	if b1.Manifest().Tables[AccessesFile] != b2.Manifest().Tables[AccessesFile] {
		t.Fatal("two runs of one spec differ")
	}
	if !b1.HasServiceTimes() || b1.Manifest().Timing.RecordedWallNS == 0 {
		t.Fatalf("timing %+v", b1.Manifest().Timing)
	}
	r := readRows(t, d1)
	if len(r.accesses) != 3000 || len(r.files) != 7 || !r.files[1].PathOnly() {
		t.Fatalf("%d accesses, files %+v", len(r.accesses), r.files)
	}
	kinds := map[AccessKind]int{}
	for i, a := range r.accesses {
		kinds[a.Kind]++
		if a.EndNS <= a.TS || a.Op == 0 {
			t.Fatalf("row %d without a service time or op: %+v", i, a)
		}
		if i > 0 && a.TS < r.accesses[i-1].EndNS {
			t.Fatalf("row %d starts before row %d ends", i, i-1)
		}
		if a.Kind == KindFault && (a.Prot&ProtExec == 0 || a.MapPages == 0) {
			t.Fatalf("fault without its mapping: %+v", a)
		}
		if a.Kind == KindMap && a.Op != r.accesses[i-1].Op {
			t.Fatalf("fault-around row %d does not share its fault's op", i)
		}
	}
	for _, k := range []AccessKind{KindExec, KindOpen, KindMmap, KindFault, KindMap, KindStat, KindReaddir, KindRead} {
		if kinds[k] == 0 {
			t.Errorf("no %s rows: %v", k, kinds)
		}
	}
	// ServiceNS on another pattern.
	d3 := filepath.Join(t.TempDir(), "s")
	if err := Synth(d3, SynthSpec{Pattern: "seq", Events: 100, ServiceNS: 500}); err != nil {
		t.Fatal(err)
	}
	if errs := Verify(d3); len(errs) != 0 {
		t.Fatal(errs)
	}
	for i, a := range readRows(t, d3).accesses {
		if a.EndNS != a.TS+500 || a.Op != uint64(i+1) || a.Ret != synthPageSize {
			t.Fatalf("seq row %d with service times: %+v", i, a)
		}
	}
}
