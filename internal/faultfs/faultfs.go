// Package faultfs serves read-only files through FUSE and fails the reads
// of chosen byte ranges with EIO: device errors for the tests of replay,
// the backends and the live runtime, on a machine without device-mapper.
//
// Each file is backed by an ordinary file; a read request that overlaps one
// of the file's fault ranges fails whole with EIO, any other is served from
// the backing file. What a program sees depends on the open mode:
//
//   - through the page cache (the default), the kernel reads whole pages,
//     and readahead may ask for the pages around the ones read: a read(2)
//     of any page that overlaps a fault fails with EIO, a read of other
//     pages succeeds (a readahead request that overlapped a fault fails
//     quietly, and the kernel reads the good pages again on demand), and a
//     page-cache hit never reaches faultfs. mmap faults on a bad page raise
//     SIGBUS.
//   - with O_DIRECT, or Options.DirectIO (FOPEN_DIRECT_IO, every open
//     bypasses the cache), each read(2) is one request with the caller's
//     offset and length.
//
// Needs /dev/fuse and CAP_SYS_ADMIN (faultfs mounts with mount(2) itself;
// fusermount is not used).
package faultfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Range is a byte range [Off, Off+Len).
type Range struct {
	Off, Len int64
}

func (r Range) overlaps(off, n int64) bool {
	return n > 0 && r.Len > 0 && off < r.Off+r.Len && r.Off < off+n
}

// File is one file of a faultfs mount.
type File struct {
	Name    string  // name in the mount's root directory
	Backing string  // path of the file whose bytes it serves
	Faults  []Range // reads overlapping these fail with EIO
}

// Options configures Mount.
type Options struct {
	// DirectIO opens every file with FOPEN_DIRECT_IO: no page cache, each
	// read(2) reaches faultfs as it was made.
	DirectIO bool
	// MaxReadAhead bounds the kernel's readahead requests in bytes; 0
	// keeps the FUSE default (128 KiB on most kernels).
	MaxReadAhead int
}

// Stats counts what a mount served.
type Stats struct {
	Reads  uint64 // read requests
	Bytes  uint64 // bytes served
	Faults uint64 // read requests failed with EIO
}

// FS is a mounted faultfs.
type FS struct {
	// Dir is the mount point.
	Dir string

	server *fuse.Server
	mu     sync.RWMutex
	files  map[string]*node

	reads, bytes, faults atomic.Uint64
}

// ErrNoFUSE is wrapped by Mount's error when the kernel has no FUSE
// (/dev/fuse missing) or the process may not mount it.
var ErrNoFUSE = errors.New("FUSE unavailable")

// Mount mounts files on dir, an existing empty directory, and serves them
// until Unmount.
func Mount(dir string, files []File, opt Options) (*FS, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("mount faultfs: %w: %v: the kernel has no FUSE", ErrNoFUSE, err)
	}
	f := &FS{Dir: dir, files: map[string]*node{}}
	for i, file := range files {
		st, err := os.Stat(file.Backing)
		if err != nil {
			return nil, fmt.Errorf("mount faultfs: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("mount faultfs: backing %s is not a regular file", file.Backing)
		}
		if _, dup := f.files[file.Name]; dup || file.Name == "" {
			return nil, fmt.Errorf("mount faultfs: file name %q is empty or repeated", file.Name)
		}
		f.files[file.Name] = &node{fs: f, ino: uint64(i + 2), backing: file.Backing, faults: append([]Range(nil), file.Faults...), direct: opt.DirectIO}
	}
	timeout := time.Hour // files never change behind the kernel's back
	o := &fs.Options{
		EntryTimeout: &timeout, AttrTimeout: &timeout,
		MountOptions: fuse.MountOptions{
			FsName: "faultfs", Name: "faultfs",
			DirectMountStrict: true, // as root, without fusermount
			MaxReadAhead:      opt.MaxReadAhead,
			DisableXAttrs:     true,
		},
	}
	srv, err := fs.Mount(dir, &root{fs: f}, o)
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("mount faultfs on %s: %w: %v: needs CAP_SYS_ADMIN", dir, ErrNoFUSE, err)
		}
		return nil, fmt.Errorf("mount faultfs on %s: %w", dir, err)
	}
	f.server = srv
	return f, nil
}

// Path returns the path of the named file in the mount.
func (f *FS) Path(name string) string { return f.Dir + "/" + name }

// SetFaults replaces the fault ranges of the named file. Pages already in
// the page cache stay readable.
func (f *FS) SetFaults(name string, faults []Range) error {
	n := f.files[name]
	if n == nil {
		return fmt.Errorf("faultfs: no file %q", name)
	}
	f.mu.Lock()
	n.faults = append([]Range(nil), faults...)
	f.mu.Unlock()
	return nil
}

// Stats returns the counters of the mount.
func (f *FS) Stats() Stats {
	return Stats{Reads: f.reads.Load(), Bytes: f.bytes.Load(), Faults: f.faults.Load()}
}

// Unmount unmounts the filesystem and stops serving it. When files are
// still open it detaches the mount (MNT_DETACH): their reads then fail.
func (f *FS) Unmount() error {
	if err := f.server.Unmount(); err != nil {
		if err2 := unix.Unmount(f.Dir, unix.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount faultfs %s: %w", f.Dir, err)
		}
	}
	f.server.Wait()
	return nil
}

// root is the mount's root directory.
type root struct {
	fs.Inode
	fs *FS
}

var _ fs.NodeOnAdder = (*root)(nil)

func (r *root) OnAdd(ctx context.Context) {
	for name, n := range r.fs.files {
		ch := r.NewPersistentInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG, Ino: n.ino})
		r.AddChild(name, ch, false)
	}
}

// node is one file.
type node struct {
	fs.Inode
	fs      *FS
	ino     uint64
	backing string
	direct  bool
	faults  []Range // guarded by fs.mu
}

var (
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
)

// Getattr reports the backing file's size and times, read-only.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Stat(n.backing, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = n.ino
	out.Mode = syscall.S_IFREG | 0o444
	return 0
}

// Open opens the backing file read-only.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	fd, err := syscall.Open(n.backing, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	fl := uint32(fuse.FOPEN_KEEP_CACHE)
	if n.direct {
		fl = fuse.FOPEN_DIRECT_IO
	}
	return &handle{n: n, fd: fd}, fl, 0
}

// handle is one open file.
type handle struct {
	n  *node
	fd int
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

// Read fails with EIO when [off, off+len(dest)) overlaps a fault range and
// serves the backing file's bytes otherwise.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f := h.n.fs
	f.reads.Add(1)
	f.mu.RLock()
	for _, r := range h.n.faults {
		if r.overlaps(off, int64(len(dest))) {
			f.mu.RUnlock()
			f.faults.Add(1)
			return nil, syscall.EIO
		}
	}
	f.mu.RUnlock()
	n, err := syscall.Pread(h.fd, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	f.bytes.Add(uint64(n))
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return fs.ToErrno(syscall.Close(h.fd))
}

// MountT mounts files on a fresh directory for the test and unmounts them
// when it ends. Where the kernel has no FUSE or the test may not mount it,
// the test is skipped with the reason.
func MountT(t testing.TB, files []File, opt Options) *FS {
	t.Helper()
	f, err := Mount(t.TempDir(), files, opt)
	if errors.Is(err, ErrNoFUSE) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return f
}
