package backend

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/policies"
)

// kreq is one queued prefetch range of a page-cache backend.
type kreq struct {
	f     *File
	first uint64
	n     uint64    // pages as requested, before clipping at end of file
	check bool      // the first range of its request: re-check the path first
	sub   time.Time // when Submit queued it
}

// queue is the bounded request queue of the kernel and kmod backends:
// Submit counts, bounds and queues ranges and never blocks; one service
// goroutine takes them. A page counts as in flight from Submit until the
// backend has handed it to the kernel (or refused, clipped or skipped it).
type queue struct {
	reg      *Registry
	ps       int
	ch       chan kreq
	limit    int64
	inflight atomic.Int64
	mu       sync.Mutex // Submit against Close
	closed   bool
	done     chan struct{}
	counters
}

func newQueue(reg *Registry, o *Options) *queue {
	if o.PageSize <= 0 {
		o.PageSize = os.Getpagesize()
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.InFlight <= 0 {
		o.InFlight = 8192
	}
	return &queue{reg: reg, ps: o.PageSize, ch: make(chan kreq, o.Queue), limit: int64(o.InFlight), done: make(chan struct{})}
}

// Submit queues req's ranges, or drops and counts it at a bound.
func (q *queue) Submit(req *policies.Request) error {
	total := q.count(req)
	f := q.reg.Lookup(req.File)
	if f == nil {
		q.rejected.Add(1)
		q.refusedPages.Add(total)
		return nil
	}
	if total == 0 {
		return nil
	}
	if q.inflight.Load()+int64(total) > q.limit {
		q.drop(total, true)
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.refusedPages.Add(total)
		return fmt.Errorf("submit to file id %d: %w", req.File, ErrClosed)
	}
	if len(q.ch)+len(req.Ranges) > cap(q.ch) {
		q.drop(total, false)
		return nil
	}
	q.noteInFlight(uint64(q.inflight.Add(int64(total))))
	first, now := true, time.Now()
	for _, r := range req.Ranges {
		if r.N == 0 {
			continue
		}
		q.ch <- kreq{f: f, first: r.First, n: uint64(r.N), check: first, sub: now}
		first = false
	}
	return nil
}

// stop closes the queue; the service goroutine drains it and exits.
func (q *queue) stop() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	<-q.done
}

// settle ends n in-flight pages.
func (q *queue) settle(n uint64) { q.inflight.Add(-int64(n)) }

// open acquires r's file and clips r at its end: it returns the
// descriptor and the pages before end of file; n 0 means there is nothing
// to do (and the file is released).
func (q *queue) open(r kreq) (fd int, n uint64) {
	t0 := time.Now()
	fd, size, opened, err := r.f.acquire(r.check)
	d := uint64(time.Since(t0))
	q.acquireNS.Add(d)
	q.acquires.Add(1)
	if opened {
		q.openNS.Add(d)
		q.opens.Add(1)
	}
	if err != nil {
		q.settle(r.n)
		q.refuse(r.n, err)
		return -1, 0
	}
	n, _ = ClipEOF(policies.Range{First: r.first, N: uint32(r.n)}, pagesOf(size, q.ps))
	if past := r.n - n; past > 0 {
		q.pastEOF.Add(past)
		q.settle(past)
	}
	if n == 0 {
		r.f.release()
	}
	return fd, n
}

// Kernel has the kernel read requested pages into the page cache. Its
// service goroutine skips pages already cached (cachestat, Linux 6.5;
// mincore where a range is partly cached or cachestat is missing) and
// issues the rest as io_uring FADVISE(WILLNEED) (Linux 5.6), falling back
// to posix_fadvise, or readahead(2) with Options.Readahead. A range longer
// than the kernel's per-call readahead limit of its device is split at it
// (adviseLimitFor).
type Kernel struct {
	*queue
	issued  func(file uint32, first, n uint64)
	useRA   bool
	noCstat bool // cachestat missing: mincore only (probed on first use)
	probed  bool
	ring    *fadviser // nil: synchronous syscalls
	ringErr error
	limits  map[uint64]adviseLimit // by device
	vec     []byte
	sub     time.Time // when the request being advised was submitted
}

