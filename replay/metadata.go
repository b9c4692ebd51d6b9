package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
)

// Metadata counts a run's metadata operations: the opens, stats and
// directory reads a program made (format 1.1 rows), replayed through the
// same paths when it made them, and its mmaps.
type Metadata struct {
	// Ops counts the operations replayed; TimeNS their time.
	Ops    int   `json:"ops"`
	TimeNS int64 `json:"time_ns"`
	// Mismatched counts operations whose outcome differs from the
	// recording: a lookup that succeeded there and failed here, or the
	// reverse (a file the replay lacks, or one a path-only row says did not
	// exist).
	Mismatched int `json:"mismatched,omitempty"`
	// Skipped counts operations on files without a recorded path.
	Skipped int `json:"skipped,omitempty"`
	// Mappings counts mmaps replayed.
	Mappings int `json:"mappings,omitempty"`
	// Cold says what was done for dentries and inodes before the run;
	// Warm what stayed warm, and why.
	Cold string `json:"cold,omitempty"`
	Warm string `json:"warm,omitempty"`
}

// metaPath returns where the file of a metadata operation is looked up.
func (r *Replayer) metaPath(f *fileInfo) (string, bool) {
	if f.Path == "" {
		return "", false
	}
	p, err := pathFor(f, r.opt.Root)
	return p, err == nil
}

// metadata replays one metadata operation of the worker's thread.
func (w *worker) metadata(o *op, files []*openFile) {
	r := w.r.rp
	w.meta.Ops++
	fi := r.t.files[o.file]
	if o.kind == formats.KindMmap {
		w.meta.Mappings++
		if f := files[o.file]; f != nil {
			if err := f.ensure(false); err == nil {
				f.mapped(&op{mapFirst: o.page, mapPages: uint64(o.n), prot: o.prot}, o.page, r.t.pageSize)
			}
		}
		return
	}
	path, ok := r.metaPath(fi)
	if !ok {
		w.meta.Skipped++
		return
	}
	var err error
	switch o.kind {
	case formats.KindOpen:
		err = w.open(path, files[o.file])
	case formats.KindStat:
		var st unix.Stat_t
		err = unix.Stat(path, &st)
	case formats.KindReaddir:
		err = w.readdir(path)
	}
	if (err == nil) != (o.ret >= 0) {
		w.meta.Mismatched++
	}
}

// open opens path as the program did; the descriptor becomes the run's
// descriptor of data file f if the run has not opened it yet, else it is
// closed.
func (w *worker) open(path string, f *openFile) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	if f != nil && f.lazy {
		kept, err := f.adopt(fd)
		if err != nil {
			w.warn = err.Error()
		}
		if kept || err != nil {
			return nil
		}
	}
	unix.Close(fd)
	return nil
}

// readdir reads the whole directory at path, as getdents64 calls do.
func (w *worker) readdir(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if cap(w.buf) < 32<<10 {
		w.buf = alignedBuffer(32 << 10)
	}
	buf := w.buf[:32<<10]
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// coldMetadata drops dentries and inodes (drop_caches 2: the whole
// machine's unused ones) before a run of a bundle with metadata
// operations, so that its lookups are cold, and says what stays warm.
func (r *Replayer) coldMetadata(files []*openFile) Metadata {
	var m Metadata
	open := 0
	for _, f := range files {
		if f != nil && !f.lazy {
			open++
		}
	}
	var warm []string
	if open > 0 {
		warm = append(warm, fmt.Sprintf("%d files the recording did not open are opened before the run: their lookups and inodes are warm", open))
	}
	switch {
	case r.opt.Warm:
		warm = append(warm, "--warm: nothing was evicted")
	case r.opt.WarmMetadata:
		warm = append(warm, "--warm-metadata: dentries and inodes were not dropped")
	default:
		start := time.Now()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			why := err.Error()
			if errors.Is(err, os.ErrPermission) {
				why = "drop_caches needs root (CAP_SYS_ADMIN)"
			}
			warm = append(warm, "dentries and inodes were not dropped: "+why)
		} else {
			m.Cold = fmt.Sprintf("dentries and inodes dropped (drop_caches 2, %v); those of files mapped or open elsewhere stay", time.Since(start).Round(time.Millisecond))
		}
	}
	for i, s := range warm {
		if i > 0 {
			m.Warm += "; "
		}
		m.Warm += s
	}
	return m
}

// materializeMeta creates, under dir, the files and directories that only
// metadata operations name (no data of theirs is replayed), so that their
// replayed lookups succeed as they did: directories, and regular files of
// the recorded size (sparse: nothing reads them) and mtime. Path-only rows
// (lookups that failed) get nothing.
func materializeMeta(t *trace, dir string, res *MaterializeResult) error {
	for _, f := range t.files {
		if !f.meta || f.accessed || f.PathOnly() || f.Path == "" {
			continue
		}
		p, err := pathFor(f, dir)
		if err != nil {
			return err
		}
		res.Files++
		if _, err := os.Lstat(p); err == nil {
			res.Kept++
			continue
		}
		switch f.Mode & formats.ModeType {
		case formats.ModeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("materialize %s: %w", p, err)
			}
		case formats.ModeRegular, 0:
			if err := ensureDir(filepath.Dir(p)); err != nil {
				return err
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return fmt.Errorf("materialize %s: %w", p, err)
			}
			if err := os.Truncate(p, int64(f.Size)); err != nil {
				return fmt.Errorf("materialize %s: %w", p, err)
			}
		default:
			res.Files--
			continue
		}
		if f.MtimeNS != 0 {
			ts := []unix.Timespec{unix.NsecToTimespec(time.Now().UnixNano()), unix.NsecToTimespec(f.MtimeNS)}
			unix.UtimesNano(p, ts)
		}
		res.Written++
	}
	return nil
}
