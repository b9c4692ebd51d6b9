package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/rawsys"
	"github.com/predictio/predictio/policies"
)

// prefetchPoints are the range lengths, in pages, the kernel backend's
// cost per request is measured at.
var prefetchPoints = []uint32{1, 4, 32, 256}

// prefetchRounds is how many times each prefetch point is measured; the
// profile holds the medians.
const prefetchRounds = 5

// median returns the median of xs (sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// prefetchBudget is how many pages each prefetch point requests: about
// 0.2 s of one-page requests on a machine that issues 80 K a second.
const prefetchBudget = 16384

// HostConfig configures MeasureHost.
type HostConfig struct {
	Path string // the scratch file, cold
	Size int64  // its size
	// IOPS is the device's measured 4 KiB random-read rate (0: unknown,
	// taken as fast): on a slower device the uncached reads and the
	// prefetch points are fewer, so that the phase stays about 10 s long.
	IOPS float64
	Log  io.Writer
}

// hostSizes are how much of the device MeasureHost's steps read.
type hostSizes struct {
	coldReads int // uncached reads of each kind (buffered, O_DIRECT)
	budget    int // pages each prefetch point requests
	minRanges int // ranges each prefetch point requests, at least
}

// sizesFor sizes the host phase for a device reading iops 4 KiB pages a
// second: each prefetch pass requests a quarter second of its reads
// (the full prefetchBudget from 65 536 IOPS up, at least 16 pages), and
// below 2000 IOPS the uncached reads are about 2 s of them (at least 100
// of each kind).
func sizesFor(iops float64) hostSizes {
	s := hostSizes{coldReads: coldReads, budget: prefetchBudget, minRanges: 256}
	if iops <= 0 {
		return s
	}
	s.coldReads = min(s.coldReads, max(100, int(iops)))
	s.budget = min(s.budget, max(16, int(iops/4)))
	s.minRanges = min(s.minRanges, s.budget)
	return s
}

// MeasureHost measures what this machine's CPUs cost a read served from
// the page cache and a prefetch issued through the kernel backend
// (backend.Kernel, as replay and the live runtime use it), on the scratch
// file c.Path, which must be cold. Each prefetch point requests distinct
// random ranges of the cold file, checks with cachestat that the kernel
// really read them, and then requests them again, cached, for the cost of
// a request that issues nothing. ctx is checked between steps. Needs
// Linux 6.5 (cachestat).
func MeasureHost(ctx context.Context, c HostConfig) (*formats.HostCosts, error) {
	if c.Log == nil {
		c.Log = io.Discard
	}
	path, size, sz, log := c.Path, c.Size, sizesFor(c.IOPS), c.Log
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("measure host: read CPU affinity: %w", err)
	}
	h := &formats.HostCosts{CPUs: set.Count()}
	var err error
	if h.ColdReadNS, h.ColdReadDirectNS, err = measureColdRead(path, size, sz.coldReads); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	fmt.Fprintf(log, "uncached 4 KiB pread: %.1f us through the page cache, %.1f us with O_DIRECT (%d of each)\n",
		float64(h.ColdReadNS)/1e3, float64(h.ColdReadDirectNS)/1e3, sz.coldReads)
	if h.ColdReadBytesPerSec, err = measureColdRate(path, size); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	fmt.Fprintf(log, "uncached reads through the page cache move each further byte at %.0f MiB/s (4 MiB against 4 KiB preads, up to %d of each)\n",
		h.ColdReadBytesPerSec/(1<<20), coldRateReads)
	if h.OpenNS, err = measureOpen(path); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	fmt.Fprintf(log, "open, fstat and close of a cached path: %.1f us\n", float64(h.OpenNS)/1e3)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	if h.PrefetchWakeNS, h.SubmitWakeNS, h.AdviseNS, err = measureWake(path, size); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	fmt.Fprintf(log, "a request to an idle kernel backend: issued after %.1f us; the submission took %.1f us; its FADVISE completed %.1f us after it was submitted\n",
		float64(h.PrefetchWakeNS)/1e3, float64(h.SubmitWakeNS)/1e3, float64(h.AdviseNS)/1e3)
	if h.PrefetchOwnNS, h.AdviseCurve, err = measureAdvise(path, size); err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	fmt.Fprintf(log, "the kernel backend's own time a request, fed one every %v: %.1f us; a FADVISE's latency with one submitted every", ownGap, float64(h.PrefetchOwnNS)/1e3)
	for _, p := range h.AdviseCurve {
		fmt.Fprintf(log, " %v: %.0f us", time.Duration(float64(time.Second)/p.PerSec), float64(p.NS)/1e3)
	}
	fmt.Fprintln(log)
	last, err := measurePrefetches(ctx, c, sz, h)
	if err != nil {
		return nil, err
	}
	one, per, err := measureCachedRead(path, last)
	if err != nil {
		return nil, fmt.Errorf("measure host: %w", err)
	}
	h.CachedReadNS, h.CachedReadPageNS = one, per
	fmt.Fprintf(log, "cached 4 KiB pread: %d ns, each further page %d ns\n", one, per)
	return h, nil
}

