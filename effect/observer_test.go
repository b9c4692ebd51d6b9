package effect

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/testenv"
)

const ps = 4096

func newObserver(t *testing.T, o Options) *Observer {
	t.Helper()
	if os.Getpagesize() != ps {
		t.Skipf("page size %d: these tests count 4 KiB pages", os.Getpagesize())
	}
	ob, err := NewObserver(o)
	if errors.Is(err, ErrPermission) && os.Geteuid() != 0 {
		t.Skipf("needs CAP_BPF and CAP_PERFMON (run as root): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ob.Close(); err != nil {
			t.Error(err)
		}
	})
	return ob
}

// testFile is a cold file of pages pages on a disk filesystem, watched as
// file id 1.
type testFile struct {
	path string
	f    *os.File
	fd   int
	mem  []byte
}

func watchedFile(t *testing.T, ob *Observer, id uint32, pages int) *testFile {
	t.Helper()
	dir := testenv.ScratchDir(t, "predictio-effect-test-", "effect tests need a disk filesystem (not tmpfs) at /var/tmp for a real page cache")
	p := filepath.Join(dir, fmt.Sprintf("f%d", id))
	testenv.WritePattern(t, p, pages*ps)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tf := &testFile{path: p, f: f, fd: int(f.Fd())}
	tf.evict(t)
	var st unix.Stat_t
	if err := unix.Fstat(tf.fd, &st); err != nil {
		t.Fatal(err)
	}
	if err := ob.Watch(id, formats.KernelDev(st.Dev), st.Ino); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(tf.fd, 0, pages*ps, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	tf.mem = mem
	return tf
}

func (tf *testFile) evict(t *testing.T) {
	t.Helper()
	tf.f.Sync()
	unix.Fadvise(tf.fd, 0, 0, unix.FADV_DONTNEED)
}

// uptodate reports how many of pages [first, first+n) are resident and
// read (mincore reports a page under read I/O as absent).
func (tf *testFile) uptodate(t *testing.T, first, n int) int {
	t.Helper()
	vec := make([]byte, n)
	if err := mincoreVec(tf.mem[first*ps:(first+n)*ps], vec); err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, v := range vec {
		c += int(v & 1)
	}
	return c
}

// waitUptodate waits until pages [first, first+n) are read.
func (tf *testFile) waitUptodate(t *testing.T, first, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); tf.uptodate(t, first, n) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pages %d+%d not read after 10 s", first, n)
		}
	}
}

func (tf *testFile) pread(t *testing.T, first, n int) {
	t.Helper()
	buf := make([]byte, n*ps)
	if _, err := unix.Pread(tf.fd, buf, int64(first)*ps); err != nil {
		t.Fatal(err)
	}
}

// onThread runs fn on a fresh OS thread (not a demand thread) and waits.
func onThread(fn func(tid int)) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fn(unix.Gettid())
		close(done)
	}()
	<-done
}

func prefetch(t *testing.T, tf *testFile, first, n int) {
	t.Helper()
	onThread(func(int) {
		if err := unix.Fadvise(tf.fd, int64(first)*ps, int64(n)*ps, unix.FADV_WILLNEED); err != nil {
			t.Error(err)
		}
	})
}

// demandThread locks the test goroutine to its thread and registers the
// thread as a demand thread.
func demandThread(t *testing.T, ob *Observer) {
	t.Helper()
	runtime.LockOSThread()
	tid := unix.Gettid()
	if err := ob.AddDemandThread(tid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ob.RemoveDemandThread(tid)
		runtime.UnlockOSThread()
	})
}

func counts(t *testing.T, ob *Observer, id uint32, final bool) Counts {
	t.Helper()
	var per map[uint32]Counts
	var err error
	if final {
		_, per, err = ob.Final()
	} else {
		_, per, err = ob.Counts()
	}
	if err != nil {
		t.Fatal(err)
	}
	c := per[id]
	if err := c.Check(); err != nil {
		t.Errorf("%v: %v", c, err)
	}
	return c
}

