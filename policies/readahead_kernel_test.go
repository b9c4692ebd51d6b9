package policies

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/predictio/predictio/formats"
	"golang.org/x/sys/unix"
)

// This file validates the readahead model against the running kernel: each
// scenario runs on a file of the test's own, on an ext4 filesystem on a
// block device of its own, and the kernel's readahead decisions (captured
// by readahead_trace_test.go) must equal the model's, decision for
// decision, as must the page-cache contents at the end.

// mmapSink keeps the mmap scans' loads alive.
var mmapSink byte

// raAttempts bounds the runs of one scenario: a run during which another
// process evicted pages of the test's file (drop_caches, memory pressure)
// is repeated, and so, while attempts remain, is one whose recording lost
// the first lookup of a read call.
const raAttempts = 8

// kernelRA is one decision, as the kernel reports it or as the model makes
// it.
type kernelRA struct {
	kind       RAKind
	index, req uint64
	window     bool
	start      uint64
	size       uint64
	async      uint64
}

func (d kernelRA) String() string {
	s := fmt.Sprintf("%s index=%d req=%d", d.kind, d.index, d.req)
	if d.window {
		s += fmt.Sprintf(" -> window start=%d size=%d async=%d", d.start, d.size, d.async)
	}
	return s
}

func modelRA(d *RADecision) kernelRA {
	k := kernelRA{kind: d.Kind, index: d.Index, req: d.ReqCount, window: d.Window}
	if d.Window {
		k.start, k.size, k.async = d.After.Start, d.After.Size, d.After.AsyncSize
	}
	if d.Kind == RAMmap || d.Kind == RAExec {
		// No trigger tracepoint: only the window is seen, and the
		// kernel's trace cannot tell an exec window from read-around.
		k.kind, k.index, k.req = RAMmap, 0, 0
	}
	return k
}

// kernelDecisions turns readahead events into decisions: a sync/async
// trigger, followed by the page_cache_ra_order window it chose if any; a
// window without a trigger is an mmap read-around. pos holds, per
// decision, the index of its last event in evs.
func kernelDecisions(t *testing.T, evs []traceEvent) (out []kernelRA, pos []int) {
	open := -1
	for i, e := range evs {
		switch e.name {
		case evSync, evAsync:
			k := RASync
			if e.name == evAsync {
				k = RAAsync
			}
			out = append(out, kernelRA{kind: k, index: e.u64(t, "index"), req: e.u64(t, "req_count")})
			pos = append(pos, i)
			open = len(out) - 1
		case evOrder:
			if open < 0 {
				out = append(out, kernelRA{kind: RAMmap})
				pos = append(pos, i)
				open = len(out) - 1
			}
			d := &out[open]
			d.window, d.start, d.size, d.async = true, e.u64(t, "index"), e.u64(t, "size"), e.u64(t, "async_size")
			pos[open] = i
			open = -1
		default:
			open = -1
		}
	}
	return out, pos
}

// matchDecisions aligns two decision sequences and returns the matches.
func matchDecisions(kern, model []kernelRA) (matched int, diffs []string) {
	i, j := 0, 0
	for i < len(kern) && j < len(model) {
		if kern[i] == model[j] {
			matched++
			i++
			j++
			continue
		}
		diffs = append(diffs, fmt.Sprintf("#%d kernel %v | model %v", i, kern[i], model[j]))
		// Resynchronise on the next decision both agree on.
		found := false
		for d := 1; d <= 8 && !found; d++ {
			if j+d < len(model) && kern[i] == model[j+d] {
				j += d
				found = true
			} else if i+d < len(kern) && kern[i+d] == model[j] {
				i += d
				found = true
			}
		}
		if !found {
			i++
			j++
		}
	}
	for ; i < len(kern); i++ {
		diffs = append(diffs, fmt.Sprintf("#%d kernel %v | model -", i, kern[i]))
	}
	for ; j < len(model); j++ {
		diffs = append(diffs, fmt.Sprintf("model #%d %v | kernel -", j, model[j]))
	}
	return matched, diffs
}

