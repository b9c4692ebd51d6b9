package live

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/source"
)

// ErrNotReadable means the process an adapter reads a file for may not
// read it.
var ErrNotReadable = errors.New("the process may not read it")

// AdapterFiles returns the adapters.Files of the loop's source files: a
// file is opened (read-only, never through a symlink) only under its path
// in the accessing process's mount namespace, only if it is the file the
// access was observed on (device and inode), and, for a process other
// than this one, only if that process may read it (Config.Access). The
// stage opens files for demand accesses only (reads, faults, fault-around
// of a mapping), which the process could make only if it could read the
// file: for a process that has exited since, the file is opened as this
// process, under this namespace's path, if it is still that file.
func (l *Loop) AdapterFiles() adapters.Files { return loopFiles{l} }

type loopFiles struct{ l *Loop }

func (f loopFiles) Open(file, pid uint32) (adapters.Content, error) {
	l := f.l
	if l.src == nil || file >= profileBase {
		return nil, fmt.Errorf("open file %d: %w", file, adapters.ErrNoPath)
	}
	row, ok := l.src.File(file)
	if !ok || row.Path == "" || row.Ino == 0 {
		return nil, fmt.Errorf("open file %d: %w", file, adapters.ErrNoPath)
	}
	root := ""
	var cred *source.Cred
	if pid != 0 && pid != selfPID {
		r, c, err := l.creds.process(pid)
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
		yes, err := l.creds.mayRead(l.cfg.Access, cred, path)
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
