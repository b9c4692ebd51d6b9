package replay

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/uring"
)

// ErrNotCold means a cold run could not start because the bundle's files
// stayed in the page cache after eviction.
var ErrNotCold = errors.New("files are still cached")

// pageCacheDemand re-issues demand accesses through the page cache: reads as
// preads, faults as touches of the mapping. The none and kernel backends use
// it.
type pageCacheDemand struct {
	files []*openFile
	ps    int
	track *tracker // nil without prefetching
}

func (d *pageCacheDemand) demand(w *worker, o *op) error {
	f := d.files[o.file]
	off := o.page * uint64(d.ps)
	n := uint64(o.n) * uint64(d.ps)
	if off+n > f.size {
		n = f.size - off
	}
	if o.fault {
		// Touch one byte of every page so that the kernel takes a real
		// fault (or finds the page mapped by fault-around).
		for p := uint64(0); p < n; p += uint64(d.ps) {
			w.sink += f.mem[off+p]
		}
	} else {
		buf := w.buffer(int(n))
		for done := 0; done < len(buf); {
			m, err := unix.Pread(f.fd, buf[done:], int64(off)+int64(done))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("pread %s at page %d: %w", f.path, o.page, err)
			}
			if m == 0 {
				return fmt.Errorf("pread %s at page %d: unexpected end of file at byte %d; the file shrank during replay", f.path, o.page, off+uint64(done))
			}
			done += m
		}
	}
	if d.track != nil {
		d.track.demanded(o.file, o.page, uint64(o.n))
	}
	return nil
}

// noneBackend is the baseline backend: it counts requests and executes none.
// Reads go through the page cache, where the kernel's own readahead runs.
type noneBackend struct {
	pageCacheDemand
	requests, pages atomic.Uint64
}

func (b *noneBackend) Submit(req *policies.Request) error {
	b.requests.Add(1)
	b.pages.Add(req.Pages())
	return nil
}

func (b *noneBackend) Stats() policies.BackendStats {
	return policies.BackendStats{Requests: b.requests.Load(), PagesRequested: b.pages.Load()}
}

func (b *noneBackend) finish() targetStats { return targetStats{} }

// kreq is one queued prefetch range of the kernel backend.
type kreq struct {
	file  uint32
	first uint64
	n     uint64
}

// kernelBackend has the kernel prefetch into the page cache. Submit clips
// requests at end of file and queues their ranges on a bounded queue with an
// in-flight page limit; excess requests are dropped and counted, so Submit
// never blocks. One goroutine services the queue: it filters out pages
// already cached (cachestat, or mincore where cachestat is missing) and asks
// the kernel to read the rest with io_uring FADVISE(WILLNEED) (Linux 5.6),
// falling back to posix_fadvise, or readahead(2) on request. A page counts
// as in flight from Submit until the kernel has accepted its readahead.
type kernelBackend struct {
	pageCacheDemand
	queue    chan kreq
	limit    int64
	inflight atomic.Int64
	useRA    bool // readahead(2) instead of fadvise
	noCstat  bool // cachestat missing: mincore only
	wg       sync.WaitGroup
	vec      []byte
	eng      *engine.Engine // FADVISE through one engine worker; nil: syscalls
	ew       *engine.Worker
	emap     []int         // file index -> engine file index
	limits   []adviseLimit // per file: pages one advise call reads
	// Via says how prefetches reach the kernel.
	via string

	prefetchCounters
}

// kernelOptions configure the kernel backend.
type kernelOptions struct {
	queue     int  // queued ranges
	inflight  int  // pages queued or being advised
	readahead bool // readahead(2) instead of fadvise
}

func newKernelBackend(files []*openFile, ps int, o kernelOptions) *kernelBackend {
	if o.queue <= 0 {
		o.queue = 4096
	}
	if o.inflight <= 0 {
		o.inflight = 8192
	}
	b := &kernelBackend{
		pageCacheDemand: pageCacheDemand{files: files, ps: ps, track: newTracker(files, ps)},
		queue:           make(chan kreq, o.queue),
		limit:           int64(o.inflight),
		useRA:           o.readahead,
	}
	b.noCstat = !cachestatWorks(files)
	b.limits = make([]adviseLimit, len(files))
	for i, f := range files {
		if f != nil {
			b.limits[i] = adviseLimitFor(f.fd, ps)
		}
	}
	b.via = "posix_fadvise(WILLNEED)"
	if o.readahead {
		b.via = "readahead(2)"
	} else if err := b.startEngine(); err == nil {
		b.via = "io_uring FADVISE(WILLNEED) through the engine"
	} else {
		b.via += fmt.Sprintf(" (engine unavailable: %v)", err)
	}
	for _, l := range b.limits {
		if l.pages != 0 {
			b.via += fmt.Sprintf(", ranges split at the kernel's per-call limit (first file: %d KiB, %s)", l.pages*uint64(ps)>>10, l.source)
			break
		}
	}
	b.wg.Add(1)
	go b.service()
	return b
}

