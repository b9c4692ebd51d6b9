package kmod

// Tests against the real module. They run inside the qemu VM that
// kmod/vmtest/run.sh boots (Debian's 6.1 cloud kernel, PREDICTIO_VM=1,
// PREDICTIO_KO naming the module, PREDICTIO_DATA an ext4 mount). Outside it
// they run only where /dev/predictio already exists, and the unload test
// only in the VM.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/policies"
)

func inVM() bool { return os.Getenv("PREDICTIO_VM") == "1" }

// needModule skips unless the module is (or, in the VM, can be) loaded.
func needModule(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(DevicePath); err == nil {
		return
	}
	if !inVM() {
		if _, err := os.Stat("/proc/modules"); err != nil {
			tb.Skip("kernel has no loadable module support (no /proc/modules): kmod/vmtest/run.sh runs these tests under qemu on Linux 6.1")
		}
		tb.Skip("predictio module not loaded (no /dev/predictio): load it (docs/kmod.md) or run kmod/vmtest/run.sh")
	}
	loadModule(tb)
}

func loadModule(tb testing.TB) {
	tb.Helper()
	ko := os.Getenv("PREDICTIO_KO")
	if ko == "" {
		tb.Fatal("PREDICTIO_VM=1 but PREDICTIO_KO does not name predictio.ko")
	}
	f, err := os.Open(ko)
	if err != nil {
		tb.Fatalf("load module: %v", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		tb.Fatalf("load module %s: %v", ko, err)
	}
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(DevicePath); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("load module %s: %s did not appear", ko, DevicePath)
}

func dataDir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("PREDICTIO_DATA"); d != "" {
		dir, err := os.MkdirTemp(d, "kmodtest")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	dir, err := os.MkdirTemp("/var/tmp", "kmodtest")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testFile is a file on the data disk, open read-only and mapped for
// mincore.
type testFile struct {
	f     *os.File
	mem   []byte
	pages uint64
	vec   []byte
}

func makeFile(tb testing.TB, dir string, pages uint64) *testFile {
	tb.Helper()
	path := filepath.Join(dir, fmt.Sprintf("data-%d", pages))
	w, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	ps := uint64(os.Getpagesize())
	for off := uint64(0); off < pages*ps; off += uint64(len(buf)) {
		for p := uint64(0); p < uint64(len(buf)); p += ps {
			binary.LittleEndian.PutUint64(buf[p:], (off+p)/ps)
		}
		n := uint64(len(buf))
		if off+n > pages*ps {
			n = pages*ps - off
		}
		if _, err := w.Write(buf[:n]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		tb.Fatal(err)
	}
	w.Close()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(pages*ps), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		tb.Fatal(err)
	}
	tf := &testFile{f: f, mem: mem, pages: pages, vec: make([]byte, pages)}
	tb.Cleanup(func() { unix.Munmap(mem); f.Close() })
	return tf
}

// resident refreshes the mincore vector and returns how many of pages
// [first, first+n) are resident.
func (tf *testFile) resident(tb testing.TB, first, n uint64) uint64 {
	tb.Helper()
	tf.refresh(tb)
	return tf.count(first, n)
}

func (tf *testFile) refresh(tb testing.TB) {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&tf.mem[0])), uintptr(len(tf.mem)), uintptr(unsafe.Pointer(&tf.vec[0])))
	if e != 0 {
		tb.Fatalf("mincore: %v", e)
	}
}

// rangeResident returns how many of pages [first, first+n) are resident,
// with a mincore call over just those pages.
func (tf *testFile) rangeResident(tb testing.TB, first, n uint64) uint64 {
	ps := uint64(os.Getpagesize())
	region := tf.mem[first*ps : (first+n)*ps]
	vec := tf.vec[first : first+n]
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&region[0])), uintptr(len(region)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		tb.Fatalf("mincore: %v", e)
	}
	var c uint64
	for _, v := range vec {
		c += uint64(v & 1)
	}
	return c
}