// measurePrefetches measures each of prefetchPoints into h (c.Log set)
// and returns the last point's ranges, cached now.
func measurePrefetches(ctx context.Context, c HostConfig, sz hostSizes, h *formats.HostCosts) ([]policies.Range, error) {
	log := c.Log
	var last []policies.Range
	for _, n := range prefetchPoints {
		cost, err := measurePrefetch(ctx, c.Path, c.Size, n, sz)
		if err != nil {
			return nil, fmt.Errorf("measure host: prefetch %d-page ranges: %w", n, err)
		}
		fmt.Fprintf(log, "prefetch through the kernel backend, %d-page ranges: %.1f us a request", n, float64(cost.perReq)/1e3)
		if n == 1 {
			h.PrefetchCachedNS, h.PrefetchVia = cost.cachedNS, cost.via
			h.PrefetchBusyNS, h.BusySlowdown = cost.busyNS, cost.slowdown
			fmt.Fprintf(log, " (%.1f us when cached; %.1f us with a busy thread alongside, whose steps took %.2fx as long)",
				float64(cost.cachedNS)/1e3, float64(cost.busyNS)/1e3, cost.slowdown)
		}
		fmt.Fprintln(log)
		h.Prefetch = append(h.Prefetch, formats.PrefetchCost{Pages: n, NS: cost.perReq})
		last = cost.ranges
	}
	return last, nil
}

// prefetchResult is one prefetch point.
type prefetchResult struct {
	perReq   uint64 // ns per request of uncached pages
	cachedNS uint64 // ns per request of cached pages
	// With a busy thread alongside (one-page point only): ns per request,
	// and that thread's slowdown.
	busyNS   uint64
	slowdown float64
	via      string
	ranges   []policies.Range // the ranges, cached now
}

// fileRef registers path as file id 1, by its identity now.
func fileRef(path string) (backend.FileRef, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return backend.FileRef{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return backend.FileRef{}, fmt.Errorf("stat %s: %w", abs, err)
	}
	return backend.FileRef{ID: 1, Dev: formats.KernelDev(st.Dev), Ino: st.Ino, Path: abs}, nil
}

// prefetchRun is one pass of requests through a new kernel backend.
type prefetchRun struct {
	path string
	ref  backend.FileRef
	ps   int
	reqs []policies.Request
}