// TestInTimeWastedAndDemand: pages prefetched and read before their demand
// are used in time; pages prefetched and evicted, or never demanded, are
// wasted; pages the demand reads itself are not prefetched; a page read
// through a mapping after its prefetch is used in time.
func TestInTimeWastedAndDemand(t *testing.T) {
	ob := newObserver(t, Options{})
	tf := watchedFile(t, ob, 1, 1024)
	demandThread(t, ob)

	prefetch(t, tf, 0, 64)
	tf.waitUptodate(t, 0, 64)
	tf.pread(t, 0, 32)
	c := counts(t, ob, 1, false)
	if c.Prefetched != 64 || c.UsedInTime != 32 || c.Late != 0 || c.Pending != 32 {
		t.Fatalf("after a prefetch of 64 pages and a read of 32: %v", c)
	}

	// The demand's own misses: pages 512.. were not prefetched.
	tf.pread(t, 512, 4)
	c = counts(t, ob, 1, false)
	if c.Prefetched != 64 || c.DemandRead < 4 {
		t.Fatalf("after a demand miss: %v", c)
	}

	// A mapped read of a prefetched page: a fault (or fault-around) finds it
	// up to date.
	for p := 40; p < 44; p++ {
		sink += tf.mem[p*ps]
	}
	c = counts(t, ob, 1, false)
	if c.UsedInTime < 36 || c.Late != 0 {
		t.Fatalf("after touching 4 prefetched pages through a mapping: %v", c)
	}

	// Evicted unused: wasted.
	prefetch(t, tf, 256, 16)
	tf.waitUptodate(t, 256, 16)
	unix.Fadvise(tf.fd, 256*ps, 16*ps, unix.FADV_DONTNEED)
	c = counts(t, ob, 1, false)
	if c.Evicted != 16 || c.Wasted != 16 {
		t.Fatalf("after evicting 16 prefetched pages: %v", c)
	}
	// Never demanded: wasted at the end.
	pending := c.Pending
	c = counts(t, ob, 1, true)
	if c.Pending != 0 || c.Wasted != 16+pending || c.Prefetched != 80 {
		t.Fatalf("final: %v (pending before %d)", c, pending)
	}
}

// TestLate: a demand that reads a prefetched page whose read has not
// completed counts it late. The prefetching thread is throttled (cgroup v1
// blkio) so that its read is certainly in flight when the demand comes.
func TestLate(t *testing.T) {
	ob := newObserver(t, Options{})
	tf := watchedFile(t, ob, 1, 1024)
	demandThread(t, ob)
	enter := throttledCgroup(t, tf.path, 1<<20)
	onThread(func(tid int) {
		enter(tid)
		// 256 KiB to use up the cgroup's budget, then the pages the demand
		// reads; they queue behind it.
		if err := unix.Fadvise(tf.fd, 512*ps, 64*ps, unix.FADV_WILLNEED); err != nil {
			t.Error(err)
		}
		if err := unix.Fadvise(tf.fd, 0, 4*ps, unix.FADV_WILLNEED); err != nil {
			t.Error(err)
		}
	})
	if n := tf.uptodate(t, 3, 1); n != 0 {
		t.Fatalf("the throttled prefetch completed at once; the test cannot make it late")
	}
	t0 := time.Now()
	tf.pread(t, 3, 1)
	waited := time.Since(t0)
	c := counts(t, ob, 1, false)
	if c.Late != 1 || c.UsedInTime != 0 {
		t.Fatalf("a read that waited %v for its prefetch: %v; want 1 late", waited, c)
	}
}

// TestFaultHooks: the observer sees faults through the filemap tracepoints
// where the kernel has them (Linux 6.11), through kprobes before.
func TestFaultHooks(t *testing.T) {
	ob := newObserver(t, Options{})
	how, err := ob.Faults()
	want := "kprobes"
	if kernelHasTypes("trace_event_raw_mm_filemap_fault", "trace_event_raw_mm_filemap_op_page_cache_range") {
		want = "tracepoints"
	}
	if how != want {
		t.Fatalf("faults seen through %q (%v), want %q", how, err, want)
	}
}

// TestForeignAndUntracked: another process's reads of a watched file are
// foreign, not prefetches; prefetched pages beyond MaxPending are counted
// untracked; unwatched files are not counted.
func TestForeignAndUntracked(t *testing.T) {
	ob := newObserver(t, Options{MaxPending: 16})
	tf := watchedFile(t, ob, 1, 256)
	if out, err := exec.Command("dd", "if="+tf.path, "of=/dev/null", "bs=4096", "count=8").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}
	c := counts(t, ob, 1, false)
	if c.Foreign < 8 || c.Prefetched != 0 {
		t.Fatalf("after another process read 8 pages: %v", c)
	}
	// Far from what dd's readahead read.
	prefetch(t, tf, 160, 64)
	c = counts(t, ob, 1, false)
	if c.Prefetched != 16 || c.Untracked != 48 {
		t.Fatalf("prefetch of 64 pages with room for 16: %v", c)
	}
	if err := ob.Unwatch(1); err != nil {
		t.Fatal(err)
	}
	prefetch(t, tf, 240, 8)
	total, per, err := ob.Counts()
	if err != nil || len(per) != 0 || total.Prefetched != 0 {
		t.Fatalf("after unwatch: %v %v %v", total, per, err)
	}
	// Reset zeroes counts and pending pages.
	tf2 := watchedFile(t, ob, 2, 64)
	prefetch(t, tf2, 0, 8)
	if err := ob.Reset(); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, ob, 2, true); c != (Counts{}) {
		t.Fatalf("after reset: %v", c)
	}
}