// evictFile drops f from the page cache and verifies with mincore(2) that
// none of it is cached.
func evictFile(t *testing.T, f *os.File, size int64) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, b := range residency(t, f, size) {
			n += int(b & 1)
		}
		if n == 0 {
			return
		}
		if try == 3 {
			t.Fatalf("file not cold after POSIX_FADV_DONTNEED: %d pages cached", n)
		}
	}
}

// residency returns the mincore(2) vector of the file's pages: bit 0 set
// for each page in the page cache.
func residency(t *testing.T, f *os.File, size int64) []byte {
	t.Helper()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (size+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	return vec
}

// settledResidency returns the file's residency once the readahead I/O
// in flight has finished: mincore reports a page only once it is
// up to date, while the model counts a page from its insertion.
func settledResidency(t *testing.T, f *os.File, size int64) []byte {
	t.Helper()
	vec := residency(t, f, size)
	for same, i := 0, 0; same < 3 && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
		next := residency(t, f, size)
		if bytes.Equal(next, vec) {
			same++
		} else {
			same = 0
		}
		vec = next
	}
	return vec
}

// fileGeometry is what the readahead model needs to know of a file.
type fileGeometry struct {
	st               syscall.Stat_t
	raPages, ioPages uint64 // the device's read_ahead_kb and max I/O, in pages
	fsType           int64
}

// geometry returns f's fileGeometry.
func geometry(t *testing.T, f *os.File) fileGeometry {
	t.Helper()
	var g fileGeometry
	if err := syscall.Fstat(int(f.Fd()), &g.st); err != nil {
		t.Fatal(err)
	}
	g.raPages, g.ioPages = bdiPages(t, uint64(g.st.Dev))
	if g.raPages == 0 {
		t.Fatalf("cannot read the private device's read_ahead_kb from /sys/class/bdi")
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		t.Fatal(err)
	}
	g.fsType = int64(sfs.Type)
	return g
}

// bdiPages returns read_ahead_kb and max_sectors_kb of device dev, in
// pages.
func bdiPages(t *testing.T, dev uint64) (ra, io uint64) {
	d := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	read := func(p string) uint64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n / 4
	}
	ra = read("/sys/class/bdi/" + d + "/read_ahead_kb")
	io = read("/sys/dev/block/" + d + "/queue/max_sectors_kb")
	if io == 0 {
		io = read("/sys/dev/block/" + d + "/../queue/max_sectors_kb")
	}
	return ra, io
}

// privateExt4 returns a fresh directory on an ext4 filesystem on a block
// device that only this test uses, with read_ahead_kb set to raKB: a loop
// device over an image made with mkfs.ext4, or, where mkfs.ext4 is missing
// (the qemu VM of kmod/vmtest, whose initramfs has busybox only), the
// spare ext4 disk PREDICTIO_RA_BLOCKDEV names.
func privateExt4(t *testing.T, raKB int) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "predictio-raloop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	dev := os.Getenv("PREDICTIO_RA_BLOCKDEV")
	if _, err := exec.LookPath("mkfs.ext4"); err == nil || dev == "" {
		dev = loopDevice(t, dir)
	}
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	ra := filepath.Join("/sys/block", filepath.Base(dev), "queue/read_ahead_kb")
	if err := os.WriteFile(ra, []byte(strconv.Itoa(raKB)), 0); err != nil {
		t.Fatalf("set %s: %v", ra, err)
	}
	work, err := os.MkdirTemp(mnt, "ra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	return work
}

// loopDevice makes a 256 MiB ext4 image in dir and attaches it to a loop
// device, detached when the test ends.
func loopDevice(t *testing.T, dir string) string {
	t.Helper()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s (readahead validation needs mkfs.ext4 and loop devices, or PREDICTIO_RA_BLOCKDEV)", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("mkfs.ext4", "-q", "-F", img)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("kernel lacks loop devices (/dev/loop-control: %v), and PREDICTIO_RA_BLOCKDEV names no spare ext4 disk", err)
	}
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// raScenario is one access pattern. Read scenarios issue read calls;
// mmap scenarios touch the pages of one mapping.
type raScenario struct {
	name   string
	sparse bool // on an 8 GiB sparse file instead of the 64 MiB data file
	raKB   int  // run only with this read_ahead_kb; 0: with every one
	// fadviseSeq applies POSIX_FADV_SEQUENTIAL first (ra_pages doubled).
	fadviseSeq bool
	reads      []readCall // read scenarios: page ranges, in order
	mmap       *mmapPlan
	check      func(t *testing.T, r *raResult) // extra assertions
}

