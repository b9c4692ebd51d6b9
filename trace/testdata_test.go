package trace

import (
	"path/filepath"
	"testing"

	"github.com/predictio/predictio/formats"
)

// TestTestdata checks the bundles and samples scripts/make-testdata.sh
// wrote: every bundle verifies, and every sample imports into a bundle
// that verifies.
func TestTestdata(t *testing.T) {
	root := filepath.Join("..", "testdata")
	for _, name := range []string{"seq", "stride", "random", "btree", "sparse-run1", "sparse-run2", "sparse-run3", "sparse-run4", "fio-bundle", "msr-bundle", "launch"} {
		dir := filepath.Join(root, name)
		if errs := formats.Verify(dir); len(errs) > 0 {
			t.Errorf("%s: %v (regenerate with scripts/make-testdata.sh)", dir, errs)
			continue
		}
		s, err := Info(dir, 1)
		if err != nil || s.Events == 0 {
			t.Errorf("%s: info %+v, %v", dir, s, err)
			continue
		}
		// launch is the format 1.1 bundle; the others stay 1.0 to test that
		// 1.0 bundles still read (scripts/make-testdata.sh keeps them).
		if want := map[bool]string{true: "1.1.0", false: "1.0.0"}[name == "launch"]; s.FormatVersion != want {
			t.Errorf("%s: format %s, want %s", dir, s.FormatVersion, want)
		}
	}
	for _, tc := range []struct {
		file   string
		o      ImportOptions
		events uint64
	}{
		{"fio/randread.iolog", ImportOptions{From: "fio"}, 400},
		{"blkparse/sample.txt", ImportOptions{From: "blkparse"}, 4},
		{"blkparse/sample.txt", ImportOptions{From: "blkparse", Action: "D", Ops: "all"}, 5},
		{"csv/msr-sample.csv", ImportOptions{From: "csv", Preset: "msr"}, 0},
		{"csv/alibaba-sample.csv", ImportOptions{From: "csv", Preset: "alibaba"}, 0},
	} {
		out := filepath.Join(t.TempDir(), "b")
		tc.o.PageSize = 4096
		rep, err := Import(filepath.Join(root, tc.file), out, tc.o)
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if errs := formats.Verify(out); len(errs) > 0 {
			t.Errorf("%s imported: %v", tc.file, errs)
		}
		if rep.Events == 0 || (tc.events != 0 && rep.Events != tc.events) {
			t.Errorf("%s: %d events, want %d (0: any)", tc.file, rep.Events, tc.events)
		}
	}
}
