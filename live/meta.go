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

// MetaStats count the launch workers' metadata work.
type MetaStats struct {
	Files   uint64 // lookups repeated (path walk and inode read, or a failed lookup again)
	Dirs    uint64 // directories read to the end
	Dropped uint64 // files dropped because the queue was full
}

// launchWorkers prefetch the files of launch profiles, on a few workers
// so that the lookups' reads overlap. For each file (one job per file,
// its requests' ranges merged) a worker
//
//  1. checks it (check): lstat of its path, which also repeats the
//     program's lookup (the path's directory entries and the file's inode
//     come into the caches, a failed lookup leaves a negative entry);
//     then, for another process, a read check as that process;
//  2. with Meta, reads a directory the launch listed to its end
//     (getdents64), so the lookups and listings that follow find its
//     blocks cached;
//  3. hands the file's ranges to the backend.
//
// Nothing is read for a file that fails its check.
type launchWorkers struct {
	l    *Loop
	ch   chan launchJob
	wg   sync.WaitGroup
	dmu  sync.Mutex
	dirs map[string]time.Time
	st   struct{ files, dirs, dropped atomic.Uint64 }
	mu   sync.Mutex // enqueue against close
	done bool
}

type launchJob struct {
	id     uint32
	path   string
	f      policies.LaunchFile
	kinds  uint32
	meta   bool
	cred   *source.Cred // the launch's process; nil: this process
	ranges []policies.Range
}

// Directory reads are bounded: directories larger than maxDirBytes are
// not read, a read stops after maxDirEntries entries, and a directory is
// read again only after dirRewalk.
const (
	maxDirBytes   = 1 << 20
	maxDirEntries = 1 << 16
	dirRewalk     = 30 * time.Second
	maxDirsKept   = 1 << 14
)

func newLaunchWorkers(l *Loop, workers, queue int) *launchWorkers {
	if workers <= 0 {
		workers = 8
	}
	if queue <= 0 {
		queue = 16384
	}
	w := &launchWorkers{l: l, ch: make(chan launchJob, queue), dirs: map[string]time.Time{}}
	w.wg.Add(workers)
	for range workers {
		go w.work()
	}
	return w
}

// add merges req, a request for a profile file, into the job being
// built: the policy emits a file's requests one after another. It
// reports false for an id the loop did not name (LaunchFile).
func (w *launchWorkers) add(j *launchJob, req *policies.Request) bool {
	if j.id == req.File {
		j.ranges = append(j.ranges, req.Ranges...)
		j.meta = j.meta || req.Meta
		return true
	}
	w.flush(j)
	w.l.pmu.Lock()
	p := w.l.prof[req.File]
	if p != nil {
		*j = launchJob{id: req.File, path: p.path, f: p.f, kinds: p.kinds, cred: p.cred, meta: req.Meta, ranges: slices.Clone(req.Ranges)}
	}
	w.l.pmu.Unlock()
	return p != nil
}

// flush queues the job being built, or drops it when the queue is full.
func (w *launchWorkers) flush(j *launchJob) {
	if j.id == 0 {
		return
	}
	w.mu.Lock()
	if !w.done {
		select {
		case w.ch <- *j:
		default:
			w.st.dropped.Add(1)
		}
	}
	w.mu.Unlock()
	*j = launchJob{}
}

func (w *launchWorkers) work() {
	defer w.wg.Done()
	buf := make([]byte, 32<<10)
	for j := range w.ch {
		if !w.check(&j) {
			continue
		}
		if j.meta && j.f.IsDir() && policies.Has(j.kinds, formats.KindReaddir) && w.claim(j.path) && readDir(j.path, buf) {
			w.st.dirs.Add(1)
		}
		if len(j.ranges) > 0 {
			_ = w.l.be.Submit(&policies.Request{File: j.id, Ranges: j.ranges})
		}
	}
}

// check reports whether j's file may be prefetched: its path still names
// what was learned (checkUnchanged), and the launch's process may read it
// (or list the directory it listed). A changed file is reported to the
// loop (Invalid).
func (w *launchWorkers) check(j *launchJob) bool {
	c := &w.l.creds
	err := checkUnchanged(j.path, &j.f)
	w.st.files.Add(1)
	if err != nil {
		c.changed.Add(1)
		w.l.pmu.Lock()
		if len(w.l.invalid) < policies.MaxLaunchFiles {
			w.l.invalid = append(w.l.invalid, j.f)
		}
		w.l.pmu.Unlock()
		return false
	}
	if j.cred != nil && !j.f.PathOnly() && (!j.f.IsDir() || policies.Has(j.kinds, formats.KindReaddir)) {
		ok, err := c.MayRead(w.l.cfg.Access, j.cred, j.path)
		switch {
		case err != nil:
			c.errors.Add(1)
			return false
		case !ok:
			c.denied.Add(1)
			return false
		}
	}
	c.checked.Add(1)
	return true
}

// claim reports whether dir is due for a read, and marks it read.
func (w *launchWorkers) claim(dir string) bool {
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

func (w *launchWorkers) stats() MetaStats {
	return MetaStats{Files: w.st.files.Load(), Dirs: w.st.dirs.Load(), Dropped: w.st.dropped.Load()}
}

// close waits for the queued work to finish.
func (w *launchWorkers) close() {
	w.mu.Lock()
	if !w.done {
		w.done = true
		close(w.ch)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