// issue submits every request at once and returns the time until the
// backend has issued them all (Close).
func (p *prefetchRun) issue() (time.Duration, backend.Report, error) {
	reg := backend.NewRegistry()
	defer reg.Close()
	if _, err := reg.Add(p.ref); err != nil {
		return 0, backend.Report{}, err
	}
	pages := 0
	for i := range p.reqs {
		pages += int(p.reqs[i].Ranges[0].N)
	}
	b := backend.NewKernel(reg, backend.Options{PageSize: p.ps, Queue: len(p.reqs), InFlight: pages})
	t0 := time.Now()
	for i := range p.reqs {
		if err := b.Submit(&p.reqs[i]); err != nil {
			b.Close()
			return 0, backend.Report{}, err
		}
	}
	r, err := b.Close()
	return time.Since(t0), r, err
}

// cold issues the requests on the cold file, checks that the kernel read
// their pages, and waits for the reads to complete.
func (p *prefetchRun) cold(size int64) (time.Duration, backend.Report, error) {
	if err := evictRetry(p.path, size); err != nil {
		return 0, backend.Report{}, err
	}
	d, r, err := p.issue()
	if err != nil {
		return 0, r, err
	}
	want := uint64(len(p.reqs)) * uint64(p.reqs[0].Ranges[0].N)
	if r.Stats.Dropped > 0 || r.Stats.Failures > 0 || r.Stats.PagesSubmitted < want*9/10 {
		return 0, r, fmt.Errorf("the backend issued %d of %d pages (%d dropped, %d failed; %v)", r.Stats.PagesSubmitted, want, r.Stats.Dropped, r.Stats.Failures, r.Warnings)
	}
	return d, r, awaitCached(p.path, p.reqs, want)
}

// measurePrefetch times the kernel backend over distinct random n-page
// ranges of the cold file path: alone, again with the pages cached, and
// (n 1) cold again while a thread reads a cached page of the file.
func measurePrefetch(ctx context.Context, path string, size int64, n uint32, sz hostSizes) (prefetchResult, error) {
	ps := os.Getpagesize()
	slots := int(size / int64(ps) / int64(n))
	k := min(max(sz.budget/int(n), sz.minRanges), slots-1)
	if k < 16 {
		return prefetchResult{}, fmt.Errorf("%s holds %d ranges, want at least 17", path, slots)
	}
	ref, err := fileRef(path)
	if err != nil {
		return prefetchResult{}, err
	}
	p := &prefetchRun{path: path, ps: ps, ref: ref}
	p.reqs = make([]policies.Request, k)
	for i, s := range rand.Perm(slots - 1)[:k] { // not slot 0: the reader's
		p.reqs[i] = policies.Request{File: 1, Ranges: []policies.Range{{First: uint64(s+1) * uint64(n), N: n}}}
	}
	// prefetchRounds rounds, the passes alternating; the medians.
	var idle, cached, busy, slow []float64
	var via string
	want := uint64(k) * uint64(n)
	for range prefetchRounds {
		if err := ctx.Err(); err != nil {
			return prefetchResult{}, err
		}
		d, r, err := p.cold(size)
		if err != nil {
			return prefetchResult{}, err
		}
		dc, rc, err := p.issue()
		if err != nil {
			return prefetchResult{}, err
		}
		if rc.Stats.PagesCached < want*9/10 {
			return prefetchResult{}, fmt.Errorf("the second pass found %d of %d pages cached", rc.Stats.PagesCached, want)
		}
		idle, cached, via = append(idle, float64(d)/float64(k)), append(cached, float64(dc)/float64(k)), r.Via
		if n == 1 {
			for _, read := range []bool{true, false} {
				db, s, err := p.withThread(size, read)
				if err != nil {
					return prefetchResult{}, err
				}
				busy, slow = append(busy, float64(db)/float64(k)), append(slow, s)
			}
		}
	}
	res := prefetchResult{perReq: uint64(median(idle)), cachedNS: uint64(median(cached)), via: via}
	if n == 1 {
		res.busyNS, res.slowdown = uint64(median(busy)), median(slow)
	}
	for i := range p.reqs {
		res.ranges = append(res.ranges, p.reqs[i].Ranges[0])
	}
	return res, nil
}