type readCall struct{ first, n uint64 }

// mmapPlan maps [first, first+pages) of the file (pages 0: all of it) and
// loads from (or writes to) the given file pages in order.
type mmapPlan struct {
	prot, flags  int
	first, pages uint64
	write        bool
	touches      []uint64
}

// raResult is what one clean run of a scenario produced.
type raResult struct {
	evs      []traceEvent
	kern     []kernelRA
	kernPos  []int
	model    []kernelRA
	m        *Readahead
	calls    []readCall
	vec      []byte
	faults   int // fault events that were not retries
	attempts int
	lossy    int // read calls whose first lookup the recording lacks
	// firstLossy is the first of them (len(calls) when none): the lookups
	// before it can be compared.
	firstLossy int
}

const (
	raDataSize   = 64 << 20
	raDataPages  = raDataSize / 4096
	raSparseSize = 8 << 30
)

// raScenarios returns the scenarios, drawn from fixed seeds.
func raScenarios() []raScenario {
	const pages = raDataPages
	seq := func(chunk, stride uint64) []readCall {
		var cs []readCall
		for p := uint64(0); p+chunk <= pages; p += stride {
			cs = append(cs, readCall{p, chunk})
		}
		return cs
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var random4k, random64k, interleaved, backward []readCall
	var randomPages []uint64
	for range 2000 {
		p := rng.Uint64N(pages)
		random4k = append(random4k, readCall{p, 1})
		randomPages = append(randomPages, p)
	}
	for range 500 {
		random64k = append(random64k, readCall{rng.Uint64N(pages - 16), 16})
	}
	for i := uint64(0); i < 4096; i++ {
		interleaved = append(interleaved, readCall{i, 1}, readCall{pages/2 + i, 1})
	}
	for i := uint64(1); i <= 1024; i++ {
		backward = append(backward, readCall{pages - i, 1})
	}
	all := make([]uint64, pages)
	for i := range all {
		all[i] = uint64(i)
	}
	sub := make([]uint64, 0, 300)
	for p := uint64(1000); p < 1300; p++ {
		sub = append(sub, p)
	}
	srng := rand.New(rand.NewPCG(5, 6))
	var sparse150, sparse200 []uint64
	for range 150 {
		sparse150 = append(sparse150, srng.Uint64N(raSparseSize/4096))
	}
	for range 200 {
		sparse200 = append(sparse200, srng.Uint64N(raSparseSize/4096))
	}
	shared := unix.MAP_SHARED
	private := unix.MAP_PRIVATE
	rd, rx := unix.PROT_READ, unix.PROT_READ|unix.PROT_EXEC
	return []raScenario{
		{name: "sequential-4k", reads: seq(1, 1)},
		{name: "sequential-128k", reads: seq(32, 32)},
		{name: "sequential-4k-fadvise-sequential", fadviseSeq: true, reads: seq(1, 1)},
		{name: "sequential-16m", reads: seq(4096, 4096)},
		{name: "strided-4k-every-16", reads: seq(1, 16)},
		{name: "strided-4k-every-2", reads: seq(1, 2)},
		{name: "random-4k", reads: random4k},
		{name: "random-64k", reads: random64k},
		{name: "interleaved-2-streams", reads: interleaved},
		{name: "backward-4k", reads: backward},
		{name: "mmap-scan", mmap: &mmapPlan{prot: rd, flags: shared, touches: all}},
		{name: "mmap-random", mmap: &mmapPlan{prot: rd, flags: shared, touches: randomPages}},
		{name: "mmap-fault-5000", mmap: &mmapPlan{prot: rd, flags: private, touches: []uint64{5000}}, check: checkFault5000(false)},
		{name: "exec-fault-5000", mmap: &mmapPlan{prot: rx, flags: private, touches: []uint64{5000}}, check: checkFault5000(true)},
		{name: "exec-scan", mmap: &mmapPlan{prot: rx, flags: private, touches: all}, check: checkExec},
		{name: "exec-random", mmap: &mmapPlan{prot: rx, flags: private, touches: randomPages}, check: checkExec},
		{name: "exec-subrange", mmap: &mmapPlan{prot: rx, flags: private, first: 1000, pages: 300, touches: sub}, check: checkExec},
		{name: "mmap-random-sparse", sparse: true, raKB: 128, mmap: &mmapPlan{prot: rd, flags: shared, touches: sparse150}},
		{name: "cow-lotsamiss", sparse: true, raKB: 128, mmap: &mmapPlan{prot: rd | unix.PROT_WRITE, flags: private | unix.MAP_NORESERVE, write: true, touches: sparse200}, check: checkLotsaMiss},
	}
}

// checkFault5000 checks the first decision of a single cold fault at page
// 5000 against the numbers worked out from the kernel sources: read-around
// centred on the fault with async ra_pages/4, or, for an executable mapping
// on Linux 6.16 and later, a window from the fault with no async part.
func checkFault5000(execMap bool) func(t *testing.T, r *raResult) {
	return func(t *testing.T, r *raResult) {
		if len(r.kern) == 0 {
			t.Fatal("no decision")
		}
		ra := r.m.file(1).raPages
		want := kernelRA{kind: RAMmap, window: true, start: 5000 - ra/2, size: ra, async: ra / 4}
		if execMap && r.m.era == era618 {
			want.start, want.async = 5000, 0
		}
		if r.kern[0] != want {
			t.Errorf("kernel %v, want %v", r.kern[0], want)
		}
	}
}

// checkExec checks that exec windows took the exec path on 6.16+ and the
// read-around path before.
func checkExec(t *testing.T, r *raResult) {
	exec, mmap := r.m.Decisions[RAExec], r.m.Decisions[RAMmap]
	switch {
	case r.m.era == era618 && (exec == 0 || mmap != 0):
		t.Errorf("Linux %s: %d exec and %d read-around decisions; want exec ones only", r.m.Kernel(), exec, mmap)
	case r.m.era != era618 && exec != 0:
		t.Errorf("Linux %s has no exec path, but the model made %d exec decisions", r.m.Kernel(), exec)
	}
}

// checkLotsaMiss checks that the kernel stopped reading around once
// mmap_miss passed MMAP_LOTSAMISS, as the model did.
func checkLotsaMiss(t *testing.T, r *raResult) {
	if mm := r.m.State(1).MmapMiss; mm <= MmapLotsaMiss {
		t.Errorf("model mmap_miss %d, want > %d", mm, MmapLotsaMiss)
	}
	if len(r.kern) >= r.faults {
		t.Errorf("kernel made %d read-around decisions for %d cold faults: it never stopped", len(r.kern), r.faults)
	}
	t.Logf("%d cold faults, %d read-arounds, model mmap_miss %d", r.faults, len(r.kern), r.m.State(1).MmapMiss)
}

// TestReadaheadMatchesKernel runs every scenario with read_ahead_kb 128
// (the kernel's default) and 8192 (this machine's virtio disk) and requires
// the model to make exactly the kernel's decisions.
func TestReadaheadMatchesKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 64 MiB cold several times")
	}
	tr := newRATracer(t)
	t.Logf("Linux %s (model: %s code); events: %s", RunningKernel(), eraOf(RunningKernel()), tr.describe())
	for _, kb := range []int{128, 8192} {
		t.Run(fmt.Sprintf("ra%dk", kb), func(t *testing.T) {
			dir := privateExt4(t, kb)
			var total, matched, lookTotal, lookMatched int
			for _, sc := range raScenarios() {
				if sc.raKB != 0 && sc.raKB != kb {
					continue
				}
				t.Run(sc.name, func(t *testing.T) {
					k, m, lk, lm := runScenario(t, tr, dir, sc)
					total, matched, lookTotal, lookMatched = total+k, matched+m, lookTotal+lk, lookMatched+lm
				})
			}
			t.Logf("ra %d KiB: %d of %d kernel decisions matched; recorded lookups: %d of %d", kb, matched, total, lookMatched, lookTotal)
		})
	}
}

