package formats

import (
	"path/filepath"
	"testing"
)

func TestSynthPatterns(t *testing.T) {
	for _, p := range []string{"seq", "stride", "random", "sparse", "btree"} {
		t.Run(p, func(t *testing.T) {
			d1 := filepath.Join(t.TempDir(), "a")
			d2 := filepath.Join(t.TempDir(), "b")
			spec := SynthSpec{Pattern: p, Events: 5000, Files: 3, Seed: 7}
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
			if len(r.accesses) != 5000 || len(r.files) != 3 {
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
				h := r.hints[0]
				if h.Kind != HintTreeChildEnter || h.ParentPage != 0 || len(h.Children) != 64 || r.accesses[1].FirstPage != h.Children[h.Position] {
					t.Fatalf("first hint %+v does not lead to the next access %+v", h, r.accesses[1])
				}
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

func TestSynthRejectsUnknownPattern(t *testing.T) {
	if err := Synth(filepath.Join(t.TempDir(), "x"), SynthSpec{Pattern: "zigzag"}); err == nil {
		t.Fatal("no error")
	}
}
