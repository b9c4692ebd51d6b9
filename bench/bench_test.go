package bench

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/simulate"
)

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got := float64(h.Quantile(q))
		want := q * 100000 * 1e3
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("quantile %v = %v, want %v within 1%%", q, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345} {
		i := histIndex(v)
		mid := histValue(i)
		if v >= 128 && math.Abs(float64(mid)-float64(v))/float64(v) > 1.0/128 {
			t.Errorf("value %d: bucket %d midpoint %d too far", v, i, mid)
		}
		if v < 128 && mid != v {
			t.Errorf("value %d not exact: %d", v, mid)
		}
	}
	if n := testing.AllocsPerRun(100, func() { h.Record(time.Millisecond) }); n != 0 {
		t.Errorf("Record allocates %v", n)
	}
}

func scratchDir(t testing.TB) string {
	t.Helper()
	return testenv.ScratchDir(t, "bench-test-", "/var/tmp and the temp dir are missing or tmpfs: no filesystem with O_DIRECT for the test")
}

func TestRefuseTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm to test the refusal on")
	}
	path := filepath.Join("/dev/shm", "predictio-bench-test")
	defer os.Remove(path)
	err := PrepareScratch(path, 1<<20, io.Discard)
	if !errors.Is(err, ErrNoDirectIO) {
		t.Fatalf("PrepareScratch on tmpfs: %v, want ErrNoDirectIO", err)
	}
}

func TestBackendsSmall(t *testing.T) {
	path := filepath.Join(scratchDir(t), "scratch")
	const size = 16 << 20
	if err := PrepareScratch(path, size, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Pull some pages into the cache: Run must notice and drop them.
	b := make([]byte, 1<<20)
	f, _ := os.Open(path)
	f.Read(b)
	f.Close()
	for _, tc := range []struct {
		backend, rw, harvest string
		threads, qd          int
	}{
		{Psync, "randread", "", 1, 1},
		{Libaio, "mix", "", 2, 8},
		{Uring, "randread", "wait", 1, 8},
		{Uring, "randwrite", "backoff", 1, 8},
		{UringSQPoll, "randread", "backoff", 1, 8},
		{UringShared, "mix", "wait", 2, 8},
	} {
		p := Point{Path: path, Size: size, Backend: tc.backend, RW: tc.rw, Threads: tc.threads, QD: tc.qd,
			Duration: 150 * time.Millisecond, FixedBufs: true, RegisterFiles: true, Harvest: tc.harvest, DeferTaskrun: true}
		r, err := Run(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.backend, err)
		}
		t.Logf("%s %s: %.0f IOPS p50 %.0fus p99 %.0fus syscalls/op %.3f cpu %.1fus/op poller %.1fus/op cached %d",
			tc.backend, tc.rw, r.IOPS, r.P50us, r.P99us, r.Syscalls, r.CPUus, r.PollerCPUus, r.CachedPages)
		if r.Ops == 0 || r.Errors != 0 || r.P50us <= 0 || r.P99us < r.P50us {
			t.Fatalf("%s: implausible result %+v", tc.backend, r)
		}
		switch tc.backend {
		case Psync:
			if r.Syscalls != 1 {
				t.Errorf("psync: %.3f syscalls/op, want exactly 1", r.Syscalls)
			}
		case Libaio:
			if r.Syscalls < 2.0/8 || r.Syscalls > 3 {
				t.Errorf("libaio: %.3f syscalls/op", r.Syscalls)
			}
		case UringSQPoll, UringShared:
			if r.Pollers < 1 {
				t.Errorf("%s: no SQPOLL thread seen", tc.backend)
			}
		}
	}
	if n, _ := CachedPages(path, size); n != 0 {
		t.Errorf("%d pages cached after O_DIRECT runs", n)
	}
}