// scenarioFile makes the scenario files in dir once: a 64 MiB file of data and
// an 8 GiB sparse file (holes read as zeroes, through readahead).
func scenarioFile(t *testing.T, dir string, sparse bool) (*os.File, int64) {
	t.Helper()
	name, size := "data", int64(raDataSize)
	if sparse {
		name, size = "sparse", raSparseSize
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if sparse {
			err = f.Truncate(size)
		} else {
			buf := bytes.Repeat([]byte("predictio readahead validation\n"), 1<<15)
			for n := int64(0); n < size && err == nil; n += int64(len(buf)) {
				_, err = f.Write(buf[:min(int64(len(buf)), size-n)])
			}
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, size
}

// runScenario runs sc until a clean run and checks it; it returns the
// kernel decisions and matches, by read calls and by recorded lookups.
func runScenario(t *testing.T, tr *raTracer, dir string, sc raScenario) (kern, matched, lookKern, lookMatched int) {
	f, size := scenarioFile(t, dir, sc.sparse)
	geo := geometry(t, f)
	if geo.fsType != unix.EXT4_SUPER_MAGIC {
		t.Fatalf("private filesystem has magic %#x, want ext4", geo.fsType)
	}
	var best *raResult
	for attempt := 1; attempt <= raAttempts; attempt++ {
		r, evicted := runOnce(t, tr, f, size, geo, sc)
		r.attempts = attempt
		if len(evicted) > 0 {
			t.Logf("attempt %d: %d folios of the file were evicted during the run (by %s); repeating it", attempt, len(evicted), evictors(evicted))
			continue
		}
		// Keep the attempt whose lookups can be compared furthest.
		if best == nil || r.firstLossy > best.firstLossy {
			best = r
		}
		if r.lossy == 0 {
			break
		}
		if attempt < raAttempts {
			t.Logf("attempt %d: the recording lacks the first lookup of %d read calls; repeating it", attempt, r.lossy)
		}
	}
	if best == nil {
		t.Fatalf("pages of the file were evicted by another process in all %d attempts: nothing to compare", raAttempts)
	}
	r := best
	counts := map[string]int{}
	for _, e := range r.evs {
		counts[e.name]++
	}
	t.Logf("events %v; kernel %d decisions, model %d", counts, len(r.kern), len(r.model))
	for _, e := range r.evs {
		if (e.name == evSync || e.name == evAsync) && e.u64(t, "ra_pages") != r.m.file(1).raPages {
			t.Fatalf("kernel ra_pages %d, model has %d", e.u64(t, "ra_pages"), r.m.file(1).raPages)
		}
	}
	if len(r.kern) == 0 {
		t.Fatalf("no readahead decisions captured")
	}
	m, diffs := matchDecisions(r.kern, r.model)
	if m != len(r.kern) || m != len(r.model) {
		for i, d := range diffs {
			if i == 12 {
				t.Logf("... %d more differences", len(diffs)-i)
				break
			}
			t.Logf("  diff %s", d)
		}
		t.Errorf("kernel made %d decisions, the model %d; %d matched", len(r.kern), len(r.model), m)
	}
	checkResidency(t, r)
	if sc.reads != nil {
		lookKern, lookMatched = checkLookups(t, tr, r)
	}
	if sc.check != nil {
		sc.check(t, r)
	}
	// One line per scenario for the table in docs/policies.md.
	t.Logf("validation: Linux %s %s: %d/%d decisions; lookups %d/%d; attempts %d", RunningKernel(), t.Name(), m, len(r.kern), lookMatched, lookKern, r.attempts)
	return len(r.kern), m, lookKern, lookMatched
}

// evictors names the tasks that evicted folios, with their counts.
func evictors(evs []traceEvent) string {
	n := map[string]int{}
	for _, e := range evs {
		n[e.comm]++
	}
	var s []string
	for c, k := range n {
		s = append(s, fmt.Sprintf("%s: %d", c, k))
	}
	return strings.Join(s, ", ")
}

// runOnce evicts the file, runs the scenario under the tracer and feeds
// the model; it returns the result and the folio evictions traced
// meanwhile.
func runOnce(t *testing.T, tr *raTracer, f *os.File, size int64, geo fileGeometry, sc raScenario) (*raResult, []traceEvent) {
	g, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	evictFile(t, f, size)
	ra := geo.raPages
	if sc.fadviseSeq {
		if err := unix.Fadvise(int(g.Fd()), 0, 0, unix.FADV_SEQUENTIAL); err != nil {
			t.Fatal(err)
		}
		ra *= 2 // POSIX_FADV_SEQUENTIAL doubles the file's ra_pages
	}
	pages := uint64(size+4095) / 4096
	r := &raResult{}
	folios := FoliosAuto // ext4: large folios from 6.16 on
	if os.Getenv("PREDICTIO_RA_SMALL_FOLIOS") != "" {
		folios = FoliosSmall // diagnostic: how much the large-folio model matters
	}
	r.m = NewReadahead(ReadaheadConfig{
		RAPages:    ra,
		IOPages:    geo.ioPages,
		Folios:     folios,
		FilePages:  func(uint32) uint64 { return pages },
		OnDecision: func(d *RADecision) { r.model = append(r.model, modelRA(d)) },
	})
	runtime.LockOSThread() // one thread: its faults and retries share a TID
	r.evs = tr.capture(t, uint64(geo.st.Dev), geo.st.Ino, unix.Gettid(), func() {
		if sc.reads != nil {
			doReads(t, g, sc.reads)
		} else {
			doTouches(t, g, size, sc.mmap)
		}
		r.vec = settledResidency(t, g, size) // while evictions are still traced
	})
	runtime.UnlockOSThread()
	var evicted []traceEvent
	for _, e := range r.evs {
		if e.name == evDelete {
			evicted = append(evicted, e)
		}
	}
	r.kern, r.kernPos = kernelDecisions(t, r.evs)
	r.calls = sc.reads
	if sc.reads != nil {
		for _, c := range sc.reads {
			ev := Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindRead, Page: c.first, NPages: uint32(c.n)}}
			r.m.Handle(&ev, func(*Request) {})
		}
		r.lossy, r.firstLossy = countLossy(t, r)
	} else {
		r.faults = feedFaults(t, tr, r, sc.mmap)
	}
	return r, evicted
}