// cachestatWorks probes cachestat(2) (Linux 6.5) on the first open file.
func cachestatWorks(files []*openFile) bool {
	for _, f := range files {
		if f != nil {
			_, err := cachedPages(f.fd, 0, 1)
			return err == nil
		}
	}
	return false
}

// cachedPages returns how many pages of [off, off+n) bytes are in the page
// cache. Needs Linux 6.5 for cachestat.
func cachedPages(fd int, off, n uint64) (uint64, error) {
	var cs unix.Cachestat_t
	r := unix.CachestatRange{Off: off, Len: n}
	if err := unix.Cachestat(uint(fd), &r, &cs, 0); err != nil {
		return 0, err
	}
	return cs.Cache, nil
}

func (b *kernelBackend) Submit(req *policies.Request) error {
	eof, total, ok := b.admit(req, b.files, b.ps)
	if !ok {
		return nil
	}
	if b.inflight.Load()+int64(total) > b.limit {
		b.drop(total, true)
		return nil
	}
	if len(b.queue)+len(req.Ranges) > cap(b.queue) {
		b.drop(total, false)
		return nil
	}
	now := b.inflight.Add(int64(total))
	for {
		m := b.inflightMax.Load()
		if uint64(now) <= m || b.inflightMax.CompareAndSwap(m, uint64(now)) {
			break
		}
	}
	for _, r := range req.Ranges {
		if n, ok := clipEOF(r, eof); ok {
			b.queue <- kreq{file: req.File, first: r.First, n: n}
		}
	}
	return nil
}

// startEngine creates one engine worker for FADVISE requests on the
// buffered files. Needs Linux 5.6 for IORING_OP_FADVISE.
func (b *kernelBackend) startEngine() error {
	var files []*os.File
	b.emap = make([]int, len(b.files))
	for i, f := range b.files {
		b.emap[i] = -1
		if f != nil {
			b.emap[i] = len(files)
			files = append(files, f.file)
		}
	}
	if len(files) == 0 {
		return errors.New("no files")
	}
	eng, err := engine.New(files, engine.WithWorkers(1), engine.WithQueueDepth(64), engine.WithFixedBuffers(false), engine.WithHandler(b.onComplete))
	if err != nil {
		return err
	}
	ring := eng.Worker(0).Ring()
	if p, err := ring.Probe(); err != nil || !p.Supported(uring.OpFadvise) {
		eng.Close()
		return fmt.Errorf("io_uring has no FADVISE: %w", errors.Join(err, uring.ErrNotSupported))
	}
	b.eng, b.ew = eng, eng.Worker(0)
	return nil
}

// onComplete is the engine's handler: the Token is the request's pages.
func (b *kernelBackend) onComplete(c *engine.Completion) {
	b.inflight.Add(-int64(c.Token))
	if c.Err != nil {
		b.fail(c.Err)
		return
	}
	b.pagesSubmitted.Add(c.Token)
}

func (b *kernelBackend) service() {
	defer b.wg.Done()
	defer func() {
		if b.eng != nil {
			if err := b.eng.Close(); err != nil {
				b.fail(err)
			}
		}
	}()
	for {
		var r kreq
		var ok bool
		if b.ew == nil || b.ew.InFlight() == 0 {
			r, ok = <-b.queue
		} else {
			select {
			case r, ok = <-b.queue:
			default:
				// Nothing queued: wait for a FADVISE to complete.
				if _, err := b.ew.Harvest(1); err != nil {
					b.fail(err)
				}
				continue
			}
		}
		if !ok {
			if b.ew != nil {
				if err := b.ew.Drain(); err != nil {
					b.fail(err)
				}
			}
			return
		}
		b.advise(r)
		if b.ew != nil {
			if _, err := b.ew.Poll(); err != nil {
				b.fail(err)
			}
		}
	}
}

func (b *kernelBackend) fail(err error) {
	b.failures.Add(1)
	b.firstErr.CompareAndSwap(nil, &err)
}

// advise filters the cached pages of r and reads the rest ahead.
func (b *kernelBackend) advise(r kreq) {
	f := b.files[r.file]
	ps := uint64(b.ps)
	if !b.noCstat {
		c, err := cachedPages(f.fd, r.first*ps, r.n*ps)
		if err == nil && c >= r.n {
			b.cached(r.n)
			return
		}
		if err == nil && c == 0 {
			b.willneed(f, r.file, r.first, r.n)
			return
		}
	}
	// Partly cached (or no cachestat): find the uncached runs with mincore.
	if f.mem == nil {
		b.willneed(f, r.file, r.first, r.n)
		return
	}
	if cap(b.vec) < int(r.n) {
		b.vec = make([]byte, r.n)
	}
	vec := b.vec[:r.n]
	region := f.mem[r.first*ps:]
	if uint64(len(region)) > r.n*ps {
		region = region[:r.n*ps]
	}
	if err := mincore(region, vec); err != nil {
		b.willneed(f, r.file, r.first, r.n)
		return
	}
	for i := uint64(0); i < r.n; {
		if vec[i]&1 != 0 {
			b.cached(1)
			i++
			continue
		}
		j := i
		for j < r.n && vec[j]&1 == 0 {
			j++
		}
		b.willneed(f, r.file, r.first+i, j-i)
		i = j
	}
}