// NewKernel starts a kernel backend over reg.
func NewKernel(reg *Registry, o Options) *Kernel {
	b := &Kernel{queue: newQueue(reg, &o), issued: o.Issued, useRA: o.Readahead, limits: map[uint64]adviseLimit{}}
	if !o.Readahead {
		b.ring, b.ringErr = newFadviser(64, b.completed)
	}
	go b.service()
	return b
}

func (b *Kernel) service() {
	defer close(b.done)
	for {
		var r kreq
		var ok bool
		if b.ring == nil || b.ring.inflight() == 0 {
			r, ok = <-b.ch
		} else {
			select {
			case r, ok = <-b.ch:
			default:
				// Nothing queued: wait for a FADVISE to complete.
				if err := b.ring.wait(1); err != nil {
					b.ringFailed(err)
				}
				continue
			}
		}
		if !ok {
			if b.ring != nil {
				if err := b.ring.drain(); err != nil {
					b.ringFailed(err)
				}
				b.ring.close()
			}
			return
		}
		t0 := time.Now()
		b.advise(r)
		b.busyNS.Add(uint64(time.Since(t0)))
		if b.ring == nil {
			continue
		}
		// One submission for the requests queued together, at most
		// maxBatch FADVISEs, so that a steady stream does not hold the
		// first ones back.
		err := b.ring.poll()
		if err == nil && (len(b.ch) == 0 || b.ring.ring.SQReady() >= maxBatch) {
			err = b.ring.flush()
		}
		if err != nil {
			b.ringFailed(err)
		}
	}
}

// maxBatch bounds the FADVISEs the service goroutine queues before it
// submits them.
const maxBatch = 16

// ringFailed counts a ring-level failure; the pages of requests the ring
// lost are settled by drain's caller never completing them, so the ring is
// abandoned for synchronous calls.
func (b *Kernel) ringFailed(err error) {
	b.fail(fmt.Errorf("io_uring FADVISE: %w", err))
	if b.ring != nil {
		b.ring.abandon()
		b.ring = nil
		b.ringErr = err
	}
}

// completed is the ring's completion callback.
func (b *Kernel) completed(s fadviseSlot, err error) {
	now := time.Now()
	b.adviseNS.Add(uint64(now.Sub(s.at)))
	b.pipelineNS.Add(uint64(now.Sub(s.sub)))
	b.advised.Add(1)
	b.settle(s.n)
	if err != nil {
		b.fail(fmt.Errorf("read ahead %s pages %d+%d: %w", s.f.ref.Path, s.first, s.n, err))
	} else {
		b.pagesSubmitted.Add(s.n)
	}
	s.f.release()
}

// advise filters the cached pages of r and reads the rest ahead.
func (b *Kernel) advise(r kreq) {
	b.sub = r.sub
	fd, n := b.open(r)
	if n == 0 {
		return
	}
	defer r.f.release()
	b.probe(fd)
	ps := uint64(b.ps)
	if !b.noCstat {
		c, err := cachedPages(fd, r.first*ps, n*ps)
		if err == nil && c >= n {
			b.cached(n)
			return
		}
		if err == nil && c == 0 {
			b.willneed(r.f, fd, r.first, n)
			return
		}
	}
	// Partly cached (or no cachestat): find the uncached runs with mincore.
	if cap(b.vec) < int(n) {
		b.vec = make([]byte, n)
	}
	vec := b.vec[:n]
	if err := r.f.residentVec(r.first, vec, b.ps); err != nil {
		b.willneed(r.f, fd, r.first, n)
		return
	}
	for i := uint64(0); i < n; {
		if vec[i] != 0 {
			b.cached(1)
			i++
			continue
		}
		j := i
		for j < n && vec[j] == 0 {
			j++
		}
		b.willneed(r.f, fd, r.first+i, j-i)
		i = j
	}
}

