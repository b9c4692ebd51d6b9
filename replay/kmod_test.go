package replay

import (
	"context"
	"errors"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/predictio/predictio/kmod"
)

// TestKmodNotLoaded: without /dev/predictio the kmod backend fails with
// kmod.ErrNotLoaded, whose message says how to build and load the module.
func TestKmodNotLoaded(t *testing.T) {
	if _, err := os.Stat(kmod.DevicePath); err == nil {
		t.Skip("the predictio module is loaded here; TestKmodOracle covers this machine")
	}
	tr := memTrace(256, seqRuns(256, 8), 0)
	root := materialized(t, tr)
	opt := Options{Effect: EffectInline, Root: root, Backend: BackendKmod, Timing: TimingASAP, Runs: []string{"oracle"}}
	if err := opt.validate(); !errors.Is(err, kmod.ErrNotLoaded) {
		t.Fatalf("options with the kmod backend and no module: %v, want kmod.ErrNotLoaded", err)
	}
	// Past validation (the device vanished since), the run itself fails.
	opt.Backend = BackendKernel
	if err := opt.validate(); err != nil {
		t.Fatal(err)
	}
	opt.Backend = BackendKmod
	r, err := newReplayer(tr, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Replay(context.Background()); !errors.Is(err, kmod.ErrNotLoaded) {
		t.Fatalf("replay with the kmod backend and no module: %v, want kmod.ErrNotLoaded", err)
	}
}

// TestKmodOracle replays through the page cache with the kmod backend. It
// runs where the module is loaded: in CI, inside the qemu VM of
// kmod/vmtest/run.sh.
func TestKmodOracle(t *testing.T) {
	if _, err := os.Stat(kmod.DevicePath); err != nil {
		if _, err := os.Stat("/proc/modules"); err != nil {
			t.Skip("kernel has no loadable module support (no /proc/modules): kmod/vmtest/run.sh runs this test under qemu on Linux 6.1")
		}
		t.Skip("predictio module not loaded (no /dev/predictio): load it (docs/kmod.md) or run kmod/vmtest/run.sh")
	}
	tr := memTrace(8192, sparseRuns(8192, 1500, 3), 20_000)
	root := materialized(t, tr)
	rep := replayMem(t, tr, Options{Effect: EffectInline, Root: root, Backend: BackendKmod, Timing: TimingRecorded, Runs: []string{Baseline, "oracle:n=256"}})
	base, orc := rep.Runs[0], rep.Runs[1]
	c := orc.Counters
	t.Logf("baseline: wall %v stall %v; oracle: wall %v stall %v, %v, dropped pages %d counters %+v warnings %v",
		time.Duration(base.WallNS), time.Duration(base.StallNS), time.Duration(orc.WallNS), time.Duration(orc.StallNS),
		orc.Counts, orc.PagesDropped, c, orc.Warnings)
	if !base.Cold || !orc.Cold || base.Backend != BackendNone || orc.Backend != BackendKmod {
		t.Fatalf("runs: cold %v/%v, backends %s/%s; want cold runs, baseline on none, oracle on kmod", base.Cold, orc.Cold, base.Backend, orc.Backend)
	}
	if got := c.PagesSubmitted + c.PagesCached + c.PagesPastEOF + orc.PagesDropped; got != c.PagesRequested {
		t.Errorf("submitted %d + cached %d + past EOF %d + dropped %d = %d, want requested %d", c.PagesSubmitted, c.PagesCached, c.PagesPastEOF, orc.PagesDropped, got, c.PagesRequested)
	}
	if orc.EffectNote != "" {
		t.Fatalf("no counts by effect: %s", orc.EffectNote)
	}
	if err := orc.Counts.Check(); err != nil {
		t.Error(err)
	}
	if c.Failures != 0 || c.Rejected != 0 || c.Requests == 0 || c.InFlightMax == 0 || c.PagesSubmitted == 0 {
		t.Errorf("counters %+v, warnings %v", c, orc.Warnings)
	}
	// Pages the module's kernel threads read, counted from the page cache.
	if orc.UsedInTime == 0 || orc.UsedInTime < orc.Prefetched/2 {
		t.Errorf("oracle: %d of %d prefetched pages used in time", orc.UsedInTime, orc.Prefetched)
	}
}

// BenchmarkKmodVsKernel replays the same sparse trace with the oracle
// policy on the kernel backend and on the kmod backend, alternating, and
// reports the median stall and wall time of each (and of the baseline).
// Run it where the module is loaded: kmod/vmtest/run.sh -bench.
func BenchmarkKmodVsKernel(b *testing.B) {
	if _, err := os.Stat(kmod.DevicePath); err != nil {
		b.Skip("predictio module not loaded (no /dev/predictio): run kmod/vmtest/run.sh -bench")
	}
	tr := memTrace(8192, sparseRuns(8192, 1500, 3), 20_000)
	root := materialized(b, tr)
	backends := []string{BackendKernel, BackendKmod}
	stall := map[string][]float64{}
	wall := map[string][]float64{}
	for i := 0; i < b.N; i++ {
		for k := range backends {
			be := backends[(i+k)%len(backends)]
			rep := replayMem(b, tr, Options{Effect: EffectInline, Root: root, Backend: be, Timing: TimingRecorded, Runs: []string{Baseline, "oracle:n=256"}})
			base, orc := rep.Runs[0], rep.Runs[1]
			stall[be] = append(stall[be], float64(orc.StallNS)/1e6)
			wall[be] = append(wall[be], float64(orc.WallNS)/1e6)
			stall["baseline"] = append(stall["baseline"], float64(base.StallNS)/1e6)
			wall["baseline"] = append(wall["baseline"], float64(base.WallNS)/1e6)
		}
	}
	for name, xs := range stall {
		b.ReportMetric(medianF(xs), name+"-stall-ms")
		b.ReportMetric(medianF(wall[name]), name+"-wall-ms")
	}
}

func medianF(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
