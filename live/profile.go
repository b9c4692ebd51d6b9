package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// Profile directories hold one launch profile per program
// (policies.LaunchProfileName), written by this package only.

// ErrProfileDir means a profile directory is unsafe to use: not a
// directory, owned by another user, or writable by group or others.
var ErrProfileDir = errors.New("unsafe profile directory")

// OpenProfileDir creates dir (mode 0700, parents 0755) if missing and
// checks that it is a directory owned by this process's user with no
// group or other permissions, so that no other user can plant or read
// a profile.
func OpenProfileDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create profile directory %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create profile directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("check profile directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("check profile directory %s: %w: not a directory (a symlink is refused too)", dir, ErrProfileDir)
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("check profile directory %s: %w: owned by uid %d, not %d", dir, ErrProfileDir, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return fmt.Errorf("check profile directory %s: %w: mode %#o lets others in; run chmod 0700 %s", dir, ErrProfileDir, st.Mode&0o777, dir)
	}
	return nil
}

// ProfilePath returns the file of program's profile in dir.
func ProfilePath(dir, program string) string {
	return filepath.Join(dir, policies.LaunchProfileName(program))
}

// LoadProfile reads program's profile from dir. A missing profile is
// (nil, nil); a damaged one an error wrapping policies.ErrLaunchProfile
// (the caller relearns: the next save replaces it).
func LoadProfile(dir, program string) (*policies.LaunchProfile, error) {
	p, err := policies.ReadLaunchProfile(ProfilePath(dir, program))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.Program.Path != program {
		return nil, fmt.Errorf("read launch profile %s: %w: it is %s's, not %s's", ProfilePath(dir, program), policies.ErrLaunchProfile, p.Program.Path, program)
	}
	return p, nil
}

// SaveProfile writes p into dir atomically (EncodeProfile, then
// WriteProfile).
func SaveProfile(dir string, p *policies.LaunchProfile, maxBytes int) error {
	return WriteProfile(dir, p.Program.Path, EncodeProfile(p, maxBytes))
}

// EncodeProfile returns p in its file format, first trimming it to at
// most maxBytes (0: 16 MiB) by dropping the newest launches'
// last-touched files.
func EncodeProfile(p *policies.LaunchProfile, maxBytes int) []byte {
	if maxBytes <= 0 {
		maxBytes = 16 << 20
	}
	b := policies.EncodeLaunchProfile(p)
	for len(b) > maxBytes && len(p.Launches) > 0 {
		ranges := 0
		for _, l := range p.Launches {
			for _, t := range l.Touches {
				ranges += len(t.Ranges) + 1
			}
		}
		p.TrimRanges(ranges * 3 / 4)
		b = policies.EncodeLaunchProfile(p)
	}
	return b
}

// WriteProfile writes program's encoded profile b into dir atomically
// (WriteAtomic).
func WriteProfile(dir, program string, b []byte) error {
	if err := WriteAtomic(dir, filepath.Base(ProfilePath(dir, program)), b); err != nil {
		return fmt.Errorf("save launch profile: %w", err)
	}
	return nil
}

// WriteAtomic writes b into dir/name atomically: a temporary file (mode
// 0600) written and fsync'ed, renamed over name, the directory fsync'ed.
// A reader, a crash or a kill sees the old file or the new one, never a
// part of one.
func WriteAtomic(dir, name string, b []byte) error {
	path := filepath.Join(dir, name)
	tmp := filepath.Join(dir, "."+name+tmpMark+strconv.Itoa(os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrExist) { // left by a killed process of the same pid
		os.Remove(tmp)
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// tmpMark marks the temporary files of WriteAtomic.
const tmpMark = ".tmp"

// RemoveStaleTemps removes the temporary files that writers killed
// before their rename left in dir.
func RemoveStaleTemps(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, ".*"+tmpMark+"*"))
	for _, n := range names {
		os.Remove(n)
	}
}

// StatFile returns the LaunchFile of path as it is now (resolved in root,
// ProcRoot's prefix): a regular file or directory, or, when it does not
// exist, a failed lookup.
func StatFile(root, path string) (policies.LaunchFile, error) {
	var st unix.Stat_t
	if err := unix.Stat(root+path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return policies.LaunchFile{Path: path}, nil
		}
		return policies.LaunchFile{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return launchFileOf(path, &st), nil
}

func launchFileOf(path string, st *unix.Stat_t) policies.LaunchFile {
	return policies.LaunchFile{Path: path, Dev: formats.KernelDev(st.Dev), Ino: st.Ino, Size: uint64(st.Size), MtimeNS: st.Mtim.Nano(), Mode: st.Mode}
}

// mtimeSlack covers the coarse clock of file timestamps (a jiffy, up to
// 10 ms at HZ=100): a file written just after since may carry an mtime
// slightly before it.
const mtimeSlack = 20 * time.Millisecond

// ResolveLearned is Resolve for a launch being learned that began at
// since: it also leaves out what the launch itself created or wrote (a
// regular file modified since it began, a failed lookup of a path that
// exists now). Such a file is the launch's output (gcc's object file, a
// cache a program rewrites): prefetching it is of no use, and its next
// change would invalidate the profile, so that every later launch is
// learned (and traced) again.
func ResolveLearned(root string, f formats.File, since time.Time) (policies.LaunchFile, bool) {
	lf, ok := Resolve(root, f)
	switch {
	case !ok:
		return lf, false
	case lf.PathOnly():
		var st unix.Stat_t
		if unix.Lstat(root+lf.Path, &st) == nil {
			return policies.LaunchFile{}, false
		}
	case !lf.IsDir() && lf.MtimeNS >= since.Add(-mtimeSlack).UnixNano():
		return policies.LaunchFile{}, false
	}
	return lf, true
}

// Resolve returns the LaunchFile of a source file row for a profile: its
// path without symlinks inside root, checked to be the file the row names
// (device and inode), with its size and mtime now; or false (no path, a
// file that changed or is gone, neither a regular file nor a directory).
// A path-only row (a failed lookup) stays as it is.
func Resolve(root string, f formats.File) (policies.LaunchFile, bool) {
	if f.Path == "" || !filepath.IsAbs(f.Path) {
		return policies.LaunchFile{}, false
	}
	if f.PathOnly() {
		return policies.LaunchFile{Path: f.Path}, true
	}
	path := f.Path
	var st unix.Stat_t
	// Under another root every symlink is resolved here: the kernel
	// would resolve an absolute one against this process's root.
	if root != "" || unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		p, err := source.ResolveInRoot(root, path)
		if err != nil || unix.Lstat(root+p, &st) != nil {
			return policies.LaunchFile{}, false
		}
		path = p
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return policies.LaunchFile{}, false
	}
	if formats.KernelDev(st.Dev) != f.Dev || st.Ino != f.Ino {
		return policies.LaunchFile{}, false
	}
	return launchFileOf(path, &st), true
}