// withThread runs the cold pass while a thread preads the file's first
// page (cached) all along (read), or computes (spins on a counter), and
// returns the pass's time and how much slower that thread's steps were
// meanwhile than in the 50 ms before.
func (p *prefetchRun) withThread(size int64, read bool) (time.Duration, float64, error) {
	if err := evictRetry(p.path, size); err != nil {
		return 0, 0, err
	}
	f, err := os.Open(p.path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	buf := make([]byte, p.ps)
	if _, err := unix.Pread(int(f.Fd()), buf, 0); err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", p.path, err)
	}
	var reads atomic.Uint64
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			if !read {
				spinWork()
			} else if _, err := unix.Pread(int(f.Fd()), buf, 0); err != nil {
				done <- fmt.Errorf("read %s: %w", p.path, err)
				return
			}
			reads.Add(1)
		}
		done <- nil
	}()
	time.Sleep(10 * time.Millisecond) // the reader's thread is running
	r0, t0 := reads.Load(), time.Now()
	time.Sleep(50 * time.Millisecond)
	r1, t1 := reads.Load(), time.Now()
	d, _, err := p.issue()
	r2, t2 := reads.Load(), time.Now()
	stop.Store(true)
	if rerr := <-done; err == nil {
		err = rerr
	}
	if err != nil {
		return 0, 0, err
	}
	if r1 == r0 || r2 == r1 {
		return 0, 0, errors.New("the reader thread did not run")
	}
	alone := float64(t1.Sub(t0)) / float64(r1-r0)
	during := float64(t2.Sub(t1)) / float64(r2-r1)
	want := uint64(len(p.reqs))
	return d, max(during/alone, 1), awaitCached(p.path, p.reqs, want)
}

// onePage is a request of page p of file 1.
func onePage(p int) *policies.Request {
	return &policies.Request{File: 1, Ranges: []policies.Range{{First: uint64(p), N: 1}}}
}

// spinUntil spins until t: a paced submitter that does not sleep, so that
// its CPU does not idle between requests.
func spinUntil(t time.Time) {
	for time.Now().Before(t) {
	}
}

// spinSink keeps spinWork's result alive.
var spinSink uint64

// spinWork is about a microsecond of user-space work.
func spinWork() {
	x := spinSink
	for i := range uint64(400) {
		x = x*6364136223846793005 + i
	}
	spinSink = x
}

