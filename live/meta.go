package live

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// MetaStats count the metadata workers' work.
type MetaStats struct {
	Files   uint64 // files looked up (path walk and inode read)
	Dirs    uint64 // directories read to the end
	Dropped uint64 // requests dropped because the queue was full
	Errors  uint64 // lookups that failed (the file changed or went away)
}

// metaWarmer warms files' metadata for requests with Meta, on a few
// workers so that the lookups' reads overlap: a lookup of the file's path
// with O_PATH (its directories' entries and its inode come into the
// caches; the file is not opened, so no device or FIFO can be triggered),
// and once per directory a read of all its entries (getdents64), for
// programs that list the directories they search. Then the request's
// ranges go to the backend.
type metaWarmer struct {
	l    *Loop
	ch   chan metaJob
	wg   sync.WaitGroup
	dmu  sync.Mutex
	dirs map[string]time.Time
	st   struct{ files, dirs, dropped, errors atomic.Uint64 }
	mu   sync.Mutex // enqueue against close
	done bool
}

type metaJob struct {
	id     uint32
	path   string
	f      policies.LaunchFile
	kinds  uint32
	cred   *source.Cred // the launch's process; nil: this process
	ranges []policies.Range
}

// Directory walks are bounded: directories larger than maxDirBytes are
// not read, a walk stops after maxDirEntries entries, and a directory is
// read again only after dirRewalk.
const (
	maxDirBytes   = 1 << 20
	maxDirEntries = 1 << 16
	dirRewalk     = 30 * time.Second
	maxDirsKept   = 1 << 14
)

func newMetaWarmer(l *Loop, workers, queue int) *metaWarmer {
	if workers <= 0 {
		workers = 8
	}
	if queue <= 0 {
		queue = 16384
	}
	w := &metaWarmer{l: l, ch: make(chan metaJob, queue), dirs: map[string]time.Time{}}
	w.wg.Add(workers)
	for range workers {
		go w.work()
	}
	return w
}

// enqueue queues req (copied) for the workers, or drops it when the queue
// is full. It reports false for a file the loop did not name for a
// launch (LaunchFile): only those carry what to warm.
func (w *metaWarmer) enqueue(req *policies.Request) bool {
	w.l.pmu.Lock()
	p := w.l.prof[req.File]
	var j metaJob
	if p != nil {
		j = metaJob{id: req.File, path: p.path, f: p.f, kinds: p.kinds, cred: p.cred, ranges: slices.Clone(req.Ranges)}
	}
	w.l.pmu.Unlock()
	if p == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return true
	}
	select {
	case w.ch <- j:
	default:
		w.st.dropped.Add(1)
	}
	return true
}

func (w *metaWarmer) work() {
	defer w.wg.Done()
	buf := make([]byte, 32<<10)
	for j := range w.ch {
		w.warm(&j, buf)
		if len(j.ranges) > 0 {
			_ = w.l.be.Submit(&policies.Request{File: j.id, Ranges: j.ranges})
		}
	}
}

// warm repeats j's lookup: a failed lookup again (the kernel caches the
// negative entry), else the path's directories and the file's inode, and
// reads a directory the launch listed.
func (w *metaWarmer) warm(j *metaJob, buf []byte) {
	if j.f.PathOnly() {
		var st unix.Stat_t
		_ = unix.Lstat(j.path, &st)
		w.st.files.Add(1)
		return
	}
	fd, err := unix.Open(j.path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		w.st.errors.Add(1)
		return
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil || formats.KernelDev(st.Dev) != j.f.Dev || st.Ino != j.f.Ino {
		w.st.errors.Add(1)
		return
	}
	w.st.files.Add(1)
	if !j.f.IsDir() || !policies.Has(j.kinds, formats.KindReaddir) || !w.claim(j.path) {
		return
	}
	// LaunchFile checked that the launch's process may list it.
	if readDir(j.path, buf) {
		w.st.dirs.Add(1)
	}
}

// claim reports whether dir is due for a walk, and marks it walked.
func (w *metaWarmer) claim(dir string) bool {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	if t, ok := w.dirs[dir]; ok && time.Since(t) < dirRewalk {
		return false
	}
	if len(w.dirs) >= maxDirsKept {
		clear(w.dirs)
	}
	w.dirs[dir] = time.Now()
	return true
}

// readDir reads directory dir's entries to the end (bounded), so that its
// blocks are cached for the lookups that follow. It refuses a symlink and
// a directory larger than maxDirBytes.
func readDir(dir string, buf []byte) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size > maxDirBytes {
		return false
	}
	entries := 0
	for entries < maxDirEntries {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		// Each dirent64 is at least 24 bytes: an upper bound is enough.
		entries += n / 24
	}
	return true
}

func (w *metaWarmer) stats() MetaStats {
	return MetaStats{Files: w.st.files.Load(), Dirs: w.st.dirs.Load(), Dropped: w.st.dropped.Load(), Errors: w.st.errors.Load()}
}

// close waits for the queued work to finish.
func (w *metaWarmer) close() {
	w.mu.Lock()
	if !w.done {
		w.done = true
		close(w.ch)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
