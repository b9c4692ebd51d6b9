package harness

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/testenv"
)

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, math.NaN(), 3, 2, 4})
	if s.N != 5 || s.Median != 3 || s.Min != 1 || s.Max != 5 || s.Mean != 3 {
		t.Fatalf("summary %+v", s)
	}
	if math.Abs(s.Stdev-math.Sqrt(2.5)) > 1e-12 {
		t.Fatalf("stdev %v, want %v", s.Stdev, math.Sqrt(2.5))
	}
	if !slicesEqual(s.Values, []float64{5, 1, 3, 2, 4}) {
		t.Fatalf("values %v: want round order without NaN", s.Values)
	}
	if e := Summarize(nil); e.N != 0 {
		t.Fatalf("empty summary %+v", e)
	}
	if q := Quantile([]float64{1, 2, 3, 4}, 0.5); q != 2.5 {
		t.Fatalf("median of 1..4 = %v, want 2.5", q)
	}
	if q := Quantile([]float64{10, 20}, 0.95); math.Abs(q-19.5) > 1e-9 {
		t.Fatalf("p95 of 10,20 = %v, want 19.5", q)
	}
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMakeCold reads a file into the cache, evicts it and checks that the
// count is zero; then maps and touches part of it, which POSIX_FADV_DONTNEED
// cannot evict, and checks that the residue is reported.
func TestMakeCold(t *testing.T) {
	dir := testenv.ScratchDir(t, "harness-cold-", "needs a disk-backed filesystem (not tmpfs) for a page cache to measure")
	f := filepath.Join(dir, "sub", "data")
	os.MkdirAll(filepath.Dir(f), 0o755)
	testenv.WritePattern(t, f, 1<<20)
	if _, err := os.ReadFile(f); err != nil {
		t.Fatal(err)
	}
	before, err := CountResident([]string{f})
	if err != nil {
		t.Fatal(err)
	}
	if before.Resident == 0 {
		t.Fatalf("a file just written and read has no resident pages: %+v", before)
	}
	c, err := MakeCold([]string{dir}, ColdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Verified || c.Resident != 0 || c.Files != 1 || c.Pages != 256 {
		t.Fatalf("after eviction: %+v", c)
	}
	fd, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	m, err := unix.Mmap(int(fd.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	for i := 0; i < 16*4096; i += 4096 {
		sink += m[i]
	}
	c, err = MakeCold([]string{f}, ColdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Verified || c.Mapped != 0 || c.Resident < 16 || len(c.Residue) != 1 || !strings.HasPrefix(c.Residue[0], "data: ") {
		t.Fatalf("a file this process maps was reported cold: %+v", c)
	}
	if !strings.Contains(c.String(), "not cold") {
		t.Fatalf("String() = %q", c.String())
	}
}

// TestColdWithOthersMappings checks that pages another process keeps
// mapped (as every process keeps libc's) are told apart from pages that
// eviction left for no reason: the run counts as cold, and the residue
// names the process.
func TestColdWithOthersMappings(t *testing.T) {
	if f := os.Getenv("HARNESS_MAP_FILE"); f != "" {
		mapAndWait(f)
		return
	}
	dir := testenv.ScratchDir(t, "harness-mapped-", "needs a disk-backed filesystem (not tmpfs) for a page cache to measure")
	f := filepath.Join(dir, "data")
	testenv.WritePattern(t, f, 1<<20)
	cmd := exec.Command(os.Args[0], "-test.run=^TestColdWithOthersMappings$")
	cmd.Env = append(os.Environ(), "HARNESS_MAP_FILE="+f)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	if _, err := out.Read(make([]byte, 1)); err != nil { // the helper has faulted its pages in
		t.Fatalf("helper: %v", err)
	}
	c, err := MakeCold([]string{f}, ColdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "mapped by harness.test (" + strconv.Itoa(cmd.Process.Pid) + ")"
	if !c.Verified || c.Resident < 16 || c.Mapped != c.Resident || len(c.Residue) != 1 || !strings.Contains(c.Residue[0], want) {
		t.Fatalf("pages another process maps: %+v; want verified, all mapped, the residue naming %q", c, want)
	}
	if s := c.String(); !strings.HasPrefix(s, "cold: ") || !strings.Contains(s, "other processes map") {
		t.Fatalf("String() = %q", s)
	}
}

// mapAndWait maps f, faults in its first 16 pages, says so on stdout and
// keeps the mapping until stdin closes.
func mapAndWait(f string) {
	fd, err := os.Open(f)
	if err != nil {
		os.Exit(2)
	}
	m, err := unix.Mmap(int(fd.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		os.Exit(2)
	}
	for i := 0; i < 16*4096; i += 4096 {
		sink += m[i]
	}
	os.Stdout.Write([]byte{'m'})
	os.Stdin.Read(make([]byte, 1))
	os.Exit(0)
}

// sink keeps the compiler from dropping the loads that fault pages in.
var sink byte

func TestPresets(t *testing.T) {
	for _, n := range []string{"this", "sata-ssd", "hdd"} {
		if _, err := PresetByName(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := PresetByName("nvme"); err == nil || !strings.Contains(err.Error(), "this, sata-ssd, hdd") {
		t.Fatalf("unknown preset error %v lacks the choices", err)
	}
	hdd, _ := PresetByName("hdd")
	if rate := 1.34 * (1 << 20); float64(hdd.ReadIOPS*4096) > rate || float64((hdd.ReadIOPS+1)*4096) < rate {
		t.Fatalf("hdd preset %d IOPS is not 1.34 MiB/s of 4 KiB reads", hdd.ReadIOPS)
	}
}

// hddThrottle makes the HDD preset's throttle on a scratch directory's
// disk, or skips the test without root (cgroups) or where the kernel has
// no cgroup I/O throttling.
func hddThrottle(t *testing.T, prefix string) (*Throttle, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	dir := testenv.ScratchDir(t, prefix, "needs a disk-backed filesystem for a block device to throttle")
	hdd, _ := PresetByName("hdd")
	th, err := NewThrottle(hdd, dir)
	if err != nil {
		if strings.Contains(err.Error(), "no cgroup I/O throttling") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return th, dir
}

// TestThrottle puts this process under the hdd preset (343 IOPS) on the
// scratch directory's disk and checks that cold O_DIRECT 4 KiB reads go
// through the cgroup and are limited: 300 reads cannot finish in 0.4 s
// (unthrottled they take a few ms here; the throttle lets about a tenth
// of a second's budget through at once). It checks the cgroup's own
// counters too, and that Close removes the cgroup.
func TestThrottle(t *testing.T) {
	th, dir := hddThrottle(t, "harness-throttle-")
	cg := th.Dir
	defer th.Close()
	f := filepath.Join(dir, "data")
	testenv.WritePattern(t, f, 64<<20)
	if _, err := MakeCold([]string{f}, ColdOptions{}); err != nil {
		t.Fatal(err)
	}
	fd, err := os.OpenFile(f, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Skipf("the scratch filesystem refuses O_DIRECT: %v", err)
	}
	defer fd.Close()
	buf, _ := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	defer unix.Munmap(buf)
	if err := th.Enter(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now()
	for range 300 {
		if _, err := unix.Pread(int(fd.Fd()), buf, int64(rng.IntN(16384))*4096); err != nil {
			th.Leave()
			t.Fatal(err)
		}
	}
	el := time.Since(t0)
	if err := th.Leave(); err != nil {
		t.Fatal(err)
	}
	if el < 400*time.Millisecond {
		t.Errorf("300 reads under a 343 IOPS throttle took %v", el)
	}
	if th.Mechanism == "cgroup v1 blkio.throttle" {
		b, err := os.ReadFile(filepath.Join(cg, "blkio.throttle.io_serviced"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(th.Device+" Read")) {
			t.Errorf("the cgroup counted no reads on %s:\n%s", th.Device, b)
		}
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind", cg)
	}
}

func TestDiskOf(t *testing.T) {
	dir := testenv.ScratchDir(t, "harness-disk-", "needs a disk-backed filesystem")
	dev, name, err := DiskOf(dir)
	if err != nil {
		t.Skipf("the scratch directory is on no block device: %v", err)
	}
	if !strings.Contains(dev, ":") || name == "" {
		t.Fatalf("DiskOf = %q, %q", dev, name)
	}
	if _, err := os.Stat(filepath.Join("/sys/dev/block", dev, "queue")); err != nil {
		t.Fatalf("%s is not a whole disk (no queue): %v", dev, err)
	}
}

func TestThisMachine(t *testing.T) {
	m := ThisMachine()
	if m.Kernel == "" || m.CPUs < 1 || m.MemBytes == 0 {
		t.Fatalf("machine %+v", m)
	}
}

// TestMakeColdWaitsForReadsInFlight: pages a throttled prefetch is still
// reading when the eviction runs are locked, and eviction skips them;
// MakeCold evicts them again once they are read (it reported 32 pages of
// a database resident after a daemon's prefetch on the HDD preset).
func TestMakeColdWaitsForReadsInFlight(t *testing.T) {
	th, dir := hddThrottle(t, "harness-inflight-")
	defer th.Close()
	f := filepath.Join(dir, "data")
	testenv.WritePattern(t, f, 16<<20)
	if _, err := MakeCold([]string{f}, ColdOptions{}); err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := th.Enter(); err != nil {
		t.Fatal(err)
	}
	// 150 one-page reads, not adjacent: about 0.44 s at 343 IOPS.
	for i := range int64(150) {
		if err := unix.Fadvise(int(fd.Fd()), i*16*4096, 4096, unix.FADV_WILLNEED); err != nil {
			th.Leave()
			t.Fatal(err)
		}
	}
	if err := th.Leave(); err != nil {
		t.Fatal(err)
	}
	c, err := MakeCold([]string{f}, ColdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Verified || c.Resident != 0 {
		t.Errorf("after eviction with reads in flight: %+v", c)
	}
}
