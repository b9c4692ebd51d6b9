package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
)

// ErrChanged means a registered path no longer names the registered file:
// its device or inode differ, it became a symlink or it is gone. The
// backend reads nothing from it.
var ErrChanged = errors.New("file changed since it was registered")

// ErrUnknownFile means a request named a file id that is not registered.
var ErrUnknownFile = errors.New("file id not registered")

// ErrRetired means a queued request's file was unregistered (the program
// is done with it) before the backend got to the request: a stale
// request, counted but not a failure.
var ErrRetired = fmt.Errorf("%w any more: unregistered while the request was queued", ErrUnknownFile)

// ErrClosed means the backend or registry was closed.
var ErrClosed = errors.New("backend closed")

// FileRef names a file the way requests, bundles and eBPF events do.
type FileRef struct {
	// ID is the caller's file id: the File of the requests that name it.
	ID uint32
	// Dev is the device in the kernel's s_dev encoding (major<<20 | minor,
	// formats.KernelDev), as in bundles and tracepoints.
	Dev uint64
	// Ino is the inode number; it must not be 0.
	Ino uint64
	// Path is the absolute path the file is opened by.
	Path string
}

func (r FileRef) String() string {
	return fmt.Sprintf("%s (file id %d, dev %d:%d, ino %d)", r.Path, r.ID, r.Dev>>20, r.Dev&(1<<20-1), r.Ino)
}

// OpenFunc opens a registered file for reading. flags are added to
// O_RDONLY|O_CLOEXEC|O_NOFOLLOW (O_DIRECT for the direct backend). The
// registry checks the result's device and inode itself. The daemon passes
// one that opens through /proc/PID/root and checks access as the process.
type OpenFunc func(ref FileRef, flags int) (*os.File, error)

// openPath is the default OpenFunc: open(2) of the path, refusing a
// symlink in its last component.
func openPath(ref FileRef, flags int) (*os.File, error) {
	fd, err := unix.Open(ref.Path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|flags, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("open %s: %w: the path is a symlink now", ref.Path, ErrChanged)
		}
		return nil, fmt.Errorf("open %s: %w", ref.Path, err)
	}
	return os.NewFile(uintptr(fd), ref.Path), nil
}

// Registry maps file ids to files that backends prefetch from. Files are
// opened as requests name them (never at Add), by path, and the open file
// must be the registered (dev, ino): a path whose file was replaced, or
// that became a symlink, is never read. Before each prefetch a backend
// re-checks the path with lstat(2), so a file replaced after it was opened
// stops being prefetched too. A Registry is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	files  map[uint32]*File
	open   OpenFunc
	closed bool
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*Registry)

// WithOpener replaces how files are opened (default: open(2) of the path
// with O_NOFOLLOW).
func WithOpener(fn OpenFunc) RegistryOption { return func(r *Registry) { r.open = fn } }

// NewRegistry returns an empty registry.
func NewRegistry(opts ...RegistryOption) *Registry {
	r := &Registry{files: make(map[uint32]*File), open: openPath}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Add registers ref. It opens nothing.
func (r *Registry) Add(ref FileRef) (*File, error) {
	switch {
	case ref.Ino == 0:
		return nil, fmt.Errorf("register %s: inode 0: the file's identity is unknown", ref)
	case !filepath.IsAbs(ref.Path):
		return nil, fmt.Errorf("register file id %d: path %q is not absolute", ref.ID, ref.Path)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("register %s: %w", ref, ErrClosed)
	}
	if _, dup := r.files[ref.ID]; dup {
		return nil, fmt.Errorf("register %s: file id %d is registered already", ref, ref.ID)
	}
	f := &File{ref: ref, reg: r}
	r.files[ref.ID] = f
	return f, nil
}

// Remove unregisters id. Its descriptor closes once no prefetch uses it.
func (r *Registry) Remove(id uint32) error {
	r.mu.Lock()
	f := r.files[id]
	delete(r.files, id)
	r.mu.Unlock()
	if f == nil {
		return fmt.Errorf("unregister file id %d: %w", id, ErrUnknownFile)
	}
	f.retire()
	return nil
}

// Lookup returns the file registered as id, or nil.
func (r *Registry) Lookup(id uint32) *File {
	r.mu.RLock()
	f := r.files[id]
	r.mu.RUnlock()
	return f
}

// Files returns the registered files in id order.
func (r *Registry) Files() []*File {
	r.mu.RLock()
	out := make([]*File, 0, len(r.files))
	for _, f := range r.files {
		out = append(out, f)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ref.ID < out[j].ref.ID })
	return out
}

// Len is the number of registered files.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.files)
}

// Close unregisters every file; descriptors close once no prefetch uses
// them. Close the backends first.
func (r *Registry) Close() error {
	r.mu.Lock()
	fs := r.files
	r.files = map[uint32]*File{}
	r.closed = true
	r.mu.Unlock()
	for _, f := range fs {
		f.retire()
	}
	return nil
}