// evictRetry evicts the file, retrying for up to 2 s while pages under
// read stay (POSIX_FADV_DONTNEED leaves locked pages).
func evictRetry(path string, size int64) error {
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err = EnsureCold(path, size); err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// awaitCached waits up to 10 s for the pages of reqs to be in the page
// cache (read in, or being read: cachestat counts both), and fails if
// fewer than 90% of want are: a WILLNEED that reads nothing would make
// the measurement meaningless.
func awaitCached(path string, reqs []policies.Request, want uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ps := uint64(os.Getpagesize())
	var got uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		got = 0
		for i := range reqs {
			r := reqs[i].Ranges[0]
			var cs unix.Cachestat_t
			cr := unix.CachestatRange{Off: r.First * ps, Len: uint64(r.N) * ps}
			if err := unix.Cachestat(uint(f.Fd()), &cr, &cs, 0); err != nil {
				return fmt.Errorf("check prefetched pages of %s: %w", path, err)
			}
			got += cs.Cache
		}
		if got >= want*9/10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got < want*9/10 {
		return fmt.Errorf("only %d of %d prefetched pages of %s are in the page cache: the kernel did not read them", got, want, path)
	}
	// Wait for the reads still in flight (cachestat counts them), so that
	// the next point can evict the file.
	buf := make([]byte, ps)
	for i := range reqs {
		r := reqs[i].Ranges[0]
		if _, err := unix.Pread(int(f.Fd()), buf, int64((r.First+uint64(r.N)-1)*ps)); err != nil {
			return fmt.Errorf("read prefetched pages of %s: %w", path, err)
		}
	}
	return nil
}

// measureCachedRead times preads of cached pages of path, as a program
// reading a large cached file does: 4 KiB reads of random pages, and 64
// KiB reads of random 16-page ranges, of the ranges that are cached (the
// last prefetch point's); it returns the median ns of a 4 KiB read, and
// what each further page of a 64 KiB read adds.
func measureCachedRead(path string, cached []policies.Range) (one, per uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fd := int(f.Fd())
	ps := os.Getpagesize()
	var pages, chunks []int64
	for _, r := range cached {
		for p := range uint64(r.N) {
			pages = append(pages, int64(r.First+p)*int64(ps))
			if p%16 == 0 && p+16 <= uint64(r.N) {
				chunks = append(chunks, int64(r.First+p)*int64(ps))
			}
		}
	}
	if len(chunks) == 0 {
		return 0, 0, errors.New("time cached reads: no cached range of 16 pages")
	}
	// The reads must be of cached pages, or this measures the device.
	var got, want uint64
	for _, r := range cached {
		var cs unix.Cachestat_t
		cr := unix.CachestatRange{Off: r.First * uint64(ps), Len: uint64(r.N) * uint64(ps)}
		if err := unix.Cachestat(uint(fd), &cr, &cs, 0); err != nil {
			return 0, 0, fmt.Errorf("time cached reads: cachestat %s: %w", path, err)
		}
		got, want = got+cs.Cache, want+uint64(r.N)
	}
	if got < want {
		return 0, 0, fmt.Errorf("time cached reads: only %d of the %d pages prefetched from %s are cached", got, want, path)
	}
	buf := make([]byte, 16*ps)
	one, err = medianRead(fd, buf[:ps], pages)
	if err != nil {
		return 0, 0, err
	}
	sixteen, err := medianRead(fd, buf, chunks)
	if err != nil {
		return 0, 0, err
	}
	if sixteen > one {
		per = (sixteen - one) / 15
	}
	return one, per, nil
}

// wakeRequests is how many requests measureWake times, each after the
// backend has been idle for wakeGap.
const (
	wakeRequests = 300
	wakeGap      = 300 * time.Microsecond
)

// measureWake submits one-page requests of the cold file path to an idle
// kernel backend, one at a time, and returns the medians of the time until
// the backend issues each (Options.Issued) and of the Submit call, and the
// mean time from submitting each FADVISE to its completion (the backend
// waits for it, having nothing else to do: Report.AdviseNS).
func measureWake(path string, size int64) (wake, submit, advise uint64, err error) {
	waits, subs, r, err := wakePass(path, size, wakeRequests, func() { time.Sleep(wakeGap) })
	if err != nil {
		return 0, 0, 0, err
	}
	if r.Advised > 0 {
		advise = r.AdviseNS / r.Advised
	}
	return uint64(median(waits)), uint64(median(subs)), advise, nil
}

// adviseGaps are the intervals of the open-loop passes that measure the
// backend's own time (at ownGap, where the kernel keeps up: a saturated
// pass takes about 5 us a request here) and the FADVISE latency by rate
// (HostCosts.AdviseCurve); each pass submits adviseRequests one-page
// requests, and adviseRounds rounds rotate the order. One pass's mean
// latency swings 2-5x from one pass to the next at the same rate (42 to
// 200 us at 100 K a second, 2026-12-07), with the CPUs' halting and
// io-wq's pool of workers, so the curve pools every round's FADVISEs.
var adviseGaps = []time.Duration{200 * time.Microsecond, 50 * time.Microsecond, 20 * time.Microsecond, 10 * time.Microsecond, 5 * time.Microsecond}

const (
	ownGap         = 50 * time.Microsecond
	adviseRequests = 1000
	adviseRounds   = 8
)

// measureAdvise returns the backend's own time a request at ownGap and
// the advise curve: for each of adviseGaps, the mean time from
// submitting a FADVISE to its completion over every round's passes, with
// requests submitted one every gap whether or not the backend has issued
// the last (as a policy's stream comes), made non-decreasing in the rate
// (monotone).
func measureAdvise(path string, size int64) (uint64, []formats.AdvisePoint, error) {
	sum := make([]float64, len(adviseGaps))
	cnt := make([]float64, len(adviseGaps))
	var own, owned float64
	for r := range adviseRounds {
		for k := range adviseGaps {
			i := (k + r) % len(adviseGaps)
			rep, n, err := pacedPass(path, size, adviseGaps[i])
			if err != nil {
				return 0, nil, err
			}
			if rep.Advised == 0 || rep.BusyNS < rep.OpenNS {
				return 0, nil, fmt.Errorf("time FADVISEs one every %v: %d of %d advised, busy %d ns, opening %d ns", adviseGaps[i], rep.Advised, n, rep.BusyNS, rep.OpenNS)
			}
			sum[i] += float64(rep.AdviseNS)
			cnt[i] += float64(rep.Advised)
			if adviseGaps[i] == ownGap {
				own += float64(rep.BusyNS - rep.OpenNS)
				owned += float64(n)
			}
		}
	}
	var curve []formats.AdvisePoint
	for i, gap := range adviseGaps { // descending gaps: ascending rates
		curve = append(curve, formats.AdvisePoint{PerSec: float64(time.Second / gap), NS: uint64(sum[i] / cnt[i])})
	}
	return uint64(own / owned), monotone(curve), nil
}

// monotone returns c with its latencies made non-decreasing by pooling
// adjacent violators (each violating run replaced by its mean).
func monotone(c []formats.AdvisePoint) []formats.AdvisePoint {
	type block struct{ sum, n float64 }
	var bs []block
	for _, p := range c {
		bs = append(bs, block{float64(p.NS), 1})
		for len(bs) > 1 && bs[len(bs)-2].sum/bs[len(bs)-2].n > bs[len(bs)-1].sum/bs[len(bs)-1].n {
			a, b := bs[len(bs)-2], bs[len(bs)-1]
			bs = append(bs[:len(bs)-2], block{a.sum + b.sum, a.n + b.n})
		}
	}
	out := make([]formats.AdvisePoint, 0, len(c))
	for _, b := range bs {
		for range int(b.n) {
			out = append(out, formats.AdvisePoint{PerSec: c[len(out)].PerSec, NS: uint64(b.sum / b.n)})
		}
	}
	return out
}

// pacedPass evicts file path, registers it as file 1 of a new kernel
// backend, submits adviseRequests one-page requests of random pages of
// it, one every gap (the submitting thread spins between them), and
// returns the backend's report and how many it submitted.
func pacedPass(path string, size int64, gap time.Duration) (backend.Report, int, error) {
	var n int
	r, err := withColdBackend(path, size, backend.Options{}, func(b *backend.Kernel) (err error) {
		n, err = feedPaced(b, int(size/int64(os.Getpagesize())), adviseRequests, gap)
		return err
	})
	return r, n, err
}

// withColdBackend evicts file path, registers it as file 1 of a new
// kernel backend with options o, runs fn with the backend, closes it and
// returns its report.
func withColdBackend(path string, size int64, o backend.Options, fn func(*backend.Kernel) error) (backend.Report, error) {
	if err := evictRetry(path, size); err != nil {
		return backend.Report{}, err
	}
	ref, err := fileRef(path)
	if err != nil {
		return backend.Report{}, err
	}
	reg := backend.NewRegistry()
	defer reg.Close()
	if _, err := reg.Add(ref); err != nil {
		return backend.Report{}, err
	}
	b := backend.NewKernel(reg, o)
	err = fn(b)
	r, cerr := b.Close()
	return r, errors.Join(err, cerr)
}

// feedPaced submits n requests (at most pages) of random pages of file
// 1 to b, one every gap from one OS thread, and returns how many.
func feedPaced(b *backend.Kernel, pages, n int, gap time.Duration) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	perm := rand.Perm(pages)[:min(n, pages)]
	next := time.Now()
	for _, p := range perm {
		next = next.Add(gap)
		spinUntil(next)
		if err := b.Submit(onePage(p)); err != nil {
			return 0, err
		}
	}
	return len(perm), nil
}

