package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
)

// scratchDir returns a directory on a disk filesystem (O_DIRECT and the page
// cache behave as on a real device there; /tmp may be tmpfs).
func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "predictio-replay-test-", "replay tests need a disk filesystem (not tmpfs) at /var/tmp or the temp dir for O_DIRECT and page-cache eviction")
}

// memTrace builds a trace in memory: one file of filePages pages and one
// thread reading the given page runs in order, thinkNS apart.
func memTrace(filePages uint64, runs [][2]uint64, thinkNS uint64) *trace {
	ps := formats.PageSize()
	f := &fileInfo{File: formats.File{ID: 7, Path: "/data/file.bin", Size: filePages * uint64(ps), MtimeNS: 1_700_000_000_123_456_789}}
	t := &trace{dir: "mem", pageSize: ps, files: []*fileInfo{f}, byID: map[uint32]*fileInfo{7: f}}
	th := &thread{tid: 100, pid: 100}
	ts := uint64(1_000_000)
	t.t0, t.firstTS = ts, ts
	for _, r := range runs {
		th.ops = append(th.ops, op{ts: ts, file: 0, page: r[0], n: uint32(r[1]), kind: formats.KindRead})
		if end := r[0] + r[1]; end > f.maxPage {
			f.maxPage = end
		}
		t.ops++
		t.pages += r[1]
		ts += thinkNS
	}
	f.accessed = true
	t.threads = []*thread{th}
	return t
}

// seqRuns reads pages 0..n-1, k pages at a time.
func seqRuns(n, k uint64) [][2]uint64 {
	var out [][2]uint64
	for p := uint64(0); p < n; p += k {
		out = append(out, [2]uint64{p, min(k, n-p)})
	}
	return out
}

// sparseRuns reads count single pages scattered over n pages, with some
// pages read twice.
func sparseRuns(n uint64, count int, seed int64) [][2]uint64 {
	rng := rand.New(rand.NewSource(seed))
	var out [][2]uint64
	for i := 0; i < count; i++ {
		if i > 10 && rng.Intn(8) == 0 {
			out = append(out, out[rng.Intn(len(out))]) // a repeat
			continue
		}
		out = append(out, [2]uint64{uint64(rng.Int63n(int64(n))), 1})
	}
	return out
}

func distinctPages(t *trace) uint64 {
	seen := map[uint64]bool{}
	for _, th := range t.threads {
		for _, o := range th.ops {
			for p := o.page; p < o.page+uint64(o.n); p++ {
				seen[uint64(o.file)<<40|p] = true
			}
		}
	}
	return uint64(len(seen))
}

