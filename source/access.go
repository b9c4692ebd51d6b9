package source

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// accessChecker answers whether a hint's sender may read a path with the
// kernel's own permission check: faccessat2(R_OK, AT_EACCESS) on a thread
// whose filesystem uid and gid and supplementary groups are the sender's.
// That covers directory search permission, ACLs and everything else the
// kernel checks for an open by that user, which the file's mode bits alone
// do not. Setting another fsuid drops the thread's filesystem capabilities
// (CAP_DAC_OVERRIDE and the like), so root's override does not leak into
// the check.
//
// The credentials are per thread (raw setfsuid, setfsgid and setgroups), so
// the checks run on one goroutine locked to its thread for its whole life:
// the thread exits with the goroutine and never runs other Go code. Needs
// CAP_SETUID and CAP_SETGID, and Linux 5.8 for faccessat2.
type accessChecker struct {
	reqs chan accessReq
	quit chan struct{} // closed by close
	done chan struct{} // closed when the checker thread has stopped
}

type accessReq struct {
	uid, gid uint32
	groups   []uint32
	path     string
	reply    chan accessRes
}

type accessRes struct {
	readable bool
	err      error // the check itself failed: fall back
}

// errAccessUnavailable says the checker thread cannot take on another
// user's credentials (or has lost its own), so callers fall back.
var errAccessUnavailable = errors.New("per-thread credential switch unavailable")

// newAccessChecker starts the checker thread. It returns an error when the
// thread cannot switch credentials (no CAP_SETUID/CAP_SETGID, or no
// faccessat2).
func newAccessChecker() (*accessChecker, error) {
	c := &accessChecker{reqs: make(chan accessReq), quit: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go c.loop(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// check reports whether uid, gid with the supplementary groups may read
// path.
func (c *accessChecker) check(uid, gid uint32, groups []uint32, path string) (bool, error) {
	reply := make(chan accessRes, 1)
	select {
	case c.reqs <- accessReq{uid: uid, gid: gid, groups: groups, path: path, reply: reply}:
	case <-c.done:
		return false, errAccessUnavailable
	}
	r := <-reply
	return r.readable, r.err
}

// close stops the checker; its thread exits.
func (c *accessChecker) close() {
	close(c.quit)
	<-c.done
}

// creds is one thread's filesystem credentials.
type creds struct {
	fsuid, fsgid uint32
	groups       []uint32
}

func (c *accessChecker) loop(started chan<- error) {
	defer close(c.done)
	// Never unlocked: this thread's credentials differ from the process's,
	// so it must not run other goroutines; it exits with this one.
	runtime.LockOSThread()
	orig, err := currentCreds()
	if err == nil {
		// Probe: become nobody and back, and check faccessat2 exists.
		err = setCreds(creds{fsuid: 65534, fsgid: 65534})
		if err == nil {
			_, err = faccessat2("/", unix.R_OK, unix.AT_EACCESS)
		}
		if rerr := setCreds(orig); rerr != nil {
			err = fmt.Errorf("restore credentials: %w", rerr)
		}
	}
	if err != nil {
		started <- fmt.Errorf("start hint access checker: %w", err)
		return
	}
	started <- nil
	for {
		var req accessReq
		select {
		case req = <-c.reqs:
		case <-c.quit:
			return
		}
		err := setCreds(creds{fsuid: req.uid, fsgid: req.gid, groups: req.groups})
		var ok bool
		if err == nil {
			ok, err = faccessat2(req.path, unix.R_OK, unix.AT_EACCESS)
		}
		if rerr := setCreds(orig); rerr != nil {
			// This thread is no longer the process's: stop serving
			// (check falls back once done is closed).
			req.reply <- accessRes{err: fmt.Errorf("restore credentials: %w", rerr)}
			return
		}
		req.reply <- accessRes{readable: ok, err: err}
	}
}

// currentCreds reads the calling thread's filesystem credentials.
func currentCreds() (creds, error) {
	var c creds
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0) // -1: query
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	c.fsuid, c.fsgid = uint32(uid), uint32(gid)
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if e != 0 {
		return c, fmt.Errorf("getgroups: %w", e)
	}
	if n > 0 {
		c.groups = make([]uint32, n)
		m, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&c.groups[0])), 0)
		if e != 0 {
			return c, fmt.Errorf("getgroups: %w", e)
		}
		c.groups = c.groups[:m]
	}
	return c, nil
}

// setCreds sets the calling thread's supplementary groups, fsgid and fsuid
// (in that order: the gid calls need CAP_SETGID, which a nonzero fsuid
// keeps) and verifies that they took.
func setCreds(c creds) error {
	var p uintptr
	if len(c.groups) > 0 {
		p = uintptr(unsafe.Pointer(&c.groups[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.groups)), p, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	runtime.KeepAlive(c.groups)
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.fsgid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.fsuid), 0, 0)
	// setfsuid/setfsgid report the previous value, not failure: query.
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	if uint32(uid) != c.fsuid || uint32(gid) != c.fsgid {
		return fmt.Errorf("set fsuid %d fsgid %d: still %d, %d (needs CAP_SETUID and CAP_SETGID)", c.fsuid, c.fsgid, uint32(uid), uint32(gid))
	}
	return nil
}

// faccessat2 checks path for mode with the thread's filesystem credentials
// (AT_EACCESS). It reports false for a permission or lookup failure, and
// an error only when the check could not be made. Needs Linux 5.8.
func faccessat2(path string, mode, flags int) (bool, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return false, nil // a NUL in the path: not a file anyone can read
	}
	dirfd := unix.AT_FDCWD
	_, _, e := unix.Syscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0)
	switch e {
	case 0:
		return true, nil
	case unix.EACCES, unix.EPERM, unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.ENAMETOOLONG:
		return false, nil
	case unix.ENOSYS:
		return false, fmt.Errorf("faccessat2: %w (needs Linux 5.8)", e)
	default:
		return false, fmt.Errorf("faccessat2: %w", e)
	}
}