// wakePass evicts file path, registers it as file 1 of a new kernel
// backend and submits n one-page requests of random pages of it, each
// after wait returns (the backend idle since the last was issued), from
// one OS thread; it returns the times from each Submit until the backend
// issued it and of the Submit calls, in ns, and the backend's report.
func wakePass(path string, size int64, n int, wait func()) (waits, subs []float64, r backend.Report, err error) {
	var issued atomic.Int64
	o := backend.Options{Issued: func(uint32, uint64, uint64) { issued.Store(time.Now().UnixNano()) }}
	r, err = withColdBackend(path, size, o, func(b *backend.Kernel) (err error) {
		waits, subs, err = timeWakes(b, &issued, int(size/int64(os.Getpagesize())), n, wait)
		return err
	})
	return waits, subs, r, err
}

// timeWakes submits n requests (at most pages) to b, of random pages of
// file 1 (pages long), each after wait returns, and returns the times
// until issued (which b's Issued stores in issued) and of the Submit
// calls, in ns.
func timeWakes(b *backend.Kernel, issued *atomic.Int64, pages, n int, wait func()) (waits, subs []float64, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, p := range rand.Perm(pages)[:min(n, pages)] {
		wait()
		issued.Store(0)
		t0 := time.Now()
		if err := b.Submit(onePage(p)); err != nil {
			return nil, nil, err
		}
		t1 := time.Now()
		for issued.Load() == 0 {
			if time.Since(t0) > time.Second {
				return nil, nil, errors.New("time an idle backend: a request was not issued within 1 s")
			}
		}
		waits = append(waits, float64(issued.Load()-t0.UnixNano()))
		subs = append(subs, float64(t1.Sub(t0)))
	}
	return waits, subs, nil
}