func doReads(t *testing.T, g *os.File, calls []readCall) {
	var buf []byte
	for _, c := range calls {
		n := int(c.n * 4096)
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		if _, err := g.ReadAt(buf[:n], int64(c.first*4096)); err != nil {
			t.Fatal(err)
		}
	}
}

func doTouches(t *testing.T, g *os.File, size int64, p *mmapPlan) {
	length := int64(p.pages * 4096)
	if p.pages == 0 {
		length = size
	}
	mem, err := unix.Mmap(int(g.Fd()), int64(p.first*4096), int(length), p.prot, p.flags)
	if err != nil {
		t.Fatalf("mmap prot %#x: %v", p.prot, err)
	}
	var sum byte
	for _, pg := range p.touches {
		off := (pg - p.first) * 4096
		if p.write {
			mem[off] = 1
		} else {
			sum += mem[off]
		}
	}
	if err := unix.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	mmapSink = sum
}

// feedFaults feeds the model the faults and fault-around mappings the
// kernel observed, in order, as a recording would: through Handle, with
// the mapping's protection and range, and with the recorder's fault op
// (one per hardware fault, exceptions:page_fault_user, so the attempts of
// the kernel's retry loop share it). Where the fault probe reports the
// kernel's FAULT_FLAG_TRIED it checks the ops against it. Without
// page_fault_user the model gets no ops and detects retries itself (the
// thread's previous fault was at the same page), which a signal arriving
// between the attempts defeats: the kernel then returns to user space and
// takes a new fault. It returns the faults that were not retries.
func feedFaults(t *testing.T, tr *raTracer, r *raResult, p *mmapPlan) int {
	prot := uint8(0)
	if p.prot&unix.PROT_READ != 0 {
		prot |= formats.ProtRead
	}
	if p.prot&unix.PROT_WRITE != 0 {
		prot |= formats.ProtWrite
	}
	if p.prot&unix.PROT_EXEC != 0 {
		prot |= formats.ProtExec
	}
	if p.flags&unix.MAP_SHARED != 0 {
		prot |= formats.ProtShared
	}
	mapPages := p.pages
	if mapPages == 0 {
		mapPages = r.m.eof(1)
	}
	ops := tr.has(evUFault)
	faults, wrong, guessed := 0, 0, 0
	op, faultOp := uint64(0), uint64(0)
	lastPage, lastOK := uint64(0), false
	for i, e := range r.evs {
		switch e.name {
		case evUFault:
			op++
		case evFault:
			page, _ := e.pages(t)
			heuristic := lastOK && page == lastPage
			retry := heuristic
			if ops {
				retry = lastOK && op == faultOp
				if retry != heuristic {
					guessed++
				}
			}
			if tr.triedFlag != 0 && retry != (e.u64(t, "flags")&tr.triedFlag != 0) {
				if wrong++; wrong <= 3 {
					t.Logf("fault %d at page %d, flags %#x: detected as retry %v; events around it:", i, page, e.u64(t, "flags"), retry)
					for _, n := range r.evs[max(i-4, 0):min(i+3, len(r.evs))] {
						t.Logf("  %s %v", n.name, n.fields)
					}
				}
			}
			if !retry {
				faults++
			}
			lastPage, lastOK, faultOp = page, true, op
			ev := Event{Kind: EventFileAccess, File: 1, TID: uint32(e.pid), Access: FileAccess{
				Kind: formats.KindFault, Page: page, NPages: 1, Prot: prot, MapFirst: p.first, MapPages: mapPages}}
			if ops {
				ev.Access.Op = op
			}
			r.m.Handle(&ev, func(*Request) {})
		case evMap:
			first, last := e.pages(t)
			ev := Event{Kind: EventFileAccess, File: 1, TID: uint32(e.pid), Access: FileAccess{
				Kind: formats.KindMap, Page: first, NPages: uint32(last - first + 1), Prot: prot, MapFirst: p.first, MapPages: mapPages}}
			r.m.Handle(&ev, func(*Request) {})
		}
	}
	if ops && op == 0 {
		t.Fatal("no exceptions:page_fault_user events of the test's thread")
	}
	if guessed > 0 {
		t.Logf("%d faults: a new fault at the page of the previous one (a signal between attempts); only the ops tell", guessed)
	}
	if wrong > 0 {
		t.Errorf("%d faults: retry detection disagrees with FAULT_FLAG_TRIED", wrong)
	}
	return faults
}

