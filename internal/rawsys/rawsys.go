// Package rawsys makes the system calls that replay re-issues, and that
// benchmarks time, without telling the Go scheduler (RawSyscall), as a C
// program makes them.
//
// The runtime's wrappers (syscall.Syscall) hand the goroutine's P off when
// a call blocks for more than about 20 µs, and its monitor thread wakes
// to do so; on return the thread must take a P back. On a 2-vCPU VM
// (Linux 6.18, virtio-blk, 2026-12-07) a loop that opens, reads to the end
// and closes 4000 cold files of a Go source tree took 338.6 ms through the
// wrappers, 307.1 ms through these calls, and 302.2 ms in C (medians of 9
// rotated rounds, drop_caches before each): about 9 µs a file that a
// replay would add to every program it reproduces.
//
// A raw call keeps its P while it blocks: callers run on locked OS
// threads with GOMAXPROCS above their number, and a garbage collection
// waits for the call to return. Calls interrupted by a signal (EINTR)
// are retried.
package rawsys

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// atFDCWD is unix.AT_FDCWD as a system call argument.
const atFDCWD = ^uintptr(99) // -100

func dirArg(dirfd int) uintptr {
	if dirfd == unix.AT_FDCWD {
		return atFDCWD
	}
	return uintptr(dirfd)
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Pread is pread(2).
func Pread(fd int, b []byte, off int64) (int, error) { return bufCall(unix.SYS_PREAD64, fd, b, off) }

// Read is read(2).
func Read(fd int, b []byte) (int, error) { return bufCall(unix.SYS_READ, fd, b, 0) }

// Getdents is getdents64(2) into buf.
func Getdents(fd int, buf []byte) (int, error) { return bufCall(unix.SYS_GETDENTS64, fd, buf, 0) }

// bufCall makes system call nr(fd, b, len(b), off), made again after
// EINTR; calls of three arguments ignore off.
func bufCall(nr uintptr, fd int, b []byte, off int64) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		n, _, e := unix.RawSyscall6(nr, uintptr(fd), uintptr(p), uintptr(len(b)), uintptr(off), 0, 0)
		if e != unix.EINTR {
			return int(n), errnoErr(e)
		}
	}
}

// Fstat is fstat(2).
func Fstat(fd int, st *unix.Stat_t) error {
	_, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
	return errnoErr(e)
}

// Close is close(2).
func Close(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoErr(e)
}

// Sleep is nanosleep(2) of d, resumed after a signal.
func Sleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for {
		_, _, e := unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), uintptr(unsafe.Pointer(&ts)), 0)
		if e != unix.EINTR {
			return
		}
	}
}

// Paths makes the calls that take a path, from a buffer it reuses for
// the path's NUL-terminated copy: no allocation per call. The zero value
// is ready; one goroutine uses it at a time.
type Paths struct{ b []byte }

// cstr returns a NUL-terminated copy of s, or EINVAL for a path that
// holds a NUL byte.
func (p *Paths) cstr(s string) (unsafe.Pointer, error) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return nil, unix.EINVAL
		}
	}
	p.b = append(append(p.b[:0], s...), 0)
	return unsafe.Pointer(&p.b[0]), nil
}

// Openat is openat(2).
func (p *Paths) Openat(dirfd int, path string, flags int, mode uint32) (int, error) {
	s, err := p.cstr(path)
	if err != nil {
		return -1, err
	}
	for {
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, dirArg(dirfd), uintptr(s), uintptr(flags), uintptr(mode), 0, 0)
		if e != unix.EINTR {
			if e != 0 {
				return -1, e
			}
			return int(fd), nil
		}
	}
}

// Fstatat is fstatat(2) (newfstatat).
func (p *Paths) Fstatat(dirfd int, path string, st *unix.Stat_t, flags int) error {
	s, err := p.cstr(path)
	if err != nil {
		return err
	}
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, dirArg(dirfd), uintptr(s), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
		if e != unix.EINTR {
			return errnoErr(e)
		}
	}
}
