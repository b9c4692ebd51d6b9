package replay

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
)

// TestMapRowReadsUncachedOnly: a map row's pages were cached when the
// program's fault mapped them, and the program touched them for free
// afterwards, never waiting for them. Replay faults none of them in: a
// row over a cached file leaves every page unmapped (touching them, as
// before 2026-12-06, faulted and mapped them), and a row over an uncached
// file has the kernel read every page (FADV_WILLNEED), without mapping
// them or waiting: they are cached soon after. (A run with the effect
// observer touches every page, so that the observer sees each one's
// demand.)
func TestMapRowReadsUncachedOnly(t *testing.T) {
	const pages = 64
	for _, cached := range []bool{true, false} {
		name := map[bool]string{true: "cached", false: "uncached"}[cached]
		t.Run(name, func(t *testing.T) {
			f, mem := mapRowFile(t, pages, cached)
			d := &pageCacheDemand{files: []*openFile{f}, ps: os.Getpagesize()}
			if err := d.demand(&worker{r: &runState{rp: &Replayer{}}}, &op{kind: formats.KindMap, fault: true, page: 0, n: pages}); err != nil {
				t.Fatal(err)
			}
			present := mappedPages(t, mem, pages)
			vec := make([]byte, pages)
			// The reads are in flight (mincore counts a page once it is
			// up to date): wait for them.
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
				if err := mincore(mem, vec); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(vec, 0) || time.Now().After(deadline) {
					break
				}
			}
			for p := range pages {
				switch {
				case vec[p]&1 == 0:
					t.Fatalf("page %d: not cached 2 s after the map row: an uncached page must be read", p)
				case present[p]:
					t.Fatalf("page %d: faulted in by the map row: replay maps and waits where the program did not (cached before: %v)", p, cached)
				}
			}
		})
	}
}

// mapRowFile returns an open file of pages pages, all cached or none, and
// its whole-file mapping (which a row without a recorded mapping goes
// through).
func mapRowFile(t *testing.T, pages int, cached bool) (*openFile, []byte) {
	t.Helper()
	ps := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(path, make([]byte, pages*ps), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Fsync(fd)
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	unix.Close(fd)
	f := &openFile{path: path, size: uint64(pages * ps), dev: formats.KernelDev(st.Dev), ino: st.Ino}
	if err := f.ensure(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(f.fd) })
	if err := unix.Fadvise(f.fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if cached {
		if _, err := unix.Pread(f.fd, make([]byte, pages*ps), 0); err != nil {
			t.Fatal(err)
		}
	}
	mem, _, err := f.mapped(&op{}, 0, ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	vec := make([]byte, pages)
	if err := mincore(mem, vec); err != nil {
		t.Fatal(err)
	}
	for p := range pages {
		if (vec[p]&1 != 0) != cached {
			t.Fatalf("page %d cached %v before the row, want %v", p, vec[p]&1 != 0, cached)
		}
	}
	return f, mem
}

// mappedPages reports, from /proc/self/pagemap, which pages of mem are
// present in the process's page tables.
func mappedPages(t *testing.T, mem []byte, pages int) []bool {
	t.Helper()
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatalf("open /proc/self/pagemap: %v", err)
	}
	defer pm.Close()
	ps := uintptr(os.Getpagesize())
	base := uintptr(unsafe.Pointer(&mem[0]))
	raw := make([]byte, 8*pages)
	if _, err := pm.ReadAt(raw, int64(base/ps*8)); err != nil {
		t.Fatalf("read pagemap: %v", err)
	}
	out := make([]bool, pages)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(raw[8*i:])&(1<<63) != 0
	}
	return out
}