// probe checks once whether cachestat works (Linux 6.5).
func (b *Kernel) probe(fd int) {
	if b.probed {
		return
	}
	b.probed = true
	if _, err := cachedPages(fd, 0, 1); err != nil {
		b.noCstat = true
	}
}

func (b *Kernel) cached(n uint64) {
	b.pagesCached.Add(n)
	b.settle(n)
}

// limit returns the per-call readahead limit of f's device.
func (b *Kernel) limit(f *File, fd int) uint64 {
	l, ok := b.limits[f.ref.Dev]
	if !ok {
		l = adviseLimitFor(fd, b.ps)
		b.limits[f.ref.Dev] = l
	}
	return max(l.pages, 1)
}

// willneed has the kernel read pages [first, first+n) of f into the page
// cache, in calls of at most the device's advise limit (the kernel ignores
// the rest of a longer range).
func (b *Kernel) willneed(f *File, fd int, first, n uint64) {
	if b.issued != nil {
		b.issued(f.ref.ID, first, n)
	}
	step := b.limit(f, fd)
	for n > 0 {
		c := min(n, step)
		if err := b.advise1(f, fd, first, c); err != nil {
			b.settle(n)
			b.fail(fmt.Errorf("read ahead %s pages %d+%d: %w", f.ref.Path, first, c, err))
			return
		}
		first, n = first+c, n-c
	}
}

// advise1 issues one advise call for pages [first, first+n). A
// synchronous call's pages settle here; an io_uring one's when it
// completes.
func (b *Kernel) advise1(f *File, fd int, first, n uint64) error {
	ps := uint64(b.ps)
	if b.ring != nil {
		f.hold()
		err := b.ring.submit(fd, first*ps, n*ps, fadviseSlot{f: f, first: first, n: n, sub: b.sub})
		if err == nil {
			return nil
		}
		f.release()
		b.ringFailed(err)
	}
	var err error
	if b.useRA {
		_, _, e := unix.Syscall(unix.SYS_READAHEAD, uintptr(fd), uintptr(first*ps), uintptr(n*ps))
		if e != 0 {
			err = e
		}
	} else {
		err = unix.Fadvise(fd, int64(first*ps), int64(n*ps), unix.FADV_WILLNEED)
	}
	if err != nil {
		return err
	}
	b.settle(n)
	b.pagesSubmitted.Add(n)
	return nil
}

// Close drains the queue and returns the report.
func (b *Kernel) Close() (Report, error) {
	b.stop()
	return b.report(b.via()), nil
}

// via says how prefetches reached the kernel.
func (b *Kernel) via() string {
	var s string
	switch {
	case b.useRA:
		s = "readahead(2)"
	case b.ringErr == nil:
		s = "io_uring FADVISE(WILLNEED)"
	default:
		s = fmt.Sprintf("posix_fadvise(WILLNEED) (io_uring unavailable: %v)", b.ringErr)
	}
	var devs []string
	for dev, l := range b.limits {
		if l.pages != 0 {
			devs = append(devs, fmt.Sprintf("device %d:%d %d KiB (%s)", dev>>20, dev&(1<<20-1), l.pages*uint64(b.ps)>>10, l.source))
		}
	}
	sort.Strings(devs)
	if len(devs) > 0 {
		s += ", ranges split at the kernel's per-call limit: " + strings.Join(devs, "; ")
	}
	return s
}

// cachedPages returns how many pages of [off, off+n) bytes are in the page
// cache (len 0: to end of file). Needs Linux 6.5 for cachestat.
func cachedPages(fd int, off, n uint64) (uint64, error) {
	var cs unix.Cachestat_t
	r := unix.CachestatRange{Off: off, Len: n}
	if err := unix.Cachestat(uint(fd), &r, &cs, 0); err != nil {
		return 0, err
	}
	return cs.Cache, nil
}

// hold adds a user to an acquired file (an io_uring request in flight).
func (f *File) hold() {
	f.mu.Lock()
	f.users++
	f.mu.Unlock()
}

var errNoFadvise = errors.New("io_uring has no FADVISE")