// File is one registered file. Its descriptor is opened by the first
// prefetch that needs it.
type File struct {
	ref FileRef
	reg *Registry

	mu      sync.Mutex
	file    *os.File // buffered, read-only
	dfile   *os.File // O_DIRECT (direct backend), opened by OpenDirect
	size    uint64   // at the last open or check
	mem     []byte   // PROT_READ shared mapping for mincore; nil until needed
	err     error    // sticky: the file changed or could not be opened
	retired bool
	users   int // acquire calls not yet released
}

// Ref returns what the file was registered as.
func (f *File) Ref() FileRef { return f.ref }

// Err returns why the file is not prefetched any more, or nil.
func (f *File) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// acquire opens the file if needed, re-checks its path when check is set,
// and returns its descriptor and size, and whether it opened the file. The
// descriptor stays open until the matching release. A failure is sticky: a
// changed file is never reopened.
func (f *File) acquire(check bool) (fd int, size uint64, opened bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.retired {
		return -1, 0, false, fmt.Errorf("prefetch %s: %w", f.ref, ErrRetired)
	}
	if f.err != nil {
		return -1, 0, false, f.err
	}
	if f.file == nil {
		file, size, err := f.openChecked(0)
		if err != nil {
			f.err = err
			return -1, 0, true, err
		}
		f.file, f.size, opened = file, size, true
	} else if check {
		if err := f.checkPath(); err != nil {
			f.err = err
			return -1, 0, false, err
		}
	}
	f.users++
	return int(f.file.Fd()), f.size, opened, nil
}

// release ends an acquire; the last one after retirement closes the file.
func (f *File) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users--
	if f.retired && f.users == 0 {
		f.closeLocked()
	}
}

// retire marks the file unregistered and closes it when unused.
func (f *File) retire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retired = true
	if f.users == 0 {
		f.closeLocked()
	}
}

func (f *File) closeLocked() {
	if f.mem != nil {
		unix.Munmap(f.mem)
		f.mem = nil
	}
	if f.file != nil {
		f.file.Close()
		f.file = nil
	}
	if f.dfile != nil {
		f.dfile.Close()
		f.dfile = nil
	}
}

// openChecked opens the file with the registry's opener and checks that it
// is the registered regular file.
func (f *File) openChecked(flags int) (*os.File, uint64, error) {
	file, err := f.reg.open(f.ref, flags)
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(file.Fd()), &st); err != nil {
		file.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", f.ref.Path, err)
	}
	if err := f.same(&st); err != nil {
		file.Close()
		return nil, 0, err
	}
	return file, uint64(st.Size), nil
}

// checkPath re-checks with lstat that the path still names the open file,
// and refreshes its size. Called with mu held.
func (f *File) checkPath() error {
	var st unix.Stat_t
	if err := unix.Lstat(f.ref.Path, &st); err != nil {
		return fmt.Errorf("check %s: %w: %v", f.ref, ErrChanged, err)
	}
	if err := f.same(&st); err != nil {
		return err
	}
	f.size = uint64(st.Size)
	return nil
}

// same reports whether st is the registered regular file.
func (f *File) same(st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("check %s: %w: not a regular file (mode %#o)", f.ref, ErrChanged, st.Mode)
	}
	if dev := formats.KernelDev(st.Dev); dev != f.ref.Dev || st.Ino != f.ref.Ino {
		return fmt.Errorf("check %s: %w: the path names dev %d:%d ino %d now", f.ref, ErrChanged, dev>>20, dev&(1<<20-1), st.Ino)
	}
	return nil
}

// OpenDirect opens the file with O_DIRECT for the direct backend (once)
// and returns it; the registry closes it.
func (f *File) OpenDirect() (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.dfile == nil {
		file, size, err := f.openChecked(unix.O_DIRECT)
		if err != nil {
			f.err = err
			return nil, err
		}
		f.dfile, f.size = file, size
	}
	return f.dfile, nil
}

// residentVec fills vec[i] with 1 where page first+i is in the page cache
// and up to date (mincore of a read-only mapping, made on first use), and
// 0 elsewhere. Needs an acquired file.
func (f *File) residentVec(first uint64, vec []byte, ps int) error {
	f.mu.Lock()
	if f.mem == nil && f.size > 0 {
		mem, err := unix.Mmap(int(f.file.Fd()), 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			f.mu.Unlock()
			return fmt.Errorf("map %s: %w", f.ref.Path, err)
		}
		f.mem = mem
	}
	mem := f.mem
	f.mu.Unlock()
	clear(vec)
	off := first * uint64(ps)
	if off >= uint64(len(mem)) {
		return nil
	}
	region := mem[off:]
	if n := uint64(len(vec)) * uint64(ps); uint64(len(region)) > n {
		region = region[:n]
	}
	if err := mincore(region, vec); err != nil {
		return err
	}
	for i := range vec {
		vec[i] &= 1
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
