package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
)

// Reading files as the process that accessed them: the adapters' Files for
// the live runtime, the daemon and record (moved here from package live,
// so that record, which cannot import live, shares it).

// ErrNotReadable means the process a file is read for may not read it.
var ErrNotReadable = errors.New("the process may not read it")

// selfPID is this process's pid, as the source reports it for accesses of
// its own (and ProcessExec events for a command not started yet).
var selfPID = uint32(os.Getpid())

// ProcessFiles is the adapters.Files of a source's files: a file is
// opened (read-only, never through a symlink) only under its path in the
// accessing process's mount namespace, only if it is the file the access
// was observed on (device and inode), and, for a process other than this
// one, only if that process may read it (Access). The adapters' stage
// opens files for demand accesses only (reads, faults, fault-around of a
// mapping), which the process could make only if it could read the file:
// for a process that has exited since, the file is opened as this
// process, under this namespace's path, if it is still that file.
type ProcessFiles struct {
	// Src names the files: a *Source.
	Src interface {
		File(id uint32) (formats.File, bool)
	}
	// Access checks reads as another process; nil refuses every process
	// whose filesystem uid is neither 0 nor this process's.
	Access *AccessChecker
	// Creds caches processes' roots, credentials and read checks; nil
	// uses none.
	Creds *ProcCreds
}

// FileSize returns file's size as the source stat'ed it when the file was
// first seen (adapters.FileSizes), false when it has none.
func (f ProcessFiles) FileSize(file uint32) (uint64, bool) {
	if f.Src == nil {
		return 0, false
	}
	row, ok := f.Src.File(file)
	return row.Size, ok && row.Size > 0
}

// Open opens file for the adapters on behalf of process pid.
func (f ProcessFiles) Open(file, pid uint32) (adapters.Content, error) {
	if f.Src == nil {
		return nil, fmt.Errorf("open file %d: %w", file, adapters.ErrNoPath)
	}
	row, ok := f.Src.File(file)
	if !ok || row.Path == "" || row.Ino == 0 {
		return nil, fmt.Errorf("open file %d: %w", file, adapters.ErrNoPath)
	}
	creds := f.Creds
	if creds == nil {
		creds = &ProcCreds{}
	}
	root := ""
	var cred *Cred
	if pid != 0 && pid != selfPID {
		r, c, err := creds.Process(pid)
		switch {
		case err == nil:
			root, cred = r, c
		case errors.Is(err, os.ErrNotExist):
			// The process has exited since its access. The access
			// itself (a read, or a fault of a readable mapping) shows
			// it could read the file; the device and inode check below
			// makes sure this is that file.
		default:
			return nil, fmt.Errorf("open %s for pid %d: %w", row.Path, pid, err)
		}
	}
	path, ok := Canonical(root, row.Path, row.Dev, row.Ino)
	if !ok {
		return nil, fmt.Errorf("open %s for pid %d: the path names another file now", row.Path, pid)
	}
	path = root + path
	if cred != nil {
		yes, err := creds.MayRead(f.Access, cred, path)
		if err != nil {
			return nil, fmt.Errorf("open %s for pid %d: %w", path, pid, err)
		}
		if !yes {
			return nil, fmt.Errorf("open %s for pid %d: %w", path, pid, ErrNotReadable)
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || formats.KernelDev(st.Dev) != row.Dev || st.Ino != row.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: not the file the access was observed on", path)
	}
	return adapters.OSContent{File: os.NewFile(uintptr(fd), path)}, nil
}

// ProcRoot returns the prefix under which paths of process pid resolve as
// they do for it: "" when it shares this process's mount namespace and
// root, else "/proc/PID/root". Two readlinks.
func ProcRoot(pid int) (string, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	ns, err := os.Readlink(dir + "/ns/mnt")
	if err != nil {
		return "", fmt.Errorf("read mount namespace of pid %d: %w", pid, err)
	}
	if ns == selfMountNS() {
		// Same namespace; a chroot'ed process still has a root of its own.
		if r, err := os.Readlink(dir + "/root"); err == nil && r == "/" {
			return "", nil
		}
	}
	return dir + "/root", nil
}

var selfMountNS = sync.OnceValue(func() string {
	ns, _ := os.Readlink("/proc/self/ns/mnt")
	return ns
})

// ResolveInRoot returns path with every symlink resolved as process pid's
// kernel would, inside root (ProcRoot's prefix; "" for this process's):
// absolute links restart at root, ".." stops at it. It returns the path
// relative to root (starting with /), and fails past 40 links.
func ResolveInRoot(root, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("resolve %q: not absolute", path)
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	var out []string
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			continue
		}
		cur := "/" + strings.Join(append(out, c), "/")
		target, err := os.Readlink(root + cur)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) && errors.Is(pe.Err, unix.EINVAL) {
				out = append(out, c) // not a symlink
				continue
			}
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		if links++; links > 40 {
			return "", fmt.Errorf("resolve %s: %w", path, unix.ELOOP)
		}
		if filepath.IsAbs(target) {
			out = out[:0]
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return "/" + strings.Join(out, "/"), nil
}