// count returns how many of pages [first, first+n) were resident at the
// last refresh.
func (tf *testFile) count(first, n uint64) uint64 {
	var c uint64
	for _, v := range tf.vec[first : first+n] {
		c += uint64(v & 1)
	}
	return c
}

// cold evicts the file from the page cache and verifies it with mincore.
func (tf *testFile) cold(tb testing.TB) {
	tb.Helper()
	for try := 0; try < 20; try++ {
		unix.Fadvise(int(tf.f.Fd()), 0, 0, unix.FADV_DONTNEED)
		os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
		if tf.resident(tb, 0, tf.pages) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("could not evict %s: %d pages still resident", tf.f.Name(), tf.resident(tb, 0, tf.pages))
}

func openBackend(tb testing.TB, opts ...Option) *Backend {
	tb.Helper()
	b, err := Open(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// waitIdle waits until the module has no queued work and no page in flight.
func waitIdle(tb testing.TB, b *Backend) Counters {
	tb.Helper()
	return waitIdleEvery(tb, b, 2*time.Millisecond)
}

func waitIdleEvery(tb testing.TB, b *Backend, every time.Duration) Counters {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := b.Counters()
		if err != nil {
			tb.Fatal(err)
		}
		if c.QueueLen == 0 && c.ItemsDone == c.ItemsQueued && c.InFlightPages == 0 {
			checkBalance(tb, c)
			return c
		}
		if time.Now().After(deadline) {
			tb.Fatalf("module not idle after 60 s: %+v", c)
		}
		time.Sleep(every)
	}
}

// checkBalance checks that every requested page is accounted for once the
// module is idle: submitted, skipped as cached, clipped at EOF or dropped.
func checkBalance(tb testing.TB, c Counters) {
	tb.Helper()
	if got := c.PagesSubmitted + c.PagesCached + c.PagesPastEOF + c.PagesDropped; got != c.PagesRequested {
		tb.Errorf("pages do not balance: submitted %d + cached %d + past EOF %d + dropped %d = %d, requested %d",
			c.PagesSubmitted, c.PagesCached, c.PagesPastEOF, c.PagesDropped, got, c.PagesRequested)
	}
	// rejected_index counts skipped batches, not received entries
	if c.Rejected()-c.RejectedIndex+c.DroppedQueueFull > c.EntriesReceived {
		tb.Errorf("more entries rejected or dropped than received: %+v", c)
	}
}

func TestVMBasic(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 8192)
	tf.cold(t)
	b := openBackend(t)
	if err := b.Register(7, tf.f); err != nil {
		t.Fatal(err)
	}
	ranges := []policies.Range{{First: 100, N: 8}, {First: 1000, N: 16}, {First: 3000, N: 1}, {First: 6000, N: 64}}
	var want uint64
	for _, r := range ranges {
		want += uint64(r.N)
	}
	if err := b.Submit(&policies.Request{File: 7, Ranges: ranges}); err != nil {
		t.Fatal(err)
	}
	c := waitIdle(t, b)
	for _, r := range ranges {
		if got := tf.resident(t, r.First, uint64(r.N)); got != uint64(r.N) {
			t.Errorf("pages %d+%d: %d resident, want all", r.First, r.N, got)
		}
	}
	for _, far := range [][2]uint64{{0, 90}, {200, 700}, {2000, 900}, {4000, 1900}, {7000, 1192}} {
		if got := tf.resident(t, far[0], far[1]); got != 0 {
			t.Errorf("far pages %d+%d: %d resident, want none", far[0], far[1], got)
		}
	}
	if c.EntriesReceived != uint64(len(ranges)) || c.PagesRequested != want || c.PagesSubmitted != want || c.PagesCached != 0 || c.Rejected() != 0 || c.Failures != 0 {
		t.Errorf("counters after cold submit: %+v", c)
	}

	// The same ranges again: all cached, nothing submitted.
	if err := b.Submit(&policies.Request{File: 7, Ranges: ranges}); err != nil {
		t.Fatal(err)
	}
	c2 := waitIdle(t, b)
	if c2.PagesCached != want || c2.PagesSubmitted != want {
		t.Errorf("resubmit: cached %d submitted %d, want %d and %d", c2.PagesCached, c2.PagesSubmitted, want, want)
	}

	// A range across EOF is clipped.
	if err := b.Submit(&policies.Request{File: 7, Ranges: []policies.Range{{First: 8190, N: 10}}}); err != nil {
		t.Fatal(err)
	}
	c3 := waitIdle(t, b)
	if c3.PagesPastEOF != 8 || tf.resident(t, 8190, 2) != 2 {
		t.Errorf("EOF clip: past EOF %d (want 8), resident %d of 2", c3.PagesPastEOF, tf.resident(t, 8190, 2))
	}
	st := b.Stats()
	if st.Requests != 3 || st.PagesPastEOF != 8 || st.PagesSubmitted != c3.PagesSubmitted {
		t.Errorf("BackendStats %+v do not match counters %+v", st, c3)
	}
	if err := b.Submit(&policies.Request{File: 8, Ranges: ranges}); !errors.Is(err, ErrUnknownFile) {
		t.Errorf("submit to unregistered id: %v, want ErrUnknownFile", err)
	}
	t.Logf("latency: %d items, mean %d ns, max %d ns", c3.ItemsDone, c3.LatencyNsTotal/max(c3.ItemsDone, 1), c3.LatencyNsMax)
}

func TestVMQueueFull(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 4096)
	tf.cold(t)
	b := openBackend(t, WithQueueCapacity(4), WithWorkers(1), WithItemPages(1))
	if err := b.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Slot: mustSlot(t, b, 1), Count: 1, First: uint64(i * 2)}
	}
	if err := b.SubmitEntries(es); err != nil {
		t.Fatal(err)
	}
	c := waitIdle(t, b)
	if c.EntriesReceived != n || c.DroppedQueueFull == 0 || c.DroppedQueueFull+c.ItemsQueued != n || c.QueueMax > 4 || c.PagesDropped != c.DroppedQueueFull {
		t.Errorf("flood of %d entries into a queue of 4: %+v", n, c)
	}
	if got := tf.resident(t, 0, 4096); got != c.PagesSubmitted {
		t.Errorf("%d pages resident, module submitted %d", got, c.PagesSubmitted)
	}
	t.Logf("flood: %d queued, %d dropped, queue max %d", c.ItemsQueued, c.DroppedQueueFull, c.QueueMax)
}

