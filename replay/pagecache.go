package replay

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/rawsys"
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
}

func (d *pageCacheDemand) demand(w *worker, o *op) error {
	f := d.files[o.file]
	if err := f.ensure(false); err != nil {
		return err
	}
	ps := uint64(d.ps)
	off := o.page * ps
	n := uint64(o.n) * ps
	if off+n > f.size {
		n = f.size - off
	}
	if o.fault {
		if o.kind == formats.KindMap && w.r.rp.obs == nil {
			return d.mapRow(w, f, o, n)
		}
		// Touch one byte of every page so that the kernel takes a real
		// fault (or finds the page mapped by fault-around), through the
		// recorded mapping where there is one.
		for p := uint64(0); p < n; p += ps {
			page := o.page + p/ps
			mem, first, err := f.mapped(o, page, d.ps)
			if err != nil {
				return err
			}
			w.sink += mem[(page-first)*ps]
		}
	} else {
		buf := w.buffer(int(n))
		for done := 0; done < len(buf); {
			m, err := rawsys.Pread(f.fd, buf[done:], int64(off)+int64(done))
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
	return nil
}

// mapRow replays a map row, n bytes from its first page: its pages were
// cached and up to date when the program's fault mapped them around the
// faulting page (the kernel maps no other), so the program touched them
// later for free and never waited for them. Replay looks for the ones its
// run has not cached (one mincore for the row) and has the kernel read
// them (FADV_WILLNEED of each run), without waiting: the program's kernel
// had read them ahead. Touching them made a python3 launch's replay wait
// 2.2 ms for 39 such pages (56 µs each) in 213 map rows that the program
// spent 0.4 ms in. A run with the effect observer touches them all
// (demand): the observer classifies a prefetched page at its first
// demand lookup, and a page never looked up would count as wasted.
func (d *pageCacheDemand) mapRow(w *worker, f *openFile, o *op, n uint64) error {
	ps := uint64(d.ps)
	mem, first, err := f.mapped(o, o.page, d.ps)
	if err != nil {
		return err
	}
	start := (o.page - first) * ps
	if start >= uint64(len(mem)) {
		return nil // past the mapping's end: the file shrank
	}
	end := min(start+n, uint64(len(mem)))
	pages := int((end - start + ps - 1) / ps)
	if cap(w.vec) < pages {
		w.vec = make([]byte, pages)
	}
	vec := w.vec[:pages]
	if mincore(mem[start:end], vec) != nil {
		clear(vec)
	}
	for i := 0; i < len(vec); {
		if vec[i]&1 != 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(vec) && vec[j]&1 == 0 {
			j++
		}
		off := int64(first*ps + start + uint64(i)*ps)
		if err := unix.Fadvise(f.fd, off, int64(j-i)*int64(ps), unix.FADV_WILLNEED); err != nil {
			for k := i; k < j; k++ { // no fadvise here: read them as before
				w.sink += mem[start+uint64(k)*ps]
			}
		}
		i = j
	}
	// Pages past this mapping (a row longer than the recorded range) go
	// through the file's other mappings.
	for p := end - start; p < n; p += ps {
		page := o.page + p/ps
		m, mf, err := f.mapped(o, page, d.ps)
		if err != nil {
			return err
		}
		w.sink += m[(page-mf)*ps]
	}
	return nil
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
// with dropCaches, /proc/sys/vm/drop_caches). What stays is the residue
// (measureResidue).
func evict(files []*openFile, dropCaches bool) error {
	for _, f := range files {
		if f != nil {
			f.withFD(func(fd int) error { return unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) })
		}
	}
	if dropCaches {
		unix.Sync()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
			return fmt.Errorf("drop caches: %w (needs root with CAP_SYS_ADMIN; leave out --drop-caches to evict with POSIX_FADV_DONTNEED only)", err)
		}
	}
	return nil
}