// Canonical returns the symlink-free path, inside root, of the regular
// file with kernel device dev and inode ino that path names for a process
// whose root is root, or false when path does not name that file now.
func Canonical(root, path string, dev, ino uint64) (string, bool) {
	var st unix.Stat_t
	if root == "" && unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		if formats.KernelDev(st.Dev) == dev && st.Ino == ino {
			return path, true
		}
		return "", false
	}
	p, err := ResolveInRoot(root, path)
	if err != nil || unix.Lstat(root+p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		formats.KernelDev(st.Dev) != dev || st.Ino != ino {
		return "", false
	}
	return p, true
}

// ProcCreds caches processes' roots and credentials, and read checks, for
// a short while (credTTL): a launch checks hundreds of files for one
// process. The zero value is ready to use; it is safe for concurrent use.
type ProcCreds struct {
	mu     sync.Mutex
	procs  map[uint32]procInfo
	checks map[checkKey]checkRes
}

type procInfo struct {
	root string
	cred Cred
	at   time.Time
}

type checkKey struct {
	uid, gid uint32
	groups   string
	path     string
}

type checkRes struct {
	ok bool
	at time.Time
}

// credTTL is how long a process's credentials and a read check are reused.
const credTTL = 2 * time.Second

// Process returns pid's root prefix (ProcRoot) and credentials (ProcCred).
func (c *ProcCreds) Process(pid uint32) (string, *Cred, error) {
	c.mu.Lock()
	p, ok := c.procs[pid]
	c.mu.Unlock()
	if ok && time.Since(p.at) < credTTL {
		return p.root, &p.cred, nil
	}
	root, err := ProcRoot(int(pid))
	if err != nil {
		return "", nil, err
	}
	cred, err := ProcCred(int(pid))
	if err != nil {
		return "", nil, err
	}
	p = procInfo{root: root, cred: cred, at: time.Now()}
	c.mu.Lock()
	if c.procs == nil || len(c.procs) > 4096 {
		c.procs = map[uint32]procInfo{}
	}
	c.procs[pid] = p
	c.mu.Unlock()
	return root, &p.cred, nil
}

// MayRead checks that cred may read path: with the kernel's check as that
// user (ac), or, without a checker, only for this process's own uid
// (anybody else is refused: the caller cannot check for them).
func (c *ProcCreds) MayRead(ac *AccessChecker, cred *Cred, path string) (bool, error) {
	if cred.UID == 0 {
		return true, nil
	}
	if ac == nil {
		return cred.UID == uint32(os.Geteuid()), nil
	}
	k := checkKey{uid: cred.UID, gid: cred.GID, groups: fmt.Sprint(cred.Groups), path: path}
	c.mu.Lock()
	r, ok := c.checks[k]
	c.mu.Unlock()
	if ok && time.Since(r.at) < credTTL {
		return r.ok, nil
	}
	yes, err := ac.MayRead(*cred, path)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if c.checks == nil || len(c.checks) > 65536 {
		c.checks = map[checkKey]checkRes{}
	}
	c.checks[k] = checkRes{ok: yes, at: time.Now()}
	c.mu.Unlock()
	return yes, nil
}