// TestVMConfig checks the CONFIG ioctl: defaults, zero keeps a field,
// invalid values are refused, and the ring size is fixed once mapped.
func TestVMConfig(t *testing.T) {
	needModule(t)
	b := openBackend(t)
	want := Config{QueueCapacity: DefaultQueueCapacity, InFlightLimit: DefaultInFlightLimit, Workers: DefaultWorkers, ItemPages: DefaultItemPages, RingEntries: DefaultRingEntries}
	if got := b.Config(); got != want {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	got, err := b.SetConfig(Config{Workers: 3})
	want.Workers = 3
	if err != nil || got != want {
		t.Errorf("SetConfig(workers 3) = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []Config{
		{Workers: MaxWorkers + 1},
		{RingEntries: 100},       // not a power of two
		{RingEntries: 1 << 21},   // too large
		{QueueCapacity: 1 << 21}, // too large
		{Flags: 1},
	} {
		if _, err := b.SetConfig(bad); !errors.Is(err, unix.EINVAL) {
			t.Errorf("SetConfig(%+v) = %v, want EINVAL", bad, err)
		}
	}
	if _, err := b.SetConfig(Config{RingEntries: 1024}); !errors.Is(err, unix.EBUSY) {
		t.Errorf("resizing a mapped ring: %v, want EBUSY", err)
	}
	if got, err := b.SetConfig(Config{QueueCapacity: 8}); err != nil || got.QueueCapacity != 8 {
		t.Errorf("queue capacity 8: %+v, %v", got, err)
	}
	// A bad fd and a non-regular file cannot be registered.
	if err := b.Register(1, os.NewFile(uintptr(1<<20), "bogus")); !errors.Is(err, unix.EBADF) {
		t.Errorf("register a closed fd: %v, want EBADF", err)
	}
	dir, err := os.Open(dataDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := b.Register(2, dir); !errors.Is(err, unix.EINVAL) {
		t.Errorf("register a directory: %v, want EINVAL", err)
	}
	if err := b.Unregister(9); !errors.Is(err, ErrUnknownFile) {
		t.Errorf("unregister unknown id: %v", err)
	}
}

// TestVMRingWrap pushes many more entries than the ring holds through one
// Submit, so the producer drains the ring mid-request and wraps around.
func TestVMRingWrap(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 4096)
	tf.cold(t)
	b := openBackend(t, WithRingEntries(16), WithQueueCapacity(4096))
	if err := b.Register(3, tf.f); err != nil {
		t.Fatal(err)
	}
	var rs []policies.Range
	for i := uint64(0); i < 1000; i++ {
		rs = append(rs, policies.Range{First: i * 4, N: 2})
	}
	for k := 0; k < 3; k++ { // 3000 entries through a 16-entry ring
		if err := b.Submit(&policies.Request{File: 3, Ranges: rs}); err != nil {
			t.Fatal(err)
		}
	}
	// The three rounds name the same pages: a round-2 item can be checked
	// by one worker before a round-1 read of the same pages by another
	// worker inserted them, so a few pages may be handed to readahead twice
	// (readahead then skips them); the pages balance either way.
	c := waitIdle(t, b)
	if c.EntriesReceived != 3000 || c.DroppedQueueFull != 0 || c.PagesSubmitted < 2000 || c.PagesSubmitted+c.PagesCached != 6000 {
		t.Errorf("3000 entries through a 16-entry ring: %+v", c)
	}
	tf.refresh(t)
	for _, r := range rs {
		if tf.count(r.First, uint64(r.N)) != 2 || tf.count(r.First+2, 2) != 0 {
			t.Fatalf("pages %d+2 not resident or %d+2 resident", r.First, r.First+2)
		}
	}
	if c.Notifies < 3000/16 {
		t.Errorf("%d notifies for 3000 entries through 16 slots", c.Notifies)
	}
	// The hot path allocates nothing.
	req := &policies.Request{File: 3, Ranges: rs[:8]}
	if a := testing.AllocsPerRun(200, func() { b.Submit(req) }); a != 0 {
		t.Errorf("Submit allocates %.1f times per call", a)
	}
}

func mustSlot(tb testing.TB, b *Backend, id uint32) uint32 {
	s, ok := b.Slot(id)
	if !ok {
		tb.Fatalf("file id %d not registered", id)
	}
	return s
}

// inflightRun reads 4096 cold pages in 64 entries with the given limit and
// returns the counters.
func inflightRun(t *testing.T, tf *testFile, limit uint32) Counters {
	tf.cold(t)
	b := openBackend(t, WithInFlightLimit(limit), WithWorkers(4), WithItemPages(64))
	if err := b.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	var rs []policies.Range
	for i := uint64(0); i < 64; i++ {
		rs = append(rs, policies.Range{First: i * 128, N: 64})
	}
	if err := b.Submit(&policies.Request{File: 1, Ranges: rs}); err != nil {
		t.Fatal(err)
	}
	c := waitIdle(t, b)
	if c.PagesSubmitted != 4096 || tf.resident(t, 0, tf.pages) != 4096 {
		t.Errorf("limit %d: submitted %d, resident %d, want 4096", limit, c.PagesSubmitted, tf.resident(t, 0, tf.pages))
	}
	b.Close()
	return c
}

func TestVMInFlightLimit(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 8192)
	tight := inflightRun(t, tf, 16)
	loose := inflightRun(t, tf, 1<<20)
	t.Logf("in-flight max: %d with limit 16 (%d throttles), %d without limit", tight.InFlightMax, tight.Throttles, loose.InFlightMax)
	if tight.InFlightMax > 16 || tight.InFlightMax == 0 {
		t.Errorf("limit 16: in-flight max %d", tight.InFlightMax)
	}
	if tight.Throttles == 0 {
		t.Errorf("limit 16: no throttle counted: %+v", tight)
	}
	if loose.InFlightMax <= 16 {
		t.Errorf("no limit: in-flight max %d; the accounting does not see concurrent reads", loose.InFlightMax)
	}
}

func TestVMReject(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 256)
	tf.cold(t)
	b := openBackend(t, WithRingEntries(64))
	if err := b.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	s := mustSlot(t, b, 1)
	bad := []Entry{
		{Slot: s + 1, Count: 1, First: 0},        // unknown slot
		{Slot: MaxSlots + 3, Count: 1, First: 0}, // slot out of range
		{Slot: s, Count: 1, First: 256},          // past EOF
		{Slot: s, Count: 1, First: 1 << 40},      // far past EOF
		{Slot: s, Count: 1<<32 - 1, First: 0},    // count 2^32-1
		{Slot: s, Count: 0, First: 0},            // empty
		{Slot: s, Count: 1, First: 1<<64 - 1},    // overflowing range
		{Slot: s, Count: MaxEntryPages + 1, First: 0},
	}
	if err := b.SubmitEntries(bad); err != nil {
		t.Fatal(err)
	}
	c := waitIdle(t, b)
	if c.RejectedSlot != 2 || c.RejectedEOF != 2 || c.RejectedCount != 4 || c.ItemsQueued != 0 || c.PagesSubmitted != 0 {
		t.Errorf("bad entries: %+v", c)
	}
	if got := tf.resident(t, 0, 256); got != 0 {
		t.Errorf("bad entries made %d pages resident", got)
	}

	// A head more than the ring size ahead of the tail: the module skips
	// the batch, counts it and says so.
	tail := b.hdr.Tail
	b.setHead(tail + 64 + 5)
	if err := b.Notify(); !errors.Is(err, unix.EOVERFLOW) {
		t.Errorf("notify with head out of range: %v, want EOVERFLOW", err)
	}
	c = waitIdle(t, b)
	if c.RejectedIndex != 1 || c.ItemsQueued != 0 {
		t.Errorf("head out of range: %+v", c)
	}
	// The ring still works afterwards, and an unregistered slot is refused.
	if err := b.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 10, N: 2}}}); err != nil {
		t.Fatal(err)
	}
	if c = waitIdle(t, b); c.PagesSubmitted != 2 || tf.resident(t, 10, 2) != 2 {
		t.Errorf("after recovery: %+v", c)
	}
	if err := b.Unregister(1); err != nil {
		t.Fatal(err)
	}
	if err := b.SubmitEntries([]Entry{{Slot: s, Count: 1, First: 0}}); err != nil {
		t.Fatal(err)
	}
	if c = waitIdle(t, b); c.RejectedSlot != 3 {
		t.Errorf("entry for an unregistered slot: rejected_slot %d, want 3", c.RejectedSlot)
	}
	if st := b.Stats(); st.Rejected != 10 {
		t.Errorf("BackendStats.Rejected = %d, want 10", st.Rejected)
	}
}

