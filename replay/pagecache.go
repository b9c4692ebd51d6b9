package replay

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotCold means a cold run could not start because the bundle's files
// stayed in the page cache after eviction.
var ErrNotCold = errors.New("files are still cached")

// pageCacheDemand re-issues demand accesses through the page cache: reads as
// preads, faults as touches of the mapping. The none, kernel and kmod
// backends' runs use it.
type pageCacheDemand struct {
	files []*openFile
	ps    int
	track *tracker // nil without prefetching
}

func (d *pageCacheDemand) demand(w *worker, o *op) error {
	f := d.files[o.file]
	off := o.page * uint64(d.ps)
	n := uint64(o.n) * uint64(d.ps)
	if off+n > f.size {
		n = f.size - off
	}
	if o.fault {
		// Touch one byte of every page so that the kernel takes a real
		// fault (or finds the page mapped by fault-around).
		for p := uint64(0); p < n; p += uint64(d.ps) {
			w.sink += f.mem[off+p]
		}
	} else {
		buf := w.buffer(int(n))
		for done := 0; done < len(buf); {
			m, err := unix.Pread(f.fd, buf[done:], int64(off)+int64(done))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("pread %s at page %d: %w", f.path, o.page, err)
			}
			if m == 0 {
				return fmt.Errorf("pread %s at page %d: unexpected end of file at byte %d; the file shrank during replay", f.path, o.page, off+uint64(done))
			}
			done += m
		}
	}
	if d.track != nil {
		d.track.demanded(o.file, o.page, uint64(o.n))
	}
	return nil
}

// cachedPages returns how many pages of [off, off+n) bytes are in the page
// cache (len 0: to end of file). Needs Linux 6.5 for cachestat.
func cachedPages(fd int, off, n uint64) (uint64, error) {
	var cs unix.Cachestat_t
	r := unix.CachestatRange{Off: off, Len: n}
	if err := unix.Cachestat(uint(fd), &r, &cs, 0); err != nil {
		return 0, err
	}
	return cs.Cache, nil
}

func mincore(b []byte, vec []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// evict drops the page-cache pages of files with POSIX_FADV_DONTNEED (and,
// with dropCaches, /proc/sys/vm/drop_caches), then verifies with cachestat
// that none is left. Needs Linux 6.5 for cachestat; without it, mincore of a
// fresh mapping is used.
func evict(files []*openFile, dropCaches, skip bool) error {
	if !skip {
		for _, f := range files {
			if f != nil {
				unix.Fadvise(f.fd, 0, 0, unix.FADV_DONTNEED)
			}
		}
		if dropCaches {
			unix.Sync()
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
				return fmt.Errorf("drop caches: %w (needs root with CAP_SYS_ADMIN; leave out --drop-caches to evict with POSIX_FADV_DONTNEED only)", err)
			}
		}
	}
	var left []string
	for _, f := range files {
		if f == nil || f.size == 0 {
			continue
		}
		c, err := residentPages(f)
		if err != nil {
			return fmt.Errorf("verify cold %s: %w", f.path, err)
		}
		if c > 0 {
			left = append(left, fmt.Sprintf("%s: %d of %d pages cached", f.path, c, (f.size+uint64(os.Getpagesize())-1)/uint64(os.Getpagesize())))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("verify cold run: %w after eviction:\n  %s\nthe pages may be mapped or locked by another process, or dirty; stop that process, try --drop-caches as root, or pass --warm to run (and report) warm", ErrNotCold, strings.Join(left, "\n  "))
	}
	return nil
}

// residentPages returns the cached pages of f, with cachestat or mincore.
func residentPages(f *openFile) (uint64, error) {
	c, err := cachedPages(f.fd, 0, 0) // len 0: to end of file
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return 0, err
	}
	mem := f.mem
	if mem == nil {
		m, err := unix.Mmap(f.fd, 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0, err
		}
		defer unix.Munmap(m)
		mem = m
	}
	vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
	if err := mincore(mem, vec); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range vec {
		n += uint64(v & 1)
	}
	return n, nil
}
