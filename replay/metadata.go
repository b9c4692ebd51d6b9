package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/rawsys"
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
	// exist), or a directory read that reached the directory's end where
	// the program's did not, or the reverse.
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

// metaPaths prepares where each file of a metadata operation is looked
// up (nil when it has no recorded path), and which file is its directory
// (-1 when none of the bundle's): a thread that has its directory open
// repeats the lookup relative to it (openat(dirfd, name)), as programs
// walking a tree do, and not through the whole path from the root.
func (r *Replayer) metaPaths() {
	n := len(r.t.files)
	r.mpath, r.mbase, r.mparent = make([]string, n), make([]string, n), make([]int32, n)
	byPath := make(map[string]int32, n)
	for _, f := range r.t.files {
		r.mparent[f.idx] = -1
		if f.Path == "" {
			continue
		}
		if p, err := pathFor(f, r.opt.Root); err == nil {
			r.mpath[f.idx] = p
			byPath[p] = int32(f.idx)
		}
	}
	for i, p := range r.mpath {
		if p == "" {
			continue
		}
		if d, ok := byPath[filepath.Dir(p)]; ok && d != int32(i) {
			r.mparent[i], r.mbase[i] = d, filepath.Base(p)
		}
	}
}

// metaFDs bounds the descriptors a worker keeps open from replayed opens
// of files no demand access reads (directories, files only looked at), for
// the directory reads and fstats that follow the opens, as the program's
// did; the oldest is closed past it.
const metaFDs = 64

// metadata replays one metadata operation of the worker's thread: only
// the system call the program made is timed. What replay does besides
// (checking and mapping a data file a replayed open opened, closing
// descriptors) waits in w.after for settle, which the worker calls once
// the operation's time is taken, in its think time.
func (w *worker) metadata(o *op, files []*openFile) {
	r := w.r.rp
	w.meta.Ops++
	lastOpen := w.lastOpen
	w.lastOpen = 0
	if o.kind == formats.KindMmap {
		w.meta.Mappings++
		if f := files[o.file]; f != nil {
			if err := f.ensure(false); err == nil {
				f.mapped(&op{mapFirst: o.page, mapPages: uint64(o.n), prot: o.prot}, o.page, r.t.pageSize)
			}
		}
		return
	}
	path := r.mpath[o.file]
	if path == "" {
		w.meta.Skipped++
		return
	}
	// Relative to the directory the thread has open, or from the root.
	dir, name := unix.AT_FDCWD, path
	if d := r.mparent[o.file]; d >= 0 {
		if fd, ok := w.fds[uint32(d)]; ok {
			dir, name = fd, r.mbase[o.file]
		}
	}
	var err error
	switch o.kind {
	case formats.KindOpen:
		var fd int
		fd, err = w.paths.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err == nil {
			w.pending, w.pendingFile = fd+1, o.file
			w.lastOpen = o.file + 1
		}
	case formats.KindStat:
		// A stat of the file the thread has just opened is the
		// program's fstat of it (glibc's fstat is newfstatat(fd, "",
		// AT_EMPTY_PATH)): no path walk.
		var st unix.Stat_t
		if fd := w.fdOf(o.file, files); fd >= 0 && lastOpen == o.file+1 {
			err = rawsys.Fstat(fd, &st)
		} else {
			err = w.paths.Fstatat(dir, name, &st, 0)
		}
	case formats.KindReaddir:
		var n int
		n, err = w.readdir(o.file, dir, name)
		// The program's calls reached the directory's end (0 bytes)
		// where the replayed ones do.
		if err == nil && o.ret >= 0 && (n == 0) != (o.ret == 0) {
			w.meta.Mismatched++
		}
	}
	if (err == nil) != (o.ret >= 0) {
		w.meta.Mismatched++
	}
}

// fdOf returns the worker's descriptor of file idx (kept from a replayed
// open, or the run's descriptor of a data file), or -1.
func (w *worker) fdOf(idx uint32, files []*openFile) int {
	if fd, ok := w.fds[idx]; ok {
		return fd
	}
	if f := files[idx]; f != nil && f.ready.Load() {
		return f.fd
	}
	return -1
}

// settle does what the last operation left for after its time was taken:
// the descriptor a replayed open returned becomes the run's descriptor of
// its data file if the run has none yet (checked and mapped now), or is
// kept for the thread's next operations on a file no demand access reads,
// or closed.
func (w *worker) settle(files []*openFile) {
	fd, idx := w.pending-1, w.pendingFile
	if fd < 0 {
		return
	}
	w.pending = 0
	if f := files[idx]; f != nil {
		if f.lazy {
			kept, err := f.adopt(fd)
			if err != nil {
				w.warn = err.Error()
			}
			if kept || err != nil {
				return
			}
		}
		rawsys.Close(fd)
		return
	}
	w.keep(idx, fd)
}

// keep keeps fd as the worker's descriptor of file idx, closing the one it
// replaces and, past metaFDs, the oldest.
func (w *worker) keep(idx uint32, fd int) {
	if w.fds == nil {
		w.fds = make(map[uint32]int, metaFDs)
	}
	if old, ok := w.fds[idx]; ok {
		rawsys.Close(old)
	} else {
		w.fdOrder = append(w.fdOrder, idx)
	}
	w.fds[idx] = fd
	for len(w.fdOrder) > metaFDs {
		if old, ok := w.fds[w.fdOrder[0]]; ok {
			rawsys.Close(old)
			delete(w.fds, w.fdOrder[0])
		}
		w.fdOrder = w.fdOrder[1:]
	}
}

// closeFDs closes what the worker kept, at the end of its run.
func (w *worker) closeFDs(files []*openFile) {
	w.settle(files)
	for _, fd := range w.fds {
		rawsys.Close(fd)
	}
	w.fds, w.fdOrder = nil, nil
}

// readdir makes one getdents64 call on the directory, as the program's
// row did: on the descriptor of the thread's replayed open of it, which
// the calls continue to its end, else on a descriptor opened now (name,
// relative to dir).
func (w *worker) readdir(idx uint32, dir int, name string) (int, error) {
	fd, ok := w.fds[idx]
	if !ok {
		var err error
		if fd, err = w.paths.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return 0, err
		}
		w.keep(idx, fd)
	}
	if cap(w.buf) < 32<<10 {
		w.buf = alignedBuffer(32 << 10)
	}
	return rawsys.Getdents(fd, w.buf[:32<<10])
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