func materialized(tb testing.TB, tr *trace) string {
	tb.Helper()
	dir := scratchDir(tb)
	if _, err := materializeTrace(tr, dir); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func replayMem(tb testing.TB, tr *trace, opt Options) *Report {
	tb.Helper()
	if err := opt.validate(); err != nil {
		tb.Fatal(err)
	}
	r, err := newReplayer(tr, opt)
	if err != nil {
		tb.Fatal(err)
	}
	rep, err := r.Replay(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

func TestMaterializeDeterministic(t *testing.T) {
	tr := memTrace(300, seqRuns(300, 8), 0)
	tr.files[0].Size -= 123 // not a multiple of the page size
	d1, d2 := materialized(t, tr), materialized(t, tr)
	p1, _ := pathFor(tr.files[0], d1)
	p2, _ := pathFor(tr.files[0], d2)
	b1, err := os.ReadFile(p1)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b1, b2) || uint64(len(b1)) != tr.files[0].Size {
		t.Fatalf("materialized files differ or have the wrong size: %d, %d bytes, want %d", len(b1), len(b2), tr.files[0].Size)
	}
	if bytes.Count(b1[:4096], []byte{0}) > 64 {
		t.Fatalf("content looks like zeros")
	}
	var st unix.Stat_t
	if err := unix.Stat(p1, &st); err != nil {
		t.Fatal(err)
	}
	if uint64(st.Blocks)*512 < tr.files[0].Size {
		t.Fatalf("file is sparse: %d blocks for %d bytes", st.Blocks, tr.files[0].Size)
	}
	if st.Mtim.Nano() != tr.files[0].MtimeNS {
		t.Fatalf("mtime %d, want recorded %d", st.Mtim.Nano(), tr.files[0].MtimeNS)
	}
	if _, err := checkFiles(tr, d1, false); err != nil {
		t.Fatalf("a materialized tree must pass the check: %v", err)
	}
	res, err := materializeTrace(tr, d1)
	if err != nil || res.Kept != 1 || res.Written != 0 {
		t.Fatalf("second materialize: %+v, %v; want the file kept", res, err)
	}
}

func TestCheckFilesErrors(t *testing.T) {
	tr := memTrace(64, seqRuns(64, 4), 0)
	dir := scratchDir(t)

	// Missing.
	_, err := checkFiles(tr, dir, false)
	if !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), "file.bin: missing") || !strings.Contains(err.Error(), "materialize") {
		t.Fatalf("missing file: got %v", err)
	}
	if _, err := materializeTrace(tr, dir); err != nil {
		t.Fatal(err)
	}
	p, _ := pathFor(tr.files[0], dir)

	// Changed mtime: an error, unless allowed.
	now := time.Now()
	os.Chtimes(p, now, now)
	_, err = checkFiles(tr, dir, false)
	if !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), "mtime") || !strings.Contains(err.Error(), "--allow-changed") {
		t.Fatalf("changed mtime: got %v", err)
	}
	if _, err := checkFiles(tr, dir, true); err != nil {
		t.Fatalf("changed mtime with allowChanged: %v", err)
	}

	// Shorter than the replayed pages: an error even when allowed.
	if err := os.Truncate(p, 10*4096); err != nil {
		t.Fatal(err)
	}
	for _, allow := range []bool{false, true} {
		_, err = checkFiles(tr, dir, allow)
		if !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), "shorter") {
			t.Fatalf("short file (allowChanged=%v): got %v", allow, err)
		}
	}

	// The same through New's checks: the error names the file.
	_, err = newReplayer(tr, Options{Root: dir, Backend: BackendNone, Timing: TimingASAP, Speed: 1, Repeat: 1, Runs: []string{Baseline}})
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("newReplayer with a short file: got %v, want an error naming %s", err, p)
	}
}

// TestDirectBaselineReadsEachPageOnce: without a policy, every distinct
// demanded page is read from the device exactly once; repeats hit.
func TestDirectBaselineReadsEachPageOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   *trace
	}{
		{"seq", memTrace(2048, seqRuns(2048, 4), 0)},
		{"sparse", memTrace(8192, sparseRuns(8192, 1500, 1), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := materialized(t, tc.tr)
			rep := replayMem(t, tc.tr, Options{Root: root, Backend: BackendDirect, Timing: TimingASAP, CachePages: 16384})
			r := rep.Runs[0]
			want := distinctPages(tc.tr)
			if r.DemandMisses != want || r.DevicePages != want {
				t.Fatalf("demand misses %d, device pages %d; want each of %d distinct pages read exactly once", r.DemandMisses, r.DevicePages, want)
			}
			if r.DemandHits+r.DemandMisses+r.Late+r.DemandWaits != r.Pages {
				t.Fatalf("hits %d + misses %d + late %d + waits %d != demanded pages %d", r.DemandHits, r.DemandMisses, r.Late, r.DemandWaits, r.Pages)
			}
			if r.Prefetched != 0 || r.Counters.Requests != 0 {
				t.Fatalf("baseline prefetched %d pages, %d requests", r.Prefetched, r.Counters.Requests)
			}
		})
	}
}

// checkCounters checks that a policy run's counters add up: every
// requested page submitted, skipped cached, clipped or dropped; every
// prefetched page used in time, late or wasted; no page prefetched that
// was not submitted.
func checkCounters(t *testing.T, r *Run) {
	t.Helper()
	c := r.Counters
	if got := c.PagesSubmitted + c.PagesCached + c.PagesPastEOF + r.PagesDropped; got != c.PagesRequested {
		t.Errorf("submitted %d + cached %d + past EOF %d + dropped %d = %d, want requested %d", c.PagesSubmitted, c.PagesCached, c.PagesPastEOF, r.PagesDropped, got, c.PagesRequested)
	}
	if r.EffectNote != "" {
		t.Fatalf("no counts by effect: %s", r.EffectNote)
	}
	if err := r.Counts.Check(); err != nil {
		t.Error(err)
	}
	if r.Prefetched > c.PagesSubmitted {
		t.Errorf("prefetched %d > submitted %d", r.Prefetched, c.PagesSubmitted)
	}
	if c.Failures != 0 || c.Rejected != 0 {
		t.Errorf("failures %d, rejected %d: %v", c.Failures, c.Rejected, r.Warnings)
	}
	if c.Requests == 0 || c.InFlightMax == 0 {
		t.Errorf("policy made %d requests, in-flight max %d", c.Requests, c.InFlightMax)
	}
}

