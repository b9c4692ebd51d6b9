package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ColdCheck is the verified state of a workload's files after eviction:
// how many of their pages were still in the page cache when the run
// started.
type ColdCheck struct {
	// Method says how the caches were dropped and how residency was
	// counted, e.g. "drop_caches=3 + POSIX_FADV_DONTNEED, cachestat".
	Method   string `json:"method"`
	Files    int    `json:"files"`
	Pages    uint64 `json:"pages"`    // pages of the files
	Resident uint64 `json:"resident"` // of them still cached after eviction
	// Mapped counts the resident pages of files that other processes map
	// (libc, ld.so, locale files): pages in a page table are neither
	// dropped by drop_caches nor by POSIX_FADV_DONTNEED, so no cold start
	// on a running system finds them evicted. A file this process maps
	// does not count.
	Mapped uint64 `json:"mapped"`
	// Verified is true when every page that stayed resident is of a file
	// that another process maps (Resident == Mapped): the run is as cold
	// as eviction can make it.
	Verified bool `json:"verified"`
	// Residue names up to five files with resident pages, the largest
	// first, with the processes that map them ("libc.so.6: 428 of 471
	// pages, mapped by 41 processes: bash (4711), ...").
	Residue []string `json:"residue,omitempty"`
}

// String says what the check found, for reports.
func (c ColdCheck) String() string {
	switch {
	case c.Resident == 0:
		return fmt.Sprintf("cold: 0 of %d pages of %d files resident (%s)", c.Pages, c.Files, c.Method)
	case c.Verified:
		return fmt.Sprintf("cold: %d of %d pages of %d files resident, all of files other processes map (%s): %s",
			c.Resident, c.Pages, c.Files, c.Method, strings.Join(c.Residue, "; "))
	}
	return fmt.Sprintf("not cold: %d of %d pages of %d files resident, %d of them of files other processes map (%s): %s",
		c.Resident, c.Pages, c.Files, c.Mapped, c.Method, strings.Join(c.Residue, "; "))
}

// ColdOptions configures MakeCold.
type ColdOptions struct {
	// DropCaches writes 3 to /proc/sys/vm/drop_caches (page cache,
	// dentries and inodes of the whole machine, as the PredictIO paper's
	// method) after sync. Without it only the files themselves are
	// evicted, which other processes' tests on the same machine tolerate.
	DropCaches bool
}

// MakeCold evicts paths (files, or directories whose regular files are all
// taken) from the page cache and verifies the result by counting their
// resident pages. It fails only when eviction itself fails; a file that
// stays resident (mapped or locked by another process) is reported in the
// check, not as an error (and counted as cold when another process maps
// it: ColdCheck.Mapped). Needs root for DropCaches; counting needs Linux
// 6.5 for cachestat and falls back to mincore(2) before it.
func MakeCold(paths []string, o ColdOptions) (ColdCheck, error) {
	files, err := expand(paths)
	if err != nil {
		return ColdCheck{}, err
	}
	method := "POSIX_FADV_DONTNEED"
	if o.DropCaches {
		unix.Sync()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			return ColdCheck{}, fmt.Errorf("drop caches (needs root): %w", err)
		}
		method = "sync, drop_caches=3 + POSIX_FADV_DONTNEED"
	}
	if err := evict(files); err != nil {
		return ColdCheck{}, err
	}
	c, unmapped, err := countResident(files)
	// A file no process maps that is cached again was read by another
	// process since (every process start reads ld.so.cache), or has pages
	// still being read in, which eviction skips (a prefetch queued behind
	// a device throttle: 32 pages of a database, 2026-12-02): evict it
	// again, at once and then every 50 ms while the residue keeps falling
	// (within 200 ms), for up to residueWait.
	deadline, fell := time.Now().Add(residueWait), time.Now()
	for i := 0; err == nil && len(unmapped) > 0; i++ {
		if i >= 2 && (time.Now().After(deadline) || time.Since(fell) > 200*time.Millisecond) {
			break
		}
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if err := evict(unmapped); err != nil {
			return ColdCheck{}, err
		}
		was := c.Resident
		c, unmapped, err = countResident(files)
		if c.Resident < was {
			fell = time.Now()
		}
	}
	c.Method = method + ", " + c.Method
	return c, err
}

// residueWait bounds how long MakeCold evicts again the pages of files no
// process maps that stay cached.
const residueWait = 2 * time.Second

func evict(files []string) error {
	for _, f := range files {
		if err := fadviseDontNeed(f); err != nil {
			return err
		}
	}
	return nil
}