func (b *kernelBackend) cached(n uint64) {
	b.pagesCached.Add(n)
	b.inflight.Add(-int64(n))
}

// willneed has the kernel read pages [first, first+n) of f into the page
// cache: an io_uring FADVISE(WILLNEED) when the ring is up, else
// posix_fadvise or readahead(2). Each call reads at most the file's advise
// limit (the kernel ignores the rest of a longer range), so the range goes
// in calls of at most that many pages.
func (b *kernelBackend) willneed(f *openFile, file uint32, first, n uint64) {
	b.track.prefetched(file, first, n)
	step := max(b.limits[file].pages, 1)
	for n > 0 {
		c := min(n, step)
		if err := b.advise1(f, file, first, c); err != nil {
			b.inflight.Add(-int64(n))
			b.fail(fmt.Errorf("read ahead %s pages %d+%d: %w", f.path, first, c, err))
			return
		}
		first, n = first+c, n-c
	}
}

// advise1 issues one advise call for pages [first, first+n), n at most the
// advise limit. A synchronous call's pages leave the in-flight count here;
// an io_uring one's when it completes (onComplete).
func (b *kernelBackend) advise1(f *openFile, file uint32, first, n uint64) error {
	ps := uint64(b.ps)
	if b.ew != nil {
		return b.ew.Submit(engine.Request{Op: engine.OpFadvise, File: b.emap[file], Off: int64(first * ps), Len: int(n * ps), Advice: unix.FADV_WILLNEED, Token: n})
	}
	var err error
	if b.useRA {
		_, _, e := unix.Syscall(unix.SYS_READAHEAD, uintptr(f.fd), uintptr(first*ps), uintptr(n*ps))
		if e != 0 {
			err = e
		}
	} else {
		err = unix.Fadvise(f.fd, int64(first*ps), int64(n*ps), unix.FADV_WILLNEED)
	}
	if err != nil {
		return err
	}
	b.inflight.Add(-int64(n))
	b.pagesSubmitted.Add(n)
	return nil
}

func mincore(b []byte, vec []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// finish waits for the queue to drain and returns the prefetch counts.
func (b *kernelBackend) finish() targetStats {
	close(b.queue)
	b.wg.Wait()
	pre, used := b.track.counts()
	ts := targetStats{Prefetched: pre, Used: used, Wasted: pre - used, DroppedPages: b.droppedPages.Load(), Via: b.via}
	if e := b.firstErr.Load(); e != nil {
		ts.Warnings = append(ts.Warnings, fmt.Sprintf("%d prefetch failures, first: %v", b.failures.Load(), *e))
	}
	return ts
}

// evict drops the page-cache pages of files with POSIX_FADV_DONTNEED (and,
// with dropCaches, /proc/sys/vm/drop_caches), then verifies with cachestat
// that none is left. Needs Linux 6.5 for cachestat; without it, mincore of a
// fresh mapping is used.
func evict(files []*openFile, dropCaches, skip bool) error {
	if !skip {
		for _, f := range files {
			if f != nil {
				unix.Fadvise(f.fd, 0, 0, unix.FADV_DONTNEED)
			}
		}
		if dropCaches {
			unix.Sync()
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
				return fmt.Errorf("drop caches: %w (needs root with CAP_SYS_ADMIN; leave out --drop-caches to evict with POSIX_FADV_DONTNEED only)", err)
			}
		}
	}
	var left []string
	for _, f := range files {
		if f == nil || f.size == 0 {
			continue
		}
		c, err := residentPages(f)
		if err != nil {
			return fmt.Errorf("verify cold %s: %w", f.path, err)
		}
		if c > 0 {
			left = append(left, fmt.Sprintf("%s: %d of %d pages cached", f.path, c, (f.size+uint64(os.Getpagesize())-1)/uint64(os.Getpagesize())))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("verify cold run: %w after eviction:\n  %s\nthe pages may be mapped or locked by another process, or dirty; stop that process, try --drop-caches as root, or pass --warm to run (and report) warm", ErrNotCold, strings.Join(left, "\n  "))
	}
	return nil
}

// residentPages returns the cached pages of f, with cachestat or mincore.
func residentPages(f *openFile) (uint64, error) {
	c, err := cachedPages(f.fd, 0, 0) // len 0: to end of file
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return 0, err
	}
	mem := f.mem
	if mem == nil {
		m, err := unix.Mmap(f.fd, 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0, err
		}
		defer unix.Munmap(m)
		mem = m
	}
	vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
	if err := mincore(mem, vec); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range vec {
		n += uint64(v & 1)
	}
	return n, nil
}