// measureOpen returns the median time of open(2) by path, fstat(2) and
// close(2) of path, cached, over 50 batches of 100.
func measureOpen(path string) (uint64, error) {
	const batches, opens = 50, 100
	per := make([]float64, batches)
	var st unix.Stat_t
	for b := range per {
		t0 := time.Now()
		for range opens {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
			if err != nil {
				return 0, fmt.Errorf("open %s: %w", path, err)
			}
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err != nil {
				return 0, fmt.Errorf("stat %s: %w", path, err)
			}
		}
		per[b] = float64(time.Since(t0)) / opens
	}
	return uint64(median(per)), nil
}

// coldReads is how many uncached pages of each kind measureColdRead
// reads on a fast device.
const coldReads = 2000

// measureColdRead returns the median times of n 4 KiB preads of distinct
// random pages of the cold file path, one at a time, through the page
// cache with readahead off for the descriptor (POSIX_FADV_RANDOM, so that
// each reads its page alone), and with O_DIRECT, alternating, so that both
// see the device in the same state.
func measureColdRead(path string, size int64, n int) (buffered, direct uint64, err error) {
	f, err := openUncached(path, size)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	d, err := engine.OpenDirect(path, os.O_RDONLY)
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	ps := os.Getpagesize()
	pages := int(size / int64(ps))
	if pages < 4*n {
		return 0, 0, fmt.Errorf("time uncached reads: %s holds %d pages, want %d", path, pages, 4*n)
	}
	buf, err := unix.Mmap(-1, 0, ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, 0, fmt.Errorf("time uncached reads: map a buffer: %w", err)
	}
	defer unix.Munmap(buf)
	var lb, ld []float64
	perm := rand.Perm(pages)
	for i := range n {
		for j, fd := range []int{int(f.Fd()), int(d.Fd())} {
			p := perm[2*i+j]
			t0 := time.Now()
			if n, err := rawsys.Pread(fd, buf, int64(p)*int64(ps)); err != nil || n < ps {
				return 0, 0, fmt.Errorf("read %s page %d: %d bytes, %v", path, p, n, err)
			}
			if j == 0 {
				lb = append(lb, float64(time.Since(t0)))
			} else {
				ld = append(ld, float64(time.Since(t0)))
			}
		}
	}
	return uint64(median(lb)), uint64(median(ld)), nil
}

