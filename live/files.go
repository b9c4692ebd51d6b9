package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// ProfileFileStats count what became of the launch profiles' files.
type ProfileFileStats struct {
	Named   uint64 // named for a prefetch by the launch policy
	Checked uint64 // checked unchanged and readable: prefetched
	Changed uint64 // changed since learned (size, mtime, device, inode, or gone): not prefetched
	Denied  uint64 // the launch's process may not read them (or list the directory): not prefetched
	Errors  uint64 // the check itself failed (process gone, no credentials): not prefetched
}

// LaunchFile is the loop's policies.Env.LaunchFile: it names the file of
// a profile's step for a prefetch on behalf of process pid (0 or this
// process: the runtime's own command, not started yet). It does no I/O:
// the launch workers check each named file before anything is read (see
// launchWorkers.check): its path, resolved in pid's mount namespace
// (through /proc/PID/root when it differs from this process's), must
// still name what was learned, and another process must be allowed to
// read it.
func (l *Loop) LaunchFile(pid uint32, step *policies.LaunchStep) (uint32, bool) {
	f := step.File
	root := ""
	var cred *source.Cred
	if pid != 0 && pid != selfPID {
		r, c, err := l.creds.process(pid)
		if err != nil {
			l.creds.errors.Add(1)
			return 0, false
		}
		root, cred = r, c
	}
	path := root + f.Path
	l.pmu.Lock()
	defer l.pmu.Unlock()
	k := profKey{path: path, dev: f.Dev, ino: f.Ino}
	if id, ok := l.profByID[k]; ok {
		p := l.prof[id]
		p.cred, p.kinds = cred, step.Kinds
		l.creds.named.Add(1)
		return id, true
	}
	id := l.nextProf
	if !f.PathOnly() && !f.IsDir() {
		if _, err := l.reg.Add(backend.FileRef{ID: id, Dev: f.Dev, Ino: f.Ino, Path: path}); err != nil {
			l.creds.errors.Add(1)
			return 0, false
		}
		l.watch(id, f.Dev, f.Ino)
	}
	l.nextProf++
	l.prof[id] = &profFile{f: *f, path: path, cred: cred, kinds: step.Kinds}
	l.profByID[k] = id
	l.creds.named.Add(1)
	return id, true
}

// checkUnchanged reports why path is not f as learned: a regular file (not
// a symlink) with its device, inode, size and mtime; a directory with its
// device and inode (its entries may change); for a failed lookup, still
// nothing.
func checkUnchanged(path string, f *policies.LaunchFile) error {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	switch {
	case f.PathOnly():
		if err == nil {
			return fmt.Errorf("%s: exists now", path)
		}
		return nil
	case err != nil:
		return err
	case f.IsDir():
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || formats.KernelDev(st.Dev) != f.Dev || st.Ino != f.Ino {
			return fmt.Errorf("%s: not the learned directory", path)
		}
		return nil
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s: not a regular file", path)
	case formats.KernelDev(st.Dev) != f.Dev || st.Ino != f.Ino:
		return fmt.Errorf("%s: another file (inode %d, was %d)", path, st.Ino, f.Ino)
	case uint64(st.Size) != f.Size || st.Mtim.Nano() != f.MtimeNS:
		return fmt.Errorf("%s: modified", path)
	}
	return nil
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

// credCache caches processes' roots and credentials, and read checks, for
// a short while: a launch checks hundreds of files for one process.
type credCache struct {
	mu                                      sync.Mutex
	procs                                   map[uint32]procInfo
	checks                                  map[checkKey]checkRes
	named, checked, changed, denied, errors atomic.Uint64
}

type procInfo struct {
	root string
	cred source.Cred
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

func (c *credCache) init() {
	c.procs = map[uint32]procInfo{}
	c.checks = map[checkKey]checkRes{}
}

func (c *credCache) stats() ProfileFileStats {
	return ProfileFileStats{Named: c.named.Load(), Checked: c.checked.Load(), Changed: c.changed.Load(), Denied: c.denied.Load(), Errors: c.errors.Load()}
}

// process returns pid's root prefix and credentials.
func (c *credCache) process(pid uint32) (string, *source.Cred, error) {
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
	cred, err := source.ProcCred(int(pid))
	if err != nil {
		return "", nil, err
	}
	p = procInfo{root: root, cred: cred, at: time.Now()}
	c.mu.Lock()
	if len(c.procs) > 4096 {
		clear(c.procs)
	}
	c.procs[pid] = p
	c.mu.Unlock()
	return root, &p.cred, nil
}

// mayRead checks that cred may read path: with the kernel's check as that
// user (ac), or, without a checker, only for this process's own uid
// (anybody else is refused: the runtime cannot check for them).
func (c *credCache) mayRead(ac *source.AccessChecker, cred *source.Cred, path string) (bool, error) {
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
	if len(c.checks) > 65536 {
		clear(c.checks)
	}
	c.checks[k] = checkRes{ok: yes, at: time.Now()}
	c.mu.Unlock()
	return yes, nil
}