func TestMeasureDeviceShort(t *testing.T) {
	path := filepath.Join(scratchDir(t), "device")
	var log strings.Builder
	p, err := MeasureDevice(context.Background(), DeviceConfig{Path: path, Size: 64 << 20, Duration: 600 * time.Millisecond, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *p)
	// The scratch file is read once (warmHost) before the first timed phase.
	if w, first := strings.Index(log.String(), "read 64 MiB at"), strings.Index(log.String(), "1/6:"); w < 0 || w > first {
		t.Errorf("no whole pass over the scratch file before the first phase:\n%s", log.String())
	}
	if p.ReadLatencyNS == 0 || p.RandReadBytesPerSec <= 0 || p.SeqReadBytesPerSec <= 0 || p.QueueDepth != 32 || p.Version != 1 {
		t.Fatalf("implausible profile %+v", *p)
	}
	if p.ReadLatencyP99NS < p.ReadLatencyNS {
		t.Fatalf("p99 %d below p50 %d", p.ReadLatencyP99NS, p.ReadLatencyNS)
	}
	checkHost(t, p)
}

// TestMeasureDeviceCancel cancels a measurement of 20 s in its first
// phase: MeasureDevice stops it and says why.
func TestMeasureDeviceCancel(t *testing.T) {
	path := filepath.Join(scratchDir(t), "device")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	t0 := time.Now()
	_, err := MeasureDevice(ctx, DeviceConfig{Path: path, Size: 64 << 20, Duration: 20 * time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled measurement: %v, want context.Canceled", err)
	}
	// The first phase would end at 5 s.
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("returned %v after its cancel", d)
	}
}

// TestMeasureDeviceGivenHost takes the host's costs from the caller, as
// eval does for a throttled device, and measures none.
func TestMeasureDeviceGivenHost(t *testing.T) {
	path := filepath.Join(scratchDir(t), "device")
	h := &formats.HostCosts{CPUs: 1, CachedReadNS: 1}
	var log strings.Builder
	p, err := MeasureDevice(context.Background(), DeviceConfig{Path: path, Size: 64 << 20, Duration: 100 * time.Millisecond, Host: h, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if p.Host != h || strings.Contains(log.String(), "uncached 4 KiB pread") {
		t.Errorf("host %+v, log:\n%s", p.Host, log.String())
	}
}

// TestSizesFor: the host phase reads as much as before on a fast device
// and about 2 s of an HDD's reads on one of 343 IOPS (it read 245 K pages
// there, 12 minutes, before it was sized).
func TestSizesFor(t *testing.T) {
	full := hostSizes{coldReads: coldReads, budget: prefetchBudget, minRanges: 256}
	for _, iops := range []float64{0, 100e3, 1e6} {
		if got := sizesFor(iops); got != full {
			t.Errorf("sizesFor(%v) = %+v, want %+v", iops, got, full)
		}
	}
	hdd := sizesFor(343)
	// Pages the prefetch points read: 15 passes of the one-page point, 5
	// of the others, k ranges each.
	pages := 0
	for _, n := range prefetchPoints {
		k := max(hdd.budget/int(n), hdd.minRanges)
		passes := prefetchRounds
		if n == 1 {
			passes *= 3
		}
		pages += passes * k
	}
	if secs := float64(pages+2*hdd.coldReads) / 343; secs > 15 {
		t.Errorf("sizesFor(343) = %+v reads %d pages: %.0f s", hdd, pages+2*hdd.coldReads, secs)
	}
	if hdd.minRanges < 16 || hdd.coldReads < 100 {
		t.Errorf("sizesFor(343) = %+v: too few to measure", hdd)
	}
}

// checkHost checks the host costs of a measured profile: every prefetch
// point measured, a request of cached pages cheaper than one the kernel
// reads, an uncached read dearer than a cached one, and simulate takes
// them.
func checkHost(t *testing.T, p *formats.DeviceProfile) {
	t.Helper()
	h := p.Host
	if h == nil {
		t.Fatal("no host costs")
	}
	if len(h.Prefetch) != len(prefetchPoints) || h.Prefetch[0].Pages != 1 {
		t.Fatalf("prefetch points %+v, want %v", h.Prefetch, prefetchPoints)
	}
	for _, c := range h.Prefetch {
		if c.NS == 0 {
			t.Errorf("prefetch of %d pages: 0 ns", c.Pages)
		}
	}
	if h.PrefetchCachedNS == 0 || h.PrefetchCachedNS >= h.Prefetch[0].NS {
		t.Errorf("a cached request %d ns, an uncached one %d ns; want cheaper", h.PrefetchCachedNS, h.Prefetch[0].NS)
	}
	if h.CachedReadNS == 0 || h.ColdReadNS <= h.CachedReadNS {
		t.Errorf("cached read %d ns, uncached %d ns", h.CachedReadNS, h.ColdReadNS)
	}
	// The rate of an uncached read's further bytes: a 4 MiB read is not
	// free, nor faster than memory.
	if !(h.ColdReadBytesPerSec >= 1e6 && h.ColdReadBytesPerSec <= 1e11) {
		t.Errorf("uncached reads move their bytes at %v B/s", h.ColdReadBytesPerSec)
	}
	if d, err := simulate.DeviceFromProfile(p); err == nil && d.BytesPerSec != h.ColdReadBytesPerSec {
		t.Errorf("simulate moves a request's pages at %v B/s, want the profile's uncached rate %v", d.BytesPerSec, h.ColdReadBytesPerSec)
	}
	if h.CPUs < 1 || h.PrefetchBusyNS == 0 || h.BusySlowdown < 1 || h.OpenNS == 0 || !strings.Contains(h.PrefetchVia, "WILLNEED") {
		t.Errorf("host costs %+v", *h)
	}
	// An io_uring FADVISE completes after it is submitted, and not before
	// the backend had issued it.
	if strings.Contains(h.PrefetchVia, "io_uring") && h.AdviseNS == 0 {
		t.Errorf("advise latency 0 with %s", h.PrefetchVia)
	}
	// The backend's own time a request: something, and not more than
	// a request's share of a saturated pass (the goroutine is part of it).
	if h.PrefetchOwnNS == 0 || h.PrefetchOwnNS > 2*h.Prefetch[0].NS {
		t.Errorf("the backend's own time %d ns a request, a saturated pass %d ns", h.PrefetchOwnNS, h.Prefetch[0].NS)
	}
	// The advise curve: a point a gap, rates ascending, latencies too.
	if len(h.AdviseCurve) != len(adviseGaps) {
		t.Errorf("advise curve %+v, want %d points", h.AdviseCurve, len(adviseGaps))
	}
	for i, p := range h.AdviseCurve {
		if p.NS == 0 || i > 0 && (p.PerSec <= h.AdviseCurve[i-1].PerSec || p.NS < h.AdviseCurve[i-1].NS) {
			t.Errorf("advise curve %+v: point %d out of order or 0", h.AdviseCurve, i)
		}
	}
	if _, err := simulate.DeviceFromProfile(p); err != nil {
		t.Errorf("simulate refuses the profile: %v", err)
	}
	// The queue curve from QD1 to QD32, and the synchronous one.
	if len(p.Queue) != len(curveDepths)+2 || p.Queue[0].QD != 1 || p.Queue[len(p.Queue)-1].QD != 32 {
		t.Errorf("queue curve %+v, want QD 1, %v and 32", p.Queue, curveDepths)
	}
	if len(p.SyncQueue) != len(syncThreads) || p.SyncQueue[0].QD != 1 {
		t.Errorf("synchronous curve %+v, want %v threads", p.SyncQueue, syncThreads)
	}
}

func TestFioArgsAndParse(t *testing.T) {
	p := Point{Path: "/var/tmp/x", Size: 1 << 30, Backend: UringSQPoll, RW: "randread", Threads: 2, QD: 32,
		Duration: 5 * time.Second, FixedBufs: true, RegisterFiles: true}
	j, err := FioArgs(p)
	if err != nil {
		t.Fatal(err)
	}
	args := " " + strings.Join(j.Args, " ") + " "
	if strings.Contains(args, "cpus_allowed") {
		t.Errorf("unpinned point pins fio: %s", args)
	}
	p.CPUs = []int{1, 0}
	j2, err := FioArgs(p)
	if err != nil {
		t.Fatal(err)
	}
	if a2 := strings.Join(j2.Args, " "); !strings.Contains(a2, "--cpus_allowed=0,1 --cpus_allowed_policy=split") {
		t.Errorf("pinned point: fio args %s", a2)
	}
	p.CPUs = nil
	for _, want := range []string{" --ioengine=io_uring ", " --iodepth=32 ", " --numjobs=2 ", " --sqthread_poll=1 ", " --fixedbufs=1 ", " --registerfiles=1 ", " --direct=1 ", " --runtime=5 "} {
		if !strings.Contains(args, want) {
			t.Errorf("fio args lack %q: %s", want, args)
		}
	}
	out := []byte(`fio: some warning
{"fio version":"fio-3.33","jobs":[{"read":{"iops":1000.5,"total_ios":5002,"runtime":5000,
"lat_ns":{"percentile":{"50.000000":70000,"99.000000":200000,"99.900000":500000}}},
"write":{"iops":0,"total_ios":0,"runtime":0}}]}`)
	r, err := ParseFio(out, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.IOPS != 1000.5 || r.P50us != 70 || r.P99us != 200 || r.P999us != 500 || r.Ops != 5002 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := ParseFio([]byte(`{"jobs":[]}`), p); err == nil {
		t.Fatal("empty fio output accepted")
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]string{"0-3,6": "0,1,2,3,6", "1,1,0": "0,1", " 2 ": "2", "5-5": "5"} {
		got, err := ParseCPUList(in)
		if err != nil || formatCPUList(got) != want {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "1-", "2000", "0,,1"} {
		if got, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

// TestCompletionIRQCPUsFakeSysfs builds the sysfs and procfs shape of a
// virtio-blk disk on this VM: /sys/dev/block/254:0 -> .../virtio1/block/vda,
// its PCI function with MSI interrupts 35 (config, CPU 0) and 36 (the
// request queue, CPU 1).
func TestCompletionIRQCPUsFakeSysfs(t *testing.T) {
	root := t.TempDir()
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	pci := filepath.Join(sys, "devices/pci0000:00/0000:00:02.0")
	vda := filepath.Join(pci, "virtio1/block/vda")
	for _, d := range []string{filepath.Join(vda, "vda1"), filepath.Join(pci, "msi_irqs/35"), filepath.Join(pci, "msi_irqs/36"),
		filepath.Join(sys, "dev/block"), filepath.Join(proc, "irq/35"), filepath.Join(proc, "irq/36")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../../../virtio1", filepath.Join(vda, "device")))
	must(os.Symlink(vda, filepath.Join(sys, "dev/block/254:0")))
	must(os.Symlink(filepath.Join(vda, "vda1"), filepath.Join(sys, "dev/block/254:1")))
	must(os.WriteFile(filepath.Join(vda, "vda1/partition"), []byte("1\n"), 0o644))
	must(os.WriteFile(filepath.Join(proc, "interrupts"), []byte(
		"           CPU0       CPU1\n 35:          0          1  PCI-MSIX-0000:00:02.0   0-edge      virtio1-config\n"+
			" 36:          0    2211902  PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n"), 0o644))
	must(os.WriteFile(filepath.Join(proc, "irq/35/effective_affinity_list"), []byte("0\n"), 0o644))
	must(os.WriteFile(filepath.Join(proc, "irq/36/effective_affinity_list"), []byte("1\n"), 0o644))
	for _, minor := range []uint32{0, 1} {
		if got := completionIRQCPUs(sys, proc, 254, minor); formatCPUList(got) != "1" {
			t.Errorf("254:%d: completion CPUs %v, want [1] (the request queue's, not the config interrupt's)", minor, got)
		}
	}
	if got := completionIRQCPUs(sys, proc, 8, 0); got != nil {
		t.Errorf("unknown device: %v, want nil", got)
	}
}

// allowedTwo returns two CPUs this process may run on, or skips.
func allowedTwo(t *testing.T) [2]int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < maxCPU && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skip("the process may run on one CPU only; pinning to two different CPUs needs two")
	}
	return [2]int{cpus[0], cpus[1]}
}

func TestPinnedPlacement(t *testing.T) {
	cpus := allowedTwo(t)
	path := filepath.Join(scratchDir(t), "scratch")
	const size = 16 << 20
	if err := PrepareScratch(path, size, io.Discard); err != nil {
		t.Fatal(err)
	}
	var most float64
	for _, c := range cpus {
		for _, backend := range []string{Psync, Uring} {
			p := Point{Path: path, Size: size, Backend: backend, RW: "randread", Threads: 1, QD: 1,
				Duration: 150 * time.Millisecond, FixedBufs: true, RegisterFiles: true, CPUs: []int{c}}
			r, err := Run(p)
			if err != nil {
				t.Fatal(err)
			}
			want := strconv.Itoa(c) + ":100%"
			if r.Placement != want || r.CPUs != strconv.Itoa(c) {
				t.Errorf("%s pinned to CPU %d: placement %q, cpus %q; want %q", backend, c, r.Placement, r.CPUs, want)
			}
			t.Logf("%s pinned to CPU %d: p50 %.1f us, %.3f context switches per op", backend, c, r.P50us, r.CtxSwitches)
			if r.CtxSwitches > 5 || r.Migrations > 0.01 {
				t.Errorf("%s pinned to CPU %d: %.3f context switches and %.4f migrations per op", backend, c, r.CtxSwitches, r.Migrations)
			}
			most = max(most, r.CtxSwitches)
		}
	}
	// A QD1 O_DIRECT read blocks its thread once, but on the CPU taking
	// the completion interrupt the completion can come before the thread
	// sleeps (the host serving the read inside the guest's kick: 0.007
	// switches per op at 47 us, on 2026-12-02); on the other CPU it
	// blocks.
	if most < 0.5 {
		t.Errorf("at most %.3f context switches per QD1 read on any CPU: the counters count nothing", most)
	}
	if _, err := Run(Point{Path: path, Size: size, Backend: Psync, RW: "randread", Threads: 1, QD: 1,
		Duration: 10 * time.Millisecond, CPUs: []int{maxCPU - 1}}); err == nil {
		t.Error("a CPU outside the affinity mask was accepted")
	}
}

// TestRunSampled checks the sampler that reports where fio's threads run:
// a busy child forked from a thread pinned to a CPU inherits the pin.
func TestRunSampled(t *testing.T) {
	cpus := allowedTwo(t)
	for _, c := range cpus {
		restore := func() func() {
			runtime.LockOSThread()
			r, err := pinThread(c)
			if err != nil {
				t.Fatal(err)
			}
			return func() { r(); runtime.UnlockOSThread() }
		}()
		cmd := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
		pl, err := runSampled(cmd, 1)
		restore()
		if err != nil {
			t.Fatal(err)
		}
		if got := formatShare(pl.share); got != strconv.Itoa(c)+":100%" {
			t.Errorf("child pinned to CPU %d: placement %q", c, got)
		}
	}
}

// TestWarmHost: the pass before bench device's phases reads the whole
// scratch file, once.
func TestWarmHost(t *testing.T) {
	path := filepath.Join(scratchDir(t), "warm")
	if err := PrepareScratch(path, 8<<20, io.Discard); err != nil {
		t.Fatal(err)
	}
	n, rate, err := warmHost(path, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8<<20 || rate <= 0 {
		t.Errorf("warmHost read %d bytes at %.0f B/s, want the file's 8 MiB once", n, rate)
	}
}

// TestMonotone: pooling adjacent violators makes an advise curve's
// latencies non-decreasing in the rate, each violating run replaced by
// its mean, and leaves a non-decreasing one as it is.
func TestMonotone(t *testing.T) {
	pts := func(ns ...uint64) []formats.AdvisePoint {
		var c []formats.AdvisePoint
		for i, n := range ns {
			c = append(c, formats.AdvisePoint{PerSec: float64(1000 * (i + 1)), NS: n})
		}
		return c
	}
	for _, c := range []struct{ in, want []formats.AdvisePoint }{
		{pts(30, 70, 110, 113, 124), pts(30, 70, 110, 113, 124)},
		{pts(50, 130, 120, 170, 160), pts(50, 125, 125, 165, 165)},
		{pts(90, 60, 30), pts(60, 60, 60)},
		{pts(40), pts(40)},
	} {
		if got := monotone(c.in); !slices.Equal(got, c.want) {
			t.Errorf("monotone(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