// TestNoSelf: with NoSelf this process's inserts are foreign until
// AddPrefetcher names it.
func TestNoSelf(t *testing.T) {
	ob := newObserver(t, Options{NoSelf: true})
	tf := watchedFile(t, ob, 1, 64)
	prefetch(t, tf, 0, 8)
	c := counts(t, ob, 1, false)
	if c.Prefetched != 0 || c.Foreign != 8 {
		t.Fatalf("prefetch by a process that is not a prefetcher: %v", c)
	}
	if err := ob.AddPrefetcher(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	prefetch(t, tf, 16, 8)
	if c := counts(t, ob, 1, false); c.Prefetched != 8 {
		t.Fatalf("after AddPrefetcher: %v", c)
	}
}

// throttledCgroup makes a private cgroup v1 blkio group that reads the
// device of path at bps bytes per second, and returns a function that
// moves a thread into it. The thread returns to the root group at the end.
func throttledCgroup(t *testing.T, path string, bps int) func(tid int) {
	t.Helper()
	root := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(root, "blkio.throttle.read_bps_device")); err != nil {
		t.Skipf("no cgroup v1 blkio throttling at %s (needs CONFIG_BLK_DEV_THROTTLING and the v1 blkio hierarchy)", root)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	dev := diskOf(t, unix.Major(st.Dev), unix.Minor(st.Dev))
	dir := filepath.Join(root, fmt.Sprintf("predictio-effect-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.read_bps_device"), []byte(fmt.Sprintf("%s %d", dev, bps)), 0); err != nil {
		os.Remove(dir)
		t.Fatalf("throttle %s: %v", dev, err)
	}
	var tids []int
	t.Cleanup(func() {
		for _, tid := range tids {
			os.WriteFile(filepath.Join(root, "tasks"), []byte(fmt.Sprint(tid)), 0)
		}
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(50 * time.Millisecond) // throttled bios still queued
		}
	})
	return func(tid int) {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(fmt.Sprint(tid)), 0); err != nil {
			t.Errorf("move thread %d into %s: %v", tid, dir, err)
		}
		tids = append(tids, tid)
	}
}

// diskOf returns "MAJ:MIN" of the whole disk holding device maj:min.
func diskOf(t *testing.T, maj, min uint32) string {
	dev := fmt.Sprintf("%d:%d", maj, min)
	if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%s/partition", dev)); err != nil {
		return dev
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%s/../dev", dev))
	if err != nil {
		t.Fatalf("find the disk of partition %s: %v", dev, err)
	}
	return strings.TrimSpace(string(b))
}

func mincoreVec(b, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// sink keeps touches of mapped pages from being optimized away.
var sink byte

// TestLazyReads: a lazy observer hooks system calls only while a demand
// thread is registered, and classifies reads then.
func TestLazyReads(t *testing.T) {
	ob := newObserver(t, Options{LazyReads: true})
	if ob.reads != nil {
		t.Fatal("lazy observer hooked system calls with no demand thread")
	}
	tf := watchedFile(t, ob, 1, 64)
	demandThread(t, ob)
	if ob.reads == nil {
		t.Fatal("no system call hooks with a demand thread")
	}
	prefetch(t, tf, 0, 8)
	tf.waitUptodate(t, 0, 8)
	tf.pread(t, 0, 8)
	if c := counts(t, ob, 1, false); c.UsedInTime != 8 {
		t.Fatalf("lazy observer: %v", c)
	}
	if err := ob.RemoveDemandThread(unix.Gettid()); err != nil {
		t.Fatal(err)
	}
	if ob.reads != nil {
		t.Fatal("system call hooks stay after the last demand thread left")
	}
	ob.AddDemandThread(unix.Gettid()) // for the cleanup
}
