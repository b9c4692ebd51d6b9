package backend

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/internal/testenv"
	"github.com/predictio/predictio/policies"
)

// TestAdviseLimitSysfs reads the limit from a sysfs tree laid out like the
// kernel's: whole disks, partitions, devices without a block device.
func TestAdviseLimitSysfs(t *testing.T) {
	sys := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(dev, target string) {
		if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(sys, target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", target), filepath.Join(sys, "dev", "block", dev)); err != nil {
			t.Fatal(err)
		}
	}
	// sda: default readahead, 1280 KiB requests; sda1 a partition of it.
	link("8:0", "devices/pci/block/sda")
	link("8:1", "devices/pci/block/sda/sda1")
	write("devices/pci/block/sda/bdi/read_ahead_kb", "128")
	write("devices/pci/block/sda/queue/max_sectors_kb", "1280")
	write("class/bdi/8:0/read_ahead_kb", "128")
	// vda: 8 MiB readahead, 4 MiB requests (this machine).
	link("254:0", "devices/virtio/block/vda")
	write("devices/virtio/block/vda/queue/max_sectors_kb", "4096")
	write("class/bdi/254:0/read_ahead_kb", "8192")
	// loop0: readahead off, no queue limit.
	link("7:0", "devices/virtual/block/loop0")
	write("class/bdi/7:0/read_ahead_kb", "0")
	// huge: a readahead beyond one SQE's 32-bit length.
	link("9:0", "devices/virtual/block/md0")
	write("class/bdi/9:0/read_ahead_kb", "16777216")

	for _, tc := range []struct {
		major, minor uint32
		want         uint64
	}{
		{8, 0, 320},    // max(128 KiB, 1280 KiB) / 4 KiB
		{8, 1, 320},    // the partition uses its disk's bdi and queue
		{254, 0, 2048}, // max(8192 KiB, 4096 KiB)
		{7, 0, 1},      // readahead off
		{9, 0, 262144}, // capped at 1 GiB per call
		{0, 45, 32},    // no block device (btrfs, tmpfs): 128 KiB
	} {
		got := adviseLimitSysfs(sys, tc.major, tc.minor, 4096)
		if got.pages != tc.want {
			t.Errorf("device %d:%d: %d pages per call (%s), want %d", tc.major, tc.minor, got.pages, got.source, tc.want)
		}
	}
}

// TestKernelSplitsAtAdviseLimit checks the limit against the kernel: one
// posix_fadvise(WILLNEED) of a cold file 4 limits long makes exactly one
// limit resident, while the kernel backend, given the same range as one
// request, makes all of it resident.
func TestKernelSplitsAtAdviseLimit(t *testing.T) {
	dir := scratchDir(t)
	ps := os.Getpagesize()
	path := filepath.Join(dir, "big")
	probe, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	lim := adviseLimitFor(int(probe.Fd()), ps)
	probe.Close()
	t.Logf("advise limit: %d pages (%s)", lim.pages, lim.source)
	if lim.pages < 2 || lim.pages*uint64(ps)*4 > 512<<20 {
		t.Skipf("advise limit %d pages (%s): this test wants 2 pages to 128 MiB", lim.pages, lim.source)
	}
	pages := 4 * lim.pages
	testenv.WritePattern(t, path, int(pages)*ps)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := pages * uint64(ps)
	reg := NewRegistry()
	defer reg.Close()
	if _, err := reg.Add(refOf(t, 1, path)); err != nil {
		t.Fatal(err)
	}

	// settle returns the most pages seen resident at once: FADVISE through
	// io_uring runs asynchronously, so wait until the count reaches want or
	// has not grown for half a second. The peak, not the last count, so
	// that an eviction by a concurrent test after the fact does not count.
	settle := func(want uint64) uint64 {
		var peak uint64
		grew := time.Now()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			c, err := cachedPages(int(f.Fd()), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c > peak {
				peak, grew = c, time.Now()
			}
			if peak >= want || time.Since(grew) > 500*time.Millisecond {
				break
			}
		}
		return peak
	}

	// drain waits for reads still in flight (cachestat counts a page as
	// soon as it is in the cache, before its read completes, and eviction
	// skips pages under I/O) by reading the whole file.
	drain := func() {
		buf := make([]byte, 1<<20)
		for off := int64(0); off < int64(size); off += int64(len(buf)) {
			if _, err := f.ReadAt(buf, off); err != nil && off+int64(len(buf)) < int64(size) {
				t.Fatal(err)
			}
		}
	}
	// cold evicts the file with POSIX_FADV_DONTNEED only: a global
	// drop_caches would disturb tests of other packages running at the same
	// time, as theirs can disturb this one (below).
	cold := func() {
		drain()
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		evictFile(t, f)
	}
	// Other test packages run concurrently and some write drop_caches,
	// which can evict pages this test just made resident. So a count below
	// the expected one is retried (up to three times); a WILLNEED that
	// makes more than the limit resident fails at once, since eviction
	// cannot cause that.
	const attempts = 3
	for a := 1; ; a++ {
		cold()
		if err := unix.Fadvise(int(f.Fd()), 0, int64(pages)*int64(ps), unix.FADV_WILLNEED); err != nil {
			t.Fatal(err)
		}
		got := settle(pages)
		if got > lim.pages {
			t.Fatalf("one WILLNEED of %d pages made %d resident, more than the limit read from sysfs, %d (%s)", pages, got, lim.pages, lim.source)
		}
		if got == lim.pages {
			break
		}
		if a == attempts {
			t.Fatalf("one WILLNEED of %d pages made %d resident in each of %d attempts (last); the limit read from sysfs says %d (%s)", pages, got, attempts, lim.pages, lim.source)
		}
		t.Logf("attempt %d: one WILLNEED made %d of %d pages resident (evicted meanwhile?); again", a, got, lim.pages)
	}

	for _, ra := range []bool{false, true} {
		for a := 1; ; a++ {
			cold()
			b := NewKernel(reg, Options{PageSize: ps, InFlight: int(pages), Readahead: ra})
			if err := b.Submit(&policies.Request{File: 1, Ranges: []policies.Range{{First: 0, N: uint32(pages)}}}); err != nil {
				t.Fatal(err)
			}
			ts, err := b.Close()
			if err != nil || len(ts.Warnings) > 0 {
				t.Fatalf("%s: %v %v", ts.Via, err, ts.Warnings)
			}
			if st := b.Stats(); st.PagesSubmitted != pages {
				t.Fatalf("kernel backend via %s: %d pages submitted, want %d", ts.Via, st.PagesSubmitted, pages)
			}
			got := settle(pages)
			if got == pages {
				break
			}
			if a == attempts {
				t.Fatalf("kernel backend via %s: %d of %d pages resident after one request for all of them, in each of %d attempts (last)", ts.Via, got, pages, attempts)
			}
			t.Logf("attempt %d, via %s: %d of %d pages resident (evicted meanwhile?); again", a, ts.Via, got, pages)
		}
	}
}
