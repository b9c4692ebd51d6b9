package replay

import (
	"os"
	"testing"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/faultfs"
)

// TestPrefetchErrors: prefetches of pages whose reads fail with EIO (a
// device error, injected with faultfs) are counted and fail neither the
// replay nor the demand reads, with the kernel and the direct backend. The
// replayed thread reads every page but the bad ones; a tree hint makes the
// policy prefetch the bad ones.
func TestPrefetchErrors(t *testing.T) {
	const pages, bad, nbad = 256, 100, 10
	var runs [][2]uint64
	for p := uint64(0); p < pages; p++ {
		if p < bad || p >= bad+nbad {
			runs = append(runs, [2]uint64{p, 1})
		}
	}
	tr := memTrace(pages, runs, 20_000)
	tr.files[0].Path = "/file.bin" // at the root of the faultfs mount
	tr.files[0].maxPage = pages
	var children []uint64
	for p := uint64(bad); p < bad+nbad; p++ {
		children = append(children, p)
	}
	tr.hints = []formats.Hint{{TS: tr.t0, PID: 100, Kind: formats.HintTreeChildEnter, FileID: 7, Children: children}}
	tr.assignHints()
	backing := materialized(t, tr)
	p, _ := pathFor(tr.files[0], backing)
	ps := int64(os.Getpagesize())
	fs := faultfs.MountT(t, []faultfs.File{{Name: "file.bin", Backing: p, Faults: []faultfs.Range{{Off: bad * ps, Len: nbad * ps}}}}, faultfs.Options{})
	for _, backend := range []string{BackendKernel, BackendDirect} {
		t.Run(backend, func(t *testing.T) {
			rep := replayMem(t, tr, Options{Effect: EffectInline, Root: fs.Dir, Backend: backend, CachePages: 4096, Runs: []string{"tree:window=16"}})
			r := rep.Runs[0]
			t.Logf("%s: %v; counters %+v; warnings %v", backend, r.Counts, r.Counters, r.Warnings)
			if r.Hints != 1 || r.Counters.PagesRequested != nbad {
				t.Fatalf("hints %d, pages requested %d; want the hint's %d bad pages requested", r.Hints, r.Counters.PagesRequested, nbad)
			}
			if err := r.Counts.Check(); err != nil {
				t.Error(err)
			}
			if r.UsedInTime != 0 || r.Late != 0 {
				t.Errorf("pages that could not be read counted used: %v", r.Counts)
			}
			if backend == BackendDirect && (r.Counters.Failures != nbad || len(r.Warnings) == 0) {
				t.Errorf("direct: %d prefetch failures counted, warnings %v; want %d and a warning", r.Counters.Failures, r.Warnings, nbad)
			}
		})
	}
	if fs.Stats().Faults == 0 {
		t.Fatal("faultfs failed no read: the prefetches did not reach the bad pages")
	}
}
