package replay

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mapPages maps pages [first, first+n) of path and touches them, as
// another program keeping a library mapped would; eviction cannot drop
// them while mapped. They are read in first page by page without
// readahead, so that they sit in small folios: a mapped page keeps its
// whole folio cached, and readahead makes folios of up to 2 MiB. It
// returns the unmap function.
func mapPages(t *testing.T, path string, first, n int) func() {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := os.Getpagesize()
	// Drop what is cached first: written pages sit in large folios.
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	buf := make([]byte, ps)
	for p := first; p < first+n; p++ {
		if _, err := f.ReadAt(buf, int64(p*ps)); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), int64(first*ps), n*ps, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(mem); i += ps {
		testSink += mem[i]
	}
	done := false
	unmap := func() {
		if !done {
			done = true
			unix.Munmap(mem)
		}
	}
	t.Cleanup(unmap)
	return unmap
}

// TestResidue: pages that another mapping keeps cached do not stop a cold
// replay below --max-residue; each run reports them with the mapper; a
// run that finds fewer of them cached reads the rest in, so that every run
// of the A/B starts with the same residue; above the limit the run is
// refused with a suggestion that works.
func TestResidue(t *testing.T) {
	tr := memTrace(1000, seqRuns(1000, 10), 0)
	root := materialized(t, tr)
	p, _ := pathFor(tr.files[0], root)
	unmapHalf := mapPages(t, p, 10, 10)
	mapPages(t, p, 0, 10)

	opt := Options{Effect: EffectInline, Root: root, Backend: BackendKernel, Timing: TimingASAP, Runs: []string{Baseline, "oracle"}, Repeat: 2}
	opt.beforeRun = func(spec string, round int) {
		if round == 1 {
			unmapHalf() // pages 10..19 can be evicted from now on
		}
	}
	rep := replayMem(t, tr, opt)
	for _, r := range rep.Runs {
		res := r.Residue
		if !r.Cold || res == nil || res.Pages != 20 || res.Demanded != 1000 || len(res.Files) != 1 {
			t.Fatalf("%s round %d: cold %v, residue %+v; want 20 of 1000 demanded pages", r.Policy, r.Round, r.Cold, res)
		}
		if !strings.Contains(res.Files[0].Why, "mapped by") || !strings.Contains(res.Files[0].Why, "this replay") {
			t.Errorf("residue reason %q does not name the mapping process", res.Files[0].Why)
		}
		wantWarmed := uint64(0)
		if r.Round == 2 {
			wantWarmed = 10
		}
		if res.Warmed != wantWarmed || res.Extra != 0 {
			t.Errorf("%s round %d: warmed %d, extra %d; want %d and 0", r.Policy, r.Round, res.Warmed, res.Extra, wantWarmed)
		}
	}

	// 10% mapped: refused, saying what to do.
	mapPages(t, p, 100, 100)
	opt = Options{Root: root, Backend: BackendKernel, Timing: TimingASAP, Runs: []string{Baseline}}
	opt.validate()
	r, err := newReplayer(tr, opt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Replay(context.Background())
	if !errors.Is(err, ErrNotCold) {
		t.Fatalf("10%% residue: %v, want ErrNotCold", err)
	}
	for _, want := range []string{p, "mapped by", "replay materialize", "--root", "--max-residue"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal does not mention %q:\n%v", want, err)
		}
	}
	// Allowed with a higher limit.
	r.opt.MaxResidue = 0.2
	rep, err = r.Replay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res := rep.Runs[0].Residue; res == nil || res.Pages != 110 {
		t.Fatalf("residue with --max-residue 0.2: %+v, want 110 pages", res)
	}
	var buf strings.Builder
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "110 of 1000 demanded pages") {
		t.Errorf("text report lacks the residue:\n%s", buf.String())
	}
}