// openUncached evicts the file and opens it with readahead off
// (POSIX_FADV_RANDOM), so that a pread reads exactly its own pages.
func openUncached(path string, size int64) (*os.File, error) {
	if err := evictRetry(path, size); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		f.Close()
		return nil, fmt.Errorf("turn readahead off for %s: %w", path, err)
	}
	return f, nil
}

// coldRateReads is how many 4 MiB and 4 KiB uncached reads measureColdRate
// alternates (64 MiB), fewer in a file of under 32 4 MiB chunks.
const coldRateReads = 16

// measureColdRate returns the rate at which an uncached pread(2) through
// the page cache, readahead off, moves its bytes beyond the first page:
// (4 MiB − 4 KiB) over the median time of a 4 MiB read less the median of
// a 4 KiB one, the two alternated at random 4 MiB-aligned offsets of the
// evicted file.
func measureColdRate(path string, size int64) (float64, error) {
	const big = 4 << 20
	f, err := openUncached(path, size)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunks := int(size / big)
	reads := min(coldRateReads, chunks/2)
	if reads < 2 {
		return 0, fmt.Errorf("time uncached 4 MiB reads: %s holds %d 4 MiB chunks, want at least 4", path, chunks)
	}
	buf, err := unix.Mmap(-1, 0, big, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return 0, fmt.Errorf("time uncached 4 MiB reads: map a buffer: %w", err)
	}
	defer unix.Munmap(buf)
	ps := os.Getpagesize()
	var lb, ls []float64
	perm := rand.Perm(chunks)
	for i := range reads {
		for j, n := range []int{big, ps} {
			off := int64(perm[2*i+j]) * big
			t0 := time.Now()
			if got, err := rawsys.Pread(int(f.Fd()), buf[:n], off); err != nil || got < n {
				return 0, fmt.Errorf("read %d bytes of %s at %d: %d bytes, %v", n, path, off, got, err)
			}
			if j == 0 {
				lb = append(lb, float64(time.Since(t0)))
			} else {
				ls = append(ls, float64(time.Since(t0)))
			}
		}
	}
	d := median(lb) - median(ls)
	if !(d > 0) {
		return 0, fmt.Errorf("time uncached reads of %s: a 4 MiB read took %.0f ns, no longer than a 4 KiB one (%.0f ns)", path, median(lb), median(ls))
	}
	return float64(big-ps) / d * 1e9, nil
}

// medianRead returns the median ns per pread of len(buf) bytes at random
// offsets of offs over 50 batches of 200. The preads are raw system calls
// (internal/rawsys), as replay and a C program make them.
func medianRead(fd int, buf []byte, offs []int64) (uint64, error) {
	const batches, reads = 50, 200
	per := make([]uint64, batches)
	for b := range per {
		at := make([]int64, reads)
		for i := range at {
			at[i] = offs[rand.IntN(len(offs))]
		}
		t0 := time.Now()
		for _, off := range at {
			n, err := rawsys.Pread(fd, buf, off)
			if err != nil || n < len(buf) {
				return 0, fmt.Errorf("read cached pages at %d: %d bytes, %v", off, n, err)
			}
		}
		per[b] = uint64(time.Since(t0).Nanoseconds()) / reads
	}
	slices.Sort(per)
	return per[batches/2], nil
}
