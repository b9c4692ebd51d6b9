package live

import (
	"fmt"
	"sync/atomic"

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
		r, c, err := l.creds.Process(pid)
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

// credCache is source.ProcCreds (processes' roots, credentials and read
// checks, cached a short while: a launch checks hundreds of files for one
// process) with the launch profiles' counters.
type credCache struct {
	source.ProcCreds
	named, checked, changed, denied, errors atomic.Uint64
}

func (c *credCache) stats() ProfileFileStats {
	return ProfileFileStats{Named: c.named.Load(), Checked: c.checked.Load(), Changed: c.changed.Load(), Denied: c.denied.Load(), Errors: c.errors.Load()}
}

// ProcRoot is source.ProcRoot.
func ProcRoot(pid int) (string, error) { return source.ProcRoot(pid) }

// ResolveInRoot is source.ResolveInRoot.
func ResolveInRoot(root, path string) (string, error) { return source.ResolveInRoot(root, path) }