// deviceThink returns a think time at which a prefetcher can keep ahead
// of tr's reads on this device: twice the baseline's stall per read (the
// device's service time at queue depth 1), and at least minNS. With
// less, a prefetch can be late however well it is made: the seq trace at
// 20 µs per 16 KiB read asks for some 800 MB/s, several times what a
// bandwidth-capped cloud disk delivers (CI's gave about 90 MB/s).
func deviceThink(t *testing.T, tr *trace, root string, minNS uint64) uint64 {
	t.Helper()
	r := replayMem(t, tr, Options{Root: root, Backend: BackendDirect, Timing: TimingASAP, CachePages: 16384}).Runs[0]
	perRead := uint64(max(r.StallNS, 0)) / uint64(max(tr.ops, 1))
	return max(minNS, 2*perRead)
}

// TestDirectOracle: with the oracle, demand misses are close to zero,
// most prefetches are in time and counters add up. The think time is
// set from the device (deviceThink), so that "in time" asks of the
// backend what the device can give.
func TestDirectOracle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages uint64
		runs  [][2]uint64
	}{
		{"seq", 2048, seqRuns(2048, 4)},
		{"sparse", 8192, sparseRuns(8192, 1500, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := memTrace(tc.pages, tc.runs, 20_000)
			root := materialized(t, probe)
			think := deviceThink(t, probe, root, 20_000)
			tr := memTrace(tc.pages, tc.runs, think)
			t.Logf("think time %v per read", time.Duration(think))
			distinct := distinctPages(tr)
			// Whether a prefetch beats its demand also depends on the
			// service goroutine getting a CPU within the think time, which
			// a loaded machine (other test packages run in parallel) may
			// deny: up to three attempts, and one must come close to zero
			// misses with half the pages or more used in time. A backend
			// that prefetches nothing misses every page in all three.
			var base, orc *Run
			for attempt := 1; ; attempt++ {
				rep := replayMem(t, tr, Options{Root: root, Backend: BackendDirect, Timing: TimingRecorded,
					CachePages: 16384, Runs: []string{Baseline, "oracle:n=256"}})
				base, orc = rep.Runs[0], rep.Runs[1]
				t.Logf("attempt %d: baseline: wall %v stall %v misses %d; oracle: wall %v stall %v misses %d, %v, counters %+v", attempt,
					time.Duration(base.WallNS), time.Duration(base.StallNS), base.DemandMisses, time.Duration(orc.WallNS), time.Duration(orc.StallNS),
					orc.DemandMisses, orc.Counts, orc.Counters)
				if orc.DemandMisses <= distinct/20+2 && orc.UsedInTime >= distinct/2 {
					break
				}
				if attempt == 3 {
					t.Fatalf("oracle demand misses %d, used in time %d of %d distinct pages in the last of 3 attempts; want misses close to zero (baseline %d) and half or more used in time", orc.DemandMisses, orc.UsedInTime, distinct, base.DemandMisses)
				}
			}
			if orc.DemandHits+orc.DemandMisses+orc.Late+orc.DemandWaits != orc.Pages {
				t.Fatalf("hits %d + misses %d + late %d + waits %d != demanded %d", orc.DemandHits, orc.DemandMisses, orc.Late, orc.DemandWaits, orc.Pages)
			}
			if orc.DevicePages != orc.DemandMisses+orc.Prefetched {
				t.Fatalf("device pages %d != misses %d + prefetched %d", orc.DevicePages, orc.DemandMisses, orc.Prefetched)
			}
			checkCounters(t, orc)
			// One thread and a cache larger than the file: the first demand
			// of each distinct page is a miss, or finds its prefetch done
			// (used in time) or in flight (late).
			if got := orc.UsedInTime + orc.Late + orc.DemandMisses; got != distinct {
				t.Errorf("used in time %d + late %d + misses %d = %d, want the %d distinct pages", orc.UsedInTime, orc.Late, orc.DemandMisses, got, distinct)
			}
		})
	}
}