// TestVMRegisterFault registers a file with the argument on a read-only
// page: the module reads the fd, cannot write the slot back, and must
// return EFAULT without keeping the slot or the file reference.
func TestVMRegisterFault(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 16)
	b := openBackend(t)
	ps := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	r := (*register)(unsafe.Pointer(&mem[0]))
	r.FD = int32(tf.f.Fd())
	r.Slot = 1<<32 - 1
	if err := unix.Mprotect(mem, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b.mu.Lock()
		err := b.ioctl(iocRegisterFD, unsafe.Pointer(r))
		b.mu.Unlock()
		if !errors.Is(err, unix.EFAULT) {
			t.Fatalf("register with a read-only argument: %v, want EFAULT", err)
		}
	}
	// The failed registrations left no slot behind: the first real one
	// gets slot 0, and entries for slot 1 are refused.
	if err := b.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	if s := mustSlot(t, b, 1); s != 0 {
		t.Errorf("slot after failed registrations = %d, want 0", s)
	}
	if err := b.SubmitEntries([]Entry{{Slot: 1, Count: 1, First: 0}}); err != nil {
		t.Fatal(err)
	}
	if c := waitIdle(t, b); c.RejectedSlot != 1 {
		t.Errorf("entry for the slot of a failed registration: rejected_slot %d, want 1", c.RejectedSlot)
	}
}

