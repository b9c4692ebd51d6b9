package replay

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/formats"
)

// openFile is one data file of a run. A file that the recording opened
// (an open row before its first access) is opened by the run when it
// replays that open, through the same path, so that its lookup and inode
// are as cold as the program's were; the others are opened before the run
// starts.
type openFile struct {
	info  *fileInfo
	path  string
	size  uint64
	dev   uint64   // kernel s_dev encoding, as backends and eBPF name files
	ino   uint64   //
	dfile *os.File // O_DIRECT, for the direct backend; nil otherwise
	lazy  bool     // opened during the run

	ready  atomic.Bool // file, fd and mem are set
	mu     sync.Mutex
	file   *os.File // buffered, for preads and fadvise
	fd     int      // file.Fd(), -1 until open
	mem    []byte   // read-only shared mapping of the whole file, for touches; nil for direct
	maps   map[mapKey]mapping
	mapErr error // why a recorded protection could not be mapped (the first time)
	early  bool  // a demand access opened it before its recorded open
}

// mapKey names a recorded mapping: its first file page, length in pages
// and protection (formats.Prot* bits).
type mapKey struct {
	first, pages uint64
	prot         uint8
}

type mapping struct {
	mem   []byte
	first uint64 // file page of mem[0]
}

// pages returns the file's size in ps-byte pages, rounded up: the page
// number of end of file.
func (f *openFile) pages(ps int) uint64 {
	return (f.size + uint64(ps) - 1) / uint64(ps)
}

// openFiles prepares every data file of a run: opened now, or (lazy, for
// files the recording opened) only stat'ed, to be opened by the run.
// direct opens O_DIRECT files instead of mappings, all of them now.
func openFiles(t *trace, paths []string, direct, lazy bool) ([]*openFile, error) {
	out := make([]*openFile, len(t.files))
	for _, f := range t.used() {
		of := &openFile{info: f, path: paths[f.idx], fd: -1, lazy: lazy && !direct && f.opened}
		out[f.idx] = of
		var st unix.Stat_t
		if err := unix.Stat(of.path, &st); err != nil {
			closeFiles(out)
			return nil, fmt.Errorf("stat %s: %w", of.path, err)
		}
		of.size, of.dev, of.ino = uint64(st.Size), formats.KernelDev(st.Dev), st.Ino
		if of.lazy {
			continue
		}
		if err := of.ensure(direct); err != nil {
			closeFiles(out)
			return nil, err
		}
		if direct {
			df, err := engine.OpenDirect(of.path, os.O_RDONLY)
			if err != nil {
				closeFiles(out)
				return nil, err
			}
			of.dfile = df
		}
	}
	return out, nil
}

// ensure opens the file (and maps it, unless direct) if it is not open.
func (f *openFile) ensure(direct bool) error {
	if f.ready.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready.Load() {
		return nil
	}
	fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", f.path, err)
	}
	f.early = f.lazy
	return f.install(fd, direct)
}

// adopt makes fd, opened by a replayed open of the file's path, the run's
// descriptor of the file if it has none yet; false when it has (the
// caller closes fd).
func (f *openFile) adopt(fd int) (bool, error) {
	if f.ready.Load() {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready.Load() {
		return false, nil
	}
	return true, f.install(fd, false)
}

// install sets the open file; called with mu held.
func (f *openFile) install(fd int, direct bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat %s: %w", f.path, err)
	}
	if formats.KernelDev(st.Dev) != f.dev || st.Ino != f.ino {
		unix.Close(fd)
		return fmt.Errorf("open %s: the path names another file than at the start of the run", f.path)
	}
	if !direct && f.size > 0 {
		mem, err := unix.Mmap(fd, 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("mmap %s: %w", f.path, err)
		}
		f.mem = mem
	}
	f.file, f.fd = os.NewFile(uintptr(fd), f.path), fd
	f.ready.Store(true)
	return nil
}

// withFD runs fn with the file's descriptor, or with a descriptor opened
// for the call when the run has not opened the file yet.
func (f *openFile) withFD(fn func(fd int) error) error {
	if f.ready.Load() {
		return fn(f.fd)
	}
	fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", f.path, err)
	}
	defer unix.Close(fd)
	return fn(fd)
}

// mapped returns the mapping a touch of page goes through: the recorded
// mapping (its range and protection, PROT_EXEC included, so that the
// kernel takes the same fault path and readahead) when o names one that
// holds page, else the whole-file read-only mapping. Where the recorded
// protection cannot be had (a noexec mount) it maps PROT_READ and notes
// why in mapErr. The file must be open.
func (f *openFile) mapped(o *op, page uint64, ps int) ([]byte, uint64) {
	if o.mapPages == 0 || page < o.mapFirst || page >= o.mapFirst+o.mapPages {
		return f.mem, 0
	}
	k := mapKey{first: o.mapFirst, pages: o.mapPages, prot: o.prot &^ formats.ProtWrite}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.maps[k]; ok {
		return m.mem, m.first
	}
	m, err := f.mapRange(k, ps)
	if err != nil {
		if f.mapErr == nil {
			f.mapErr = err
		}
		return f.mem, 0
	}
	if f.maps == nil {
		f.maps = map[mapKey]mapping{}
	}
	f.maps[k] = m
	return m.mem, m.first
}

// mapRange maps the recorded range, clipped at end of file; called with mu
// held.
func (f *openFile) mapRange(k mapKey, ps int) (mapping, error) {
	end := min(k.first+k.pages, f.pages(ps))
	if k.first >= end {
		return mapping{}, fmt.Errorf("map %s pages %d+%d: past end of file", f.path, k.first, k.pages)
	}
	prot := unix.PROT_READ
	if k.prot&formats.ProtExec != 0 {
		prot |= unix.PROT_EXEC
	}
	flags := unix.MAP_PRIVATE
	if k.prot&formats.ProtShared != 0 {
		flags = unix.MAP_SHARED
	}
	length := int(min((end-k.first)*uint64(ps), f.size-k.first*uint64(ps)))
	mem, err := unix.Mmap(f.fd, int64(k.first)*int64(ps), length, prot, flags)
	if errors.Is(err, unix.EPERM) && prot&unix.PROT_EXEC != 0 {
		// Mounted noexec: keep the range, lose the exec fault path.
		m, err2 := unix.Mmap(f.fd, int64(k.first)*int64(ps), length, unix.PROT_READ, flags)
		if err2 != nil {
			return mapping{}, fmt.Errorf("map %s: %w", f.path, err2)
		}
		if f.mapErr == nil {
			f.mapErr = fmt.Errorf("map %s PROT_EXEC: %w (a noexec mount?); mapped PROT_READ, so its faults take the read path, not the exec one", f.path, err)
		}
		return mapping{mem: m, first: k.first}, nil
	}
	if err != nil {
		return mapping{}, fmt.Errorf("map %s pages %d+%d: %w", f.path, k.first, k.pages, err)
	}
	return mapping{mem: mem, first: k.first}, nil
}

func closeFiles(fs []*openFile) {
	for _, f := range fs {
		if f == nil {
			continue
		}
		for k, m := range f.maps {
			unix.Munmap(m.mem)
			delete(f.maps, k)
		}
		if f.mem != nil {
			unix.Munmap(f.mem)
			f.mem = nil
		}
		if f.file != nil {
			f.file.Close()
			f.file, f.fd = nil, -1
		}
		if f.dfile != nil {
			f.dfile.Close()
			f.dfile = nil
		}
		f.ready.Store(false)
	}
}