// TestKernelOracle replays through the page cache with the kernel backend.
func TestKernelOracle(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   *trace
	}{
		{"seq", memTrace(2048, seqRuns(2048, 4), 20_000)},
		{"sparse", memTrace(8192, sparseRuns(8192, 1500, 3), 20_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := materialized(t, tc.tr)
			rep := replayMem(t, tc.tr, Options{Effect: EffectInline, Root: root, Backend: BackendKernel, Timing: TimingRecorded, Runs: []string{Baseline, "oracle:n=256"}})
			base, orc := rep.Runs[0], rep.Runs[1]
			t.Logf("baseline: wall %v stall %v dev %d KiB; oracle: wall %v stall %v dev %d KiB, %v, dropped pages %d counters %+v",
				time.Duration(base.WallNS), time.Duration(base.StallNS), base.DeviceReadBytes>>10, time.Duration(orc.WallNS), time.Duration(orc.StallNS),
				orc.DeviceReadBytes>>10, orc.Counts, orc.PagesDropped, orc.Counters)
			if !base.Cold || !orc.Cold || base.Backend != BackendNone || orc.Backend != BackendKernel {
				t.Fatalf("runs: cold %v/%v, backends %s/%s; want cold runs, baseline on none, oracle on kernel", base.Cold, orc.Cold, base.Backend, orc.Backend)
			}
			checkCounters(t, orc)
			// Counted from the page cache (eBPF): zero if WILLNEED read
			// nothing, whatever was requested. A sequential scan of a file
			// within the kernel's readahead (8 MiB here) leaves the oracle
			// nothing the demand's own readahead does not read first.
			if tc.name == "sparse" && (orc.UsedInTime == 0 || orc.UsedInTime < orc.Prefetched/2) {
				t.Fatalf("oracle: %d of %d prefetched pages used in time: %v, counters %+v", orc.UsedInTime, orc.Prefetched, orc.Counts, orc.Counters)
			}
			// The baseline runs without the observer (nothing to count);
			// the oracle run's demand reads are the demand's.
			if base.Prefetched != 0 || orc.DemandRead == 0 {
				t.Errorf("baseline: %v, oracle: %v; want nothing prefetched by the baseline and the oracle run's demand reads counted", base.Counts, orc.Counts)
			}
		})
	}
}

// TestKernelRefusesWarmColdRun: when eviction cannot make the files cold, a
// kernel-mode run refuses to start.
func TestKernelRefusesWarmColdRun(t *testing.T) {
	tr := memTrace(256, seqRuns(256, 8), 0)
	root := materialized(t, tr)
	p, _ := pathFor(tr.files[0], root)

	// Eviction impossible (hook): the pages stay cached after a read.
	if b, err := os.ReadFile(p); err != nil || len(b) == 0 {
		t.Fatal(err)
	}
	opt := Options{Effect: EffectInline, Root: root, Backend: BackendKernel, Timing: TimingASAP, Runs: []string{Baseline, "oracle"}}
	opt.validate()
	r, err := newReplayer(tr, opt)
	if err != nil {
		t.Fatal(err)
	}
	r.opt.skipEvict = true
	if _, err := r.Replay(context.Background()); !errors.Is(err, ErrNotCold) || !strings.Contains(err.Error(), p) {
		t.Fatalf("eviction skipped: got %v, want ErrNotCold naming %s", err, p)
	}

	// Pages mapped by another mapping: POSIX_FADV_DONTNEED cannot drop
	// them.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 256*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for i := 0; i < len(mem); i += 4096 {
		testSink += mem[i]
	}
	r.opt.skipEvict = false
	if _, err := r.Replay(context.Background()); !errors.Is(err, ErrNotCold) {
		t.Fatalf("pages mapped elsewhere: got %v, want ErrNotCold", err)
	}
	unix.Munmap(mem)
	mem = nil

	// With the mapping gone eviction works and the run is cold.
	rep, err := r.Replay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Runs[0].Cold {
		t.Fatalf("run not reported cold after a successful eviction")
	}
	// --warm runs are reported warm.
	r.opt.Warm = true
	rep, err = r.Replay(context.Background())
	if err != nil || rep.Runs[0].Cold {
		t.Fatalf("warm run: %v, cold=%v", err, rep != nil && rep.Runs[0].Cold)
	}
}