// TestVMChurn has two contexts prefetch the same file while it is
// truncated and one of them unregisters it, and checks that every page is
// accounted for and the cache holds nothing past the new end of file.
func TestVMChurn(t *testing.T) {
	needModule(t)
	tf := makeFile(t, dataDir(t), 8192)
	tf.cold(t)
	var bs []*Backend
	for i := 0; i < 2; i++ {
		b := openBackend(t, WithInFlightLimit(32), WithItemPages(8), WithWorkers(3), WithQueueCapacity(256))
		if err := b.Register(1, tf.f); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	done := make(chan error, len(bs))
	for i, b := range bs {
		go func(i int, b *Backend) {
			x := uint64(i*7919 + 1)
			for k := 0; k < 300; k++ {
				var rs []policies.Range
				for j := 0; j < 8; j++ {
					x = x*6364136223846793005 + 1442695040888963407
					rs = append(rs, policies.Range{First: (x >> 33) % 9000, N: uint32(1 + (x>>20)%40)})
				}
				if err := b.Submit(&policies.Request{File: 1, Ranges: rs}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}(i, b)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.Truncate(tf.f.Name(), 4096*int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	if err := bs[1].Unregister(1); err != nil {
		t.Fatal(err)
	}
	var unknown int
	for range bs {
		if err := <-done; err != nil {
			if !errors.Is(err, ErrUnknownFile) {
				t.Fatal(err)
			}
			unknown++
		}
	}
	for i, b := range bs {
		c := waitIdle(t, b) // checks the page balance
		t.Logf("context %d: %d entries, %d pages requested, %d submitted, %d cached, %d past EOF, %d dropped, %d rejected, in-flight max %d",
			i, c.EntriesReceived, c.PagesRequested, c.PagesSubmitted, c.PagesCached, c.PagesPastEOF, c.PagesDropped, c.Rejected(), c.InFlightMax)
		if c.InFlightMax > 32 {
			t.Errorf("context %d: in-flight max %d over the limit 32", i, c.InFlightMax)
		}
	}
	// A read racing with the truncate itself can leave zero-filled pages
	// past the new end (as the kernel's own readahead can); only pages in
	// flight at that moment can, so the in-flight limits bound them.
	if got := tf.resident(t, 4096, 4096); got > 2*32 {
		t.Errorf("%d pages resident past the truncated end of file, more than the in-flight limits (2x32)", got)
	} else {
		t.Logf("%d pages resident past the truncated end of file", got)
	}
	// New entries past the new end are rejected, entries across it clipped.
	c0 := waitIdle(t, bs[0])
	if err := bs[0].Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 5000, N: 4}, {First: 4094, N: 4}}}); err != nil {
		t.Fatal(err)
	}
	c1 := waitIdle(t, bs[0])
	if c1.RejectedEOF != c0.RejectedEOF+1 || c1.PagesPastEOF != c0.PagesPastEOF+2 || tf.resident(t, 4094, 2) != 2 {
		t.Errorf("after truncate: rejected EOF %d -> %d, past EOF %d -> %d, want +1 and +2", c0.RejectedEOF, c1.RejectedEOF, c0.PagesPastEOF, c1.PagesPastEOF)
	}
}

// TestVMUnload closes the device and removes the module while work is
// queued and reads are in flight, then loads it again.
func TestVMUnload(t *testing.T) {
	needModule(t)
	if !inVM() {
		t.Skip("unload test removes the module, which needs a kernel with loadable modules: runs in the qemu VM (PREDICTIO_VM=1, kmod/vmtest/run.sh)")
	}
	tf := makeFile(t, dataDir(t), 32768)
	tf.cold(t)
	b, err := Open(WithInFlightLimit(64), WithWorkers(2), WithItemPages(16), WithQueueCapacity(4096))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	var rs []policies.Range
	for i := uint64(0); i < 1024; i++ {
		rs = append(rs, policies.Range{First: i * 32, N: 16})
	}
	if err := b.Submit(&policies.Request{File: 1, Ranges: rs}); err != nil {
		t.Fatal(err)
	}
	// Close once workers are reading and items are still queued.
	var c Counters
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if c, err = b.Counters(); err != nil {
			t.Fatal(err)
		}
		if c.QueueLen > 0 && c.InFlightPages > 0 {
			break
		}
		if time.Now().After(deadline) || c.QueueLen == 0 {
			t.Fatalf("never saw queued work and reads in flight together: %+v", c)
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Logf("closing with %d items queued and %d pages in flight", c.QueueLen, c.InFlightPages)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unix.DeleteModule("predictio", 0); err != nil {
		t.Fatalf("rmmod predictio with work in flight: %v", err)
	}
	if _, err := os.Stat(DevicePath); err == nil {
		t.Errorf("%s still present after rmmod", DevicePath)
	}
	// Reads submitted before the unload still complete into the cache.
	loadModule(t)
	b2 := openBackend(t)
	if err := b2.Register(1, tf.f); err != nil {
		t.Fatal(err)
	}
	if err := b2.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 1, N: 4}}}); err != nil {
		t.Fatal(err)
	}
	if c := waitIdle(t, b2); c.PagesSubmitted+c.PagesCached != 4 {
		t.Errorf("after reload: %+v", c)
	}
}