// CountResident counts the resident pages of files (regular files, not
// expanded) and finds which of the files with resident pages other
// processes map. Method is "cachestat" or "mincore".
func CountResident(files []string) (ColdCheck, error) {
	c, _, err := countResident(files)
	return c, err
}

// countResident is CountResident, and the files with resident pages that
// no other process maps.
func countResident(files []string) (ColdCheck, []string, error) {
	c := ColdCheck{Files: len(files), Method: "cachestat"}
	var residue []resident
	for _, f := range files {
		r, how, err := residentPages(f)
		if err != nil {
			return c, nil, err
		}
		c.Method = how
		c.Pages += r.of
		c.Resident += r.have
		if r.have > 0 {
			r.path = f
			residue = append(residue, r)
		}
	}
	c.Mapped = markMapped(residue)
	var unmapped []string
	for _, r := range residue {
		if len(r.by) == 0 {
			unmapped = append(unmapped, r.path)
		}
	}
	sort.Slice(residue, func(i, j int) bool { return residue[i].have > residue[j].have })
	for i, r := range residue {
		if i == 5 {
			c.Residue = append(c.Residue, fmt.Sprintf("and %d more files", len(residue)-5))
			break
		}
		c.Residue = append(c.Residue, r.String())
	}
	c.Verified = c.Resident == c.Mapped
	return c, unmapped, nil
}

// resident is one file's resident pages.
type resident struct {
	path     string
	name     string
	id       FileID
	have, of uint64
	by       []Proc // other processes mapping it
}

func (r resident) String() string {
	s := fmt.Sprintf("%s: %d of %d pages", r.name, r.have, r.of)
	if len(r.by) > 0 {
		s += ", mapped by " + MappersText(r.by)
	}
	return s
}

// markMapped finds the processes other than this one that map each file
// and returns the resident pages of the files some process maps.
func markMapped(rs []resident) (mapped uint64) {
	ids := make([]FileID, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	by := Mappers(ids)
	self := os.Getpid()
	for i := range rs {
		for _, p := range by[rs[i].id] {
			if p.PID != self {
				rs[i].by = append(rs[i].by, p)
			}
		}
		if len(rs[i].by) > 0 {
			mapped += rs[i].have
		}
	}
	return mapped
}

// expand turns directories into the regular files under them.
func expand(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list workload files: %w", err)
		}
	}
	return out, nil
}

func fadviseDontNeed(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("evict %s: %w", path, err)
	}
	defer f.Close()
	// Dirty pages are not dropped: write them back first.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("evict %s: fsync: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evict %s: %w", path, err)
	}
	return nil
}

// residentPages returns the resident and total pages of a file, and its
// identity.
func residentPages(path string) (r resident, how string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return r, "", fmt.Errorf("count resident pages of %s: %w", path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return r, "", fmt.Errorf("count resident pages of %s: %w", path, err)
	}
	r.name = filepath.Base(path)
	r.id = FileID{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev), Ino: st.Ino}
	ps := uint64(os.Getpagesize())
	r.of = (uint64(st.Size) + ps - 1) / ps
	if r.of == 0 {
		return r, "cachestat", nil
	}
	var cs unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: 0, Len: 0}, &cs, 0)
	if err == nil {
		r.have = cs.Cache
		return r, "cachestat", nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return r, "", fmt.Errorf("cachestat %s: %w", path, err)
	}
	r.have, err = mincoreCount(f, st.Size)
	return r, "mincore", err
}

// mincoreCount counts resident pages with mmap and mincore (before Linux
// 6.5), in 1 GiB windows so that huge files map in bounded pieces.
func mincoreCount(f *os.File, size int64) (uint64, error) {
	const window = 1 << 30
	ps := int64(os.Getpagesize())
	var n uint64
	for off := int64(0); off < size; off += window {
		l := min(window, size-off)
		m, err := unix.Mmap(int(f.Fd()), off, int(l), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0, fmt.Errorf("mincore %s: mmap: %w", f.Name(), err)
		}
		vec := make([]byte, (l+ps-1)/ps)
		err = Mincore(m, vec)
		unix.Munmap(m)
		if err != nil {
			return 0, fmt.Errorf("mincore %s: %w", f.Name(), err)
		}
		for _, v := range vec {
			n += uint64(v & 1)
		}
	}
	return n, nil
}

// Mincore is mincore(2): vec gets one byte per page of b, bit 0 set when
// the page is resident.
func Mincore(b, vec []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}