// TestFaultsAndThreads replays faults through the mapping and two threads.
func TestFaultsAndThreads(t *testing.T) {
	tr := memTrace(1024, seqRuns(512, 4), 1000)
	th2 := &thread{tid: 101, pid: 100}
	for p := uint64(512); p < 1024; p += 2 {
		th2.ops = append(th2.ops, op{ts: 2_000_000 + p, page: p, n: 2, kind: formats.KindFault, fault: true})
		tr.ops++
		tr.pages += 2
	}
	tr.files[0].maxPage = 1024
	tr.threads = append(tr.threads, th2)
	root := materialized(t, tr)
	for _, b := range []string{BackendNone, BackendKernel, BackendDirect} {
		rep := replayMem(t, tr, Options{Effect: EffectInline, Root: root, Backend: b, Timing: TimingASAP, Runs: []string{"oracle"}})
		r := rep.Runs[0]
		if r.Accesses != tr.ops || len(r.lat) != tr.ops || r.Events != uint64(tr.ops) {
			t.Fatalf("%s: %d accesses, %d latencies, %d events; want %d", b, r.Accesses, len(r.lat), r.Events, tr.ops)
		}
	}
}

// TestReportJSONAndPlot checks the report keys and the plot.
func TestReportJSONAndPlot(t *testing.T) {
	tr := memTrace(1024, sparseRuns(1024, 300, 4), 0)
	root := materialized(t, tr)
	rep := replayMem(t, tr, Options{Root: root, Backend: BackendDirect, Timing: TimingASAP, CachePages: 4096, Runs: []string{Baseline, "oracle"}, Repeat: 2})
	if len(rep.Runs) != 4 || rep.Runs[0].Policy != Baseline || rep.Runs[1].Policy != "oracle" || rep.Runs[2].Policy != Baseline {
		t.Fatalf("runs not alternated: %v", rep.Runs)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Runs    []map[string]any `json:"runs"`
		Summary map[string]any   `json:"summary"`
	}
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "wall_ns", "stall_ns", "p99_us"} {
		if _, ok := m.Runs[0][k]; !ok {
			t.Errorf("runs[0] has no key %q", k)
		}
	}
	if sp, ok := m.Summary["speedup"].(float64); !ok || sp <= 0 {
		t.Errorf("summary.speedup = %v", m.Summary["speedup"])
	}
	buf.Reset()
	if err := rep.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "oracle") {
		t.Fatalf("text report: %v\n%s", err, buf.String())
	}
	png := filepath.Join(scratchDir(t), "cdf.png")
	if err := rep.WritePlot(png); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("plot: %v", err)
	}
}

var testSink byte

func TestSplitRuns(t *testing.T) {
	got := fmt.Sprint(SplitRuns("baseline, markov:depth=4,threshold=0.2,tree:window=8"))
	if got != "[baseline markov:depth=4,threshold=0.2 tree:window=8]" {
		t.Fatalf("SplitRuns: %s", got)
	}
}

// synthBundle writes a synthetic bundle and materializes its files.
func synthBundle(t *testing.T, spec formats.SynthSpec) (bundle, root string) {
	t.Helper()
	dir := scratchDir(t)
	bundle, root = filepath.Join(dir, "bundle"), filepath.Join(dir, "files")
	if err := formats.Synth(bundle, spec); err != nil {
		t.Fatal(err)
	}
	res, err := Materialize(bundle, root)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != spec.Files || res.Written != spec.Files {
		t.Fatalf("materialize: %+v", res)
	}
	return bundle, root
}