// checkResidency compares the page cache at the end of the run with the
// model's.
func checkResidency(t *testing.T, r *raResult) {
	f1 := r.m.file(1)
	var kOnly, mOnly, both int
	var first []string
	for p := range uint64(len(r.vec)) {
		k, mo := r.vec[p]&1 != 0, f1.pages.get(p)&raPresent != 0
		switch {
		case k && mo:
			both++
		case k:
			kOnly++
		case mo:
			mOnly++
		}
		if k != mo && len(first) < 8 {
			first = append(first, fmt.Sprintf("page %d kernel=%v model=%v", p, k, mo))
		}
	}
	if kOnly+mOnly > 0 {
		t.Errorf("page cache: %d pages in both, %d in the kernel's only, %d in the model's only: %v", both, kOnly, mOnly, first)
	}
}

// lookups returns the recorded read lookups (mm_filemap_get_pages) and
// their positions in evs.
func lookups(t *testing.T, evs []traceEvent) (ls []readCall, pos []int) {
	for i, e := range evs {
		if e.name == evLookup {
			first, last := e.pages(t)
			ls = append(ls, readCall{first, last - first + 1})
			pos = append(pos, i)
		}
	}
	return ls, pos
}

// splitLookups assigns the recorded lookups to the read calls: a call's
// first lookup covers the whole call, later ones the rest of it (same last
// page, later first page). It returns, per call, whether its first lookup
// was recorded and the index after its last lookup.
func splitLookups(calls, ls []readCall) (recorded []bool, end []int) {
	j := 0
	for _, c := range calls {
		last := c.first + c.n - 1
		ok := j < len(ls) && ls[j] == c
		if ok {
			j++
		}
		for j < len(ls) && ls[j].first > c.first && ls[j].first <= last && ls[j].first+ls[j].n-1 == last {
			j++
		}
		recorded = append(recorded, ok)
		end = append(end, j)
	}
	return recorded, end
}

