package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/formats"
)

// ErrFiles means the files on disk do not match the recording.
var ErrFiles = errors.New("files differ from the recording")

// pathFor returns where file f is replayed: its recorded path, or the same
// path under root. Files the recorder could not resolve live under
// root/_unresolved.
func pathFor(f *fileInfo, root string) (string, error) {
	if f.Path == "" {
		if root == "" {
			return "", fmt.Errorf("file_id %d (dev %d, ino %d) has no recorded path; run 'predictio replay materialize BUNDLE DIR' and replay with --root DIR", f.ID, f.Dev, f.Ino)
		}
		return filepath.Join(root, "_unresolved", fmt.Sprintf("file-%d", f.ID)), nil
	}
	if root == "" {
		return f.Path, nil
	}
	return filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(f.Path, "/"))), nil
}

// checkFiles stats every file the replay touches and returns their paths. A
// missing file, or one whose size or mtime differs from the recording, is an
// error listing each; allowChanged accepts changed files as long as they are
// long enough for every replayed page.
func checkFiles(t *trace, root string, allowChanged bool) ([]string, error) {
	paths := make([]string, len(t.files))
	var problems []string
	changed := false
	ps := uint64(t.pageSize)
	for _, f := range t.used() {
		p, err := pathFor(f, root)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		paths[f.idx] = p
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			problems = append(problems, fmt.Sprintf("%s: missing (%v)", p, err))
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			problems = append(problems, fmt.Sprintf("%s: not a regular file", p))
			continue
		}
		size := uint64(st.Size)
		need := f.maxPage * ps
		if need > f.Size {
			need = f.Size
		}
		if size < need {
			problems = append(problems, fmt.Sprintf("%s: size %d is shorter than the %d bytes the bundle replays (recorded size_bytes %d)", p, size, need, f.Size))
			continue
		}
		if allowChanged {
			continue
		}
		if size != f.Size {
			changed = true
			problems = append(problems, fmt.Sprintf("%s: size %d, recorded size_bytes %d", p, size, f.Size))
			continue
		}
		mt := st.Mtim.Nano()
		if f.MtimeNS != 0 && mt != f.MtimeNS {
			changed = true
			problems = append(problems, fmt.Sprintf("%s: mtime %s, recorded mtime_ns %s", p,
				time.Unix(0, mt).UTC().Format(time.RFC3339Nano), time.Unix(0, f.MtimeNS).UTC().Format(time.RFC3339Nano)))
		}
	}
	if len(problems) > 0 {
		hint := "materialize them with 'predictio replay materialize BUNDLE DIR' and replay with --root DIR"
		if changed {
			hint += ", or pass --allow-changed to replay changed files anyway"
		}
		return nil, fmt.Errorf("check files: %w: %d of %d:\n  %s\n%s", ErrFiles, len(problems), len(t.used()), strings.Join(problems, "\n  "), hint)
	}
	return paths, nil
}

// checkDirectFS fails early where O_DIRECT is not honoured (tmpfs).
func checkDirectFS(path string) error {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	if s.Type == unix.TMPFS_MAGIC || s.Type == unix.RAMFS_MAGIC {
		return fmt.Errorf("check %s: on tmpfs/ramfs, where O_DIRECT does not bypass a page cache; materialize the bundle on a disk filesystem (e.g. under /var/tmp)", path)
	}
	return nil
}

// ensureDir is os.MkdirAll with a wrapped error.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// registry returns a backend registry of the run's files, by bundle file
// id, at their replay paths with the device and inode opened.
func registry(files []*openFile) (*backend.Registry, error) {
	reg := backend.NewRegistry()
	for _, f := range files {
		if f == nil {
			continue
		}
		path, err := filepath.Abs(f.path)
		if err != nil {
			reg.Close()
			return nil, fmt.Errorf("resolve %s: %w", f.path, err)
		}
		if _, err := reg.Add(backend.FileRef{ID: f.info.ID, Dev: f.dev, Ino: f.ino, Path: path}); err != nil {
			reg.Close()
			return nil, err
		}
	}
	return reg, nil
}

// statID returns the device (kernel s_dev encoding) and inode of path.
func statID(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return formats.KernelDev(st.Dev), st.Ino, nil
}