// TestSynthBundles replays a sequential and a sparse synthetic bundle on
// materialized files, with both backends, baseline against oracle.
func TestSynthBundles(t *testing.T) {
	for _, spec := range []formats.SynthSpec{
		{Pattern: "seq", Events: 3000, Files: 2, ThinkNS: 5000},
		{Pattern: "sparse", Events: 2000, Files: 1, FilePages: 16384, ThinkNS: 20000},
	} {
		bundle, root := synthBundle(t, spec)
		for _, backend := range []string{BackendDirect, BackendKernel} {
			t.Run(spec.Pattern+"/"+backend, func(t *testing.T) {
				r, err := New(bundle, Options{Effect: EffectInline, Root: root, Backend: backend, CachePages: 32768, Runs: []string{Baseline, "oracle:n=256"}})
				if err != nil {
					t.Fatal(err)
				}
				distinct := distinctPages(r.t)
				// The oracle's lead over the demand is timing: on a
				// machine busy with other work its prefetcher can fall
				// behind, so a run with too many misses is retried.
				var rep *Report
				var base, orc *Run
				for attempt := 1; ; attempt++ {
					if rep, err = r.Replay(context.Background()); err != nil {
						t.Fatal(err)
					}
					base, orc = rep.Runs[0], rep.Runs[1]
					t.Logf("baseline wall %v stall %v, oracle wall %v stall %v, misses %d -> %d, speedup %.2f",
						time.Duration(base.WallNS), time.Duration(base.StallNS), time.Duration(orc.WallNS), time.Duration(orc.StallNS),
						base.DemandMisses, orc.DemandMisses, rep.Summary.Speedup)
					if backend != BackendDirect || orc.DemandMisses <= distinct/20+2 || attempt == 3 {
						break
					}
				}
				if base.Accesses != spec.Events || orc.Events != uint64(spec.Events) {
					t.Fatalf("replayed %d accesses, dispatched %d events; want %d", base.Accesses, orc.Events, spec.Events)
				}
				checkCounters(t, orc)
				if backend == BackendDirect {
					if base.DemandMisses != distinct || base.DevicePages != distinct {
						t.Errorf("baseline read %d pages (%d misses), want each of %d distinct pages once", base.DevicePages, base.DemandMisses, distinct)
					}
					if orc.DemandMisses > distinct/20+2 {
						t.Errorf("oracle demand misses %d of %d in each of 3 attempts (last)", orc.DemandMisses, distinct)
					}
				}
				if err := r.Predict(rep, simulateDevice(t)); err != nil {
					t.Fatal(err)
				}
				if rep.Summary.PredictedSpeedup <= 0 {
					t.Errorf("no predicted speedup: %+v", rep.Summary)
				}
			})
		}
	}
}