// kernelLogBad lists the markers of a kernel problem.
var kernelLogBad = []string{"BUG:", "WARNING:", "Oops", "KASAN", "general protection fault", "kernel BUG", "list_del corruption", "refcount_t:"}

// TestVMKernelLog fails if the kernel log shows a bug, warning or oops. It
// runs last in the VM (test order is file order).
func TestVMKernelLog(t *testing.T) {
	if !inVM() {
		t.Skip("checks the kernel log of the module test VM; this kernel has no loadable modules: runs in the qemu VM (PREDICTIO_VM=1, kmod/vmtest/run.sh)")
	}
	buf := make([]byte, 1<<20)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		t.Fatalf("read kernel log: %v", err)
	}
	var bad []string
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		for _, m := range kernelLogBad {
			if strings.Contains(line, m) {
				bad = append(bad, line)
				break
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("kernel log shows problems:\n%s", strings.Join(bad, "\n"))
	}
}

// BenchmarkVMResident makes the same sparse cold ranges resident with the
// module and with posix_fadvise(WILLNEED) and readahead(2), alternating the
// order every iteration, and reports the median pages/s of each and the
// module's kernel-side ns per requested page. Run it inside the VM:
// kmod/vmtest/run.sh -bench.
func BenchmarkVMResident(b *testing.B) {
	needModule(b)
	tf := makeFile(b, dataDir(b), 16384)
	// one worker: the same single thread of submission as the syscalls
	be := openBackend(b, WithInFlightLimit(1<<20), WithQueueCapacity(1<<16), WithWorkers(1))
	if err := be.Register(1, tf.f); err != nil {
		b.Fatal(err)
	}
	var rs []policies.Range
	var total uint64
	for i := uint64(0); i < 256; i++ {
		r := policies.Range{First: i*64 + (i*7)%32, N: uint32(1 + (i*13)%16)}
		rs = append(rs, r)
		total += uint64(r.N)
	}
	ps := int64(os.Getpagesize())
	fd := int(tf.f.Fd())
	methods := []struct {
		name   string
		submit func() error
	}{
		{"kmod", func() error { return be.Submit(&policies.Request{File: 1, Ranges: rs}) }},
		{"fadvise", func() error {
			for _, r := range rs {
				if err := unix.Fadvise(fd, int64(r.First)*ps, int64(r.N)*ps, unix.FADV_WILLNEED); err != nil {
					return err
				}
			}
			return nil
		}},
		{"readahead", func() error {
			for _, r := range rs {
				if _, _, e := unix.Syscall(unix.SYS_READAHEAD, uintptr(fd), uintptr(int64(r.First)*ps), uintptr(int64(r.N)*ps)); e != 0 {
					return e
				}
			}
			return nil
		}},
	}
	rates := make([][]float64, len(methods))
	submitNs := make([][]float64, len(methods))
	var kernNs, notifyNs, raNs, kernPages, warmNs, warmPages uint64
	last := rs[len(rs)-1]
	allResident := func() bool {
		// cheap first: the last range is read last
		if tf.rangeResident(b, last.First, uint64(last.N)) != uint64(last.N) {
			return false
		}
		tf.refresh(b)
		for _, r := range rs {
			if tf.count(r.First, uint64(r.N)) != uint64(r.N) {
				return false
			}
		}
		return true
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range methods {
			m := (i + k) % len(methods)
			b.StopTimer()
			tf.cold(b)
			b.StartTimer()
			t0 := time.Now()
			if err := methods[m].submit(); err != nil {
				b.Fatalf("%s: %v", methods[m].name, err)
			}
			t1 := time.Now()
			// poll without spinning, so the module's workers and the
			// kernel's readahead get the CPUs
			for !allResident() {
				time.Sleep(500 * time.Microsecond)
			}
			el := time.Since(t0)
			rates[m] = append(rates[m], float64(total)/el.Seconds())
			submitNs[m] = append(submitNs[m], float64(t1.Sub(t0).Nanoseconds())/float64(total))
			if methods[m].name == "kmod" {
				// Kernel-side cost, measured apart: the same requests
				// on a cold cache with nothing else running in the VM
				// (idle polls every 5 ms), then once more all cached.
				waitIdle(b, be)
				tf.cold(b)
				before, _ := be.Counters()
				if err := methods[m].submit(); err != nil {
					b.Fatal(err)
				}
				after := waitIdleEvery(b, be, 5*time.Millisecond)
				kernNs += after.NotifyNsTotal + after.WorkNsTotal - before.NotifyNsTotal - before.WorkNsTotal
				notifyNs += after.NotifyNsTotal - before.NotifyNsTotal
				raNs += after.ReadaheadNsTotal - before.ReadaheadNsTotal
				kernPages += after.PagesRequested - before.PagesRequested
				if err := methods[m].submit(); err != nil {
					b.Fatal(err)
				}
				again := waitIdleEvery(b, be, 5*time.Millisecond)
				warmNs += again.NotifyNsTotal + again.WorkNsTotal - after.NotifyNsTotal - after.WorkNsTotal
				warmPages += again.PagesRequested - after.PagesRequested
			}
		}
	}
	b.StopTimer()
	for m := range methods {
		b.ReportMetric(median(rates[m]), methods[m].name+"-pages/s")
		b.ReportMetric(median(submitNs[m]), methods[m].name+"-submit-ns/page")
	}
	if kernPages > 0 {
		b.ReportMetric(float64(kernNs)/float64(kernPages), "kmod-kernel-ns/page")
		b.ReportMetric(float64(notifyNs)/float64(kernPages), "kmod-notify-ns/page")
		b.ReportMetric(float64(raNs)/float64(kernPages), "kmod-readahead-ns/page")
	}
	if warmPages > 0 {
		b.ReportMetric(float64(warmNs)/float64(warmPages), "kmod-kernel-ns/cached-page")
	}
	b.ReportMetric(float64(total), "pages/iter")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