// countLossy counts the read calls whose first lookup the recording lacks,
// and returns the first of them (len(r.calls) when none).
func countLossy(t *testing.T, r *raResult) (n, first int) {
	first = len(r.calls)
	ls, _ := lookups(t, r.evs)
	if len(ls) == 0 {
		return 0, first
	}
	recorded, _ := splitLookups(r.calls, ls)
	for i, ok := range recorded {
		if !ok {
			n++
			first = min(first, i)
		}
	}
	return n, first
}

// checkLookups feeds a fresh model the read lookups as `predictio record`
// records them on kernels with mm_filemap_get_pages: one row per lookup,
// several per large read call, each covering the rest of the call. A
// lookup that had to wait for a folio still under readahead I/O returns
// without passing the tracepoint, so a call can lack its first lookup and
// appear to start later; that depends on I/O timing. The decisions must
// match the kernel's exactly up to the first call whose first lookup is
// missing (all of them when none is).
func checkLookups(t *testing.T, tr *raTracer, r *raResult) (kern, matched int) {
	if !tr.has(evLookup) {
		t.Logf("kernel lacks tracepoint %v: the recorder reads whole read calls there (kprobe:filemap_read), which the call-fed comparison covers", tr.missing)
		return 0, 0
	}
	ls, lpos := lookups(t, r.evs)
	if len(ls) == 0 {
		t.Fatal("no read lookups captured")
	}
	var got []kernelRA
	cfg := r.m.cfg
	cfg.OnDecision = func(d *RADecision) { got = append(got, modelRA(d)) }
	m := NewReadahead(cfg)
	recorded, end := splitLookups(r.calls, ls)
	stop := len(ls) // lookups fed
	for i, ok := range recorded {
		if !ok {
			stop = 0
			if i > 0 {
				stop = end[i-1]
			}
			t.Logf("call %d of %d (pages %d+%d) lacks its first lookup; comparing the decisions before it", i, len(r.calls), r.calls[i].first, r.calls[i].n)
			break
		}
	}
	for _, l := range ls[:stop] {
		ev := Event{Kind: EventFileAccess, File: 1, Access: FileAccess{Kind: formats.KindRead, Page: l.first, NPages: uint32(l.n)}}
		m.Handle(&ev, func(*Request) {})
	}
	want := r.kern
	if stop < len(ls) {
		boundary := -1
		if stop > 0 {
			boundary = lpos[stop-1]
		}
		n := 0
		for n < len(r.kernPos) && r.kernPos[n] < boundary {
			n++
		}
		want = r.kern[:n]
		if n == 0 {
			t.Errorf("the first read call lacked its first lookup in every attempt: nothing to compare")
			return 0, 0
		}
	}
	matched, diffs := matchDecisions(want, got)
	t.Logf("fed %d of %d recorded lookups: kernel %d decisions, model %d, matched %d", stop, len(ls), len(want), len(got), matched)
	if matched != len(want) || matched != len(got) {
		for i, d := range diffs {
			if i == 12 {
				break
			}
			t.Logf("  lookup diff %s", d)
		}
		t.Errorf("fed the recorded lookups, the model made %d decisions, the kernel %d; %d matched", len(got), len(want), matched)
	}
	return len(want), matched
}