// TestBadBundles: a corrupted bundle and a missing bundle get clear errors.
func TestBadBundles(t *testing.T) {
	bundle, root := synthBundle(t, formats.SynthSpec{Pattern: "random", Events: 500, Files: 1, FilePages: 1024})
	acc := filepath.Join(bundle, formats.AccessesFile)
	b, err := os.ReadFile(acc)
	if err != nil {
		t.Fatal(err)
	}
	// Truncate the accesses table in the middle.
	if err := os.WriteFile(acc, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = New(bundle, Options{Root: root})
	if err == nil || !strings.Contains(err.Error(), bundle) {
		t.Fatalf("truncated %s: got %v, want an error naming the bundle", formats.AccessesFile, err)
	}
	t.Logf("truncated accesses: %v", err)
	// Garbage instead of the table.
	garbage := bytes.Repeat([]byte("not arrow "), 100)
	os.WriteFile(acc, garbage, 0o644)
	if _, err = New(bundle, Options{Root: root}); err == nil {
		t.Fatalf("garbage %s: no error", formats.AccessesFile)
	}
	t.Logf("garbage accesses: %v", err)
	if _, err := New(filepath.Join(bundle, "nope"), Options{}); err == nil {
		t.Fatal("missing bundle: no error")
	}
	if _, err := Materialize(bundle, filepath.Join(root, "x")); err == nil {
		t.Fatal("materialize of a corrupted bundle: no error")
	}
}

// TestMissingAndShortFilesViaBundle: files named by a bundle that are missing
// or short are each listed.
func TestMissingAndShortFilesViaBundle(t *testing.T) {
	bundle, root := synthBundle(t, formats.SynthSpec{Pattern: "seq", Events: 600, Files: 3})
	os.Remove(filepath.Join(root, "synth", "seq-000.dat"))
	os.Truncate(filepath.Join(root, "synth", "seq-002.dat"), 4096)
	_, err := New(bundle, Options{Root: root})
	if !errors.Is(err, ErrFiles) {
		t.Fatalf("got %v, want ErrFiles", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "seq-000.dat: missing") || !strings.Contains(msg, "seq-002.dat: size 4096 is shorter") || strings.Contains(msg, "seq-001") {
		t.Fatalf("error does not list exactly the missing and the short file:\n%s", msg)
	}
	// Without --root the recorded paths (/synth/...) do not exist.
	if _, err := New(bundle, Options{}); !errors.Is(err, ErrFiles) || !strings.Contains(err.Error(), "/synth/seq-000.dat: missing") {
		t.Fatalf("recorded paths: got %v", err)
	}
}

// TestManyThreadsDirect: more recorded threads than engine workers share
// them, and every page is still read exactly once.
func TestManyThreadsDirect(t *testing.T) {
	tr := memTrace(4096, nil, 0)
	tr.threads = nil
	for i := 0; i < maxDemandWorkers+6; i++ {
		th := &thread{tid: uint32(1000 + i), pid: 1000}
		for j := 0; j < 20; j++ {
			p := uint64((i*20 + j) % 4096)
			th.ops = append(th.ops, op{ts: 1_000_000 + uint64(j), page: p, n: 2, kind: formats.KindRead})
			tr.ops++
			tr.pages += 2
		}
		tr.threads = append(tr.threads, th)
	}
	tr.files[0].maxPage = 4096
	root := materialized(t, tr)
	rep := replayMem(t, tr, Options{Root: root, Backend: BackendDirect, Timing: TimingASAP, Runs: []string{Baseline}})
	r := rep.Runs[0]
	if want := distinctPages(tr); r.DemandMisses != want || r.DevicePages != want {
		t.Fatalf("misses %d, device pages %d; want %d distinct pages read once", r.DemandMisses, r.DevicePages, want)
	}
	if r.DemandHits+r.DemandMisses+r.DemandWaits != r.Pages || r.Late != 0 {
		t.Fatalf("hits %d + misses %d + waits %d != %d (late %d, no prefetch)", r.DemandHits, r.DemandMisses, r.DemandWaits, r.Pages, r.Late)
	}
}

// TestHintsDelivered replays a synthetic B-tree bundle: every hint reaches
// the tree policy, whose prefetches remove demand misses.
func TestHintsDelivered(t *testing.T) {
	bundle, root := synthBundle(t, formats.SynthSpec{Pattern: "btree", Events: 2000, Files: 1, FilePages: 8192, ThinkNS: 20000})
	for _, timing := range []string{TimingRecorded, TimingASAP} {
		r, err := New(bundle, Options{Root: root, Backend: BackendDirect, Timing: timing, CachePages: 16384, Runs: []string{Baseline, "tree"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.t.hints) == 0 {
			t.Fatal("synthetic btree bundle has no hints")
		}
		rep, err := r.Replay(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		base, tree := rep.Runs[0], rep.Runs[1]
		t.Logf("%s: %d hints; misses %d -> %d, %v", timing, len(r.t.hints), base.DemandMisses, tree.DemandMisses, tree.Counts)
		// Hints after the last access are never due; all others are.
		last := uint64(0)
		for _, th := range r.t.threads {
			last = max(last, th.ops[len(th.ops)-1].ts)
		}
		due := 0
		for _, h := range r.t.hints {
			if h.TS <= last {
				due++
			}
		}
		if tree.Hints != due || base.Hints != 0 {
			t.Fatalf("%s: delivered %d hints, want %d (baseline %d, want 0)", timing, tree.Hints, due, base.Hints)
		}
		// With think time the prefetches have time to land; asap only
		// checks delivery and counters.
		if timing == TimingRecorded && (tree.UsedInTime == 0 || tree.DemandMisses >= base.DemandMisses) {
			t.Fatalf("%s: tree prefetches did not remove misses: %d -> %d, %v", timing, base.DemandMisses, tree.DemandMisses, tree.Counts)
		}
		checkCounters(t, tree)
	}
}
