package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/policies"
)

// Backend names (package backend).
const (
	BackendKernel = backend.NameKernel
	BackendKmod   = backend.NameKmod // the predictio kernel module (package kmod)
	BackendDirect = backend.NameDirect
	BackendNone   = backend.NameNone
)

// Baseline is the run name of a replay without a policy.
const Baseline = "baseline"

// Timing modes.
const (
	TimingRecorded = "recorded"
	TimingASAP     = "asap"
)

// Options configure a replay. The zero value replays each file at its
// recorded path, through the kernel backend, with recorded timing.
type Options struct {
	// Root remaps recorded paths to the same paths under Root.
	Root string
	// AllowChanged replays files whose size or mtime differ from the
	// recording, as long as they are long enough.
	AllowChanged bool
	// Backend is "kernel" (default), "kmod", "direct" or "none".
	Backend string
	// Timing is "recorded" (default) or "asap".
	Timing string
	// Speed divides recorded think times; 0 means 1.
	Speed float64
	// Runs are the run specs, replayed in turn Repeat times (A B A B ...):
	// "baseline" (no policy) or policy specs ("oracle", "tree:window=8");
	// specs joined with "+" run together in one dispatcher.
	Runs []string
	// Repeat is the number of rounds; 0 means 1.
	Repeat int
	// Markov is a trained model for the markov policy.
	Markov *policies.MarkovModel

	// Warm skips eviction: runs start with whatever is cached and are
	// reported warm. Without Warm, kernel and none runs evict the files
	// and verify they are cold first.
	Warm bool
	// DropCaches also writes /proc/sys/vm/drop_caches before a cold run
	// (root only).
	DropCaches bool
	// InFlight bounds the kernel backend's queued pages; 0 means 8192.
	InFlight int
	// Readahead makes the kernel backend use readahead(2) instead of
	// posix_fadvise(WILLNEED).
	Readahead bool

	// CachePages is the direct backend's user-space cache in pages; 0
	// means 65536 (256 MiB with 4 KiB pages).
	CachePages int
	// QueueDepth bounds the direct backend's prefetch reads in flight; 0
	// means 64.
	QueueDepth int
	// SQPoll makes the direct backend's engine use an SQPOLL ring.
	SQPoll bool

	// Progress, when set, receives a progress bar.
	Progress io.Writer

	// skipEvict is a test hook: evict verifies but drops nothing.
	skipEvict bool
}

// Run is the result of one replay run.
type Run struct {
	Policy  string `json:"policy"`
	Round   int    `json:"round"`
	Backend string `json:"backend"`
	// Cold is true when the run started with every file verified uncached
	// (kernel and none backends), or with an empty user-space cache
	// (direct).
	Cold     bool    `json:"cold"`
	WallNS   int64   `json:"wall_ns"`
	StallNS  int64   `json:"stall_ns"`
	Accesses int     `json:"accesses"`
	Pages    uint64  `json:"pages"`
	P50US    float64 `json:"p50_us"`
	P99US    float64 `json:"p99_us"`
	MaxUS    float64 `json:"max_us"`

	// Prefetched, Used and Wasted count pages the backend read ahead,
	// those a demand access used later, and the rest.
	Prefetched uint64 `json:"pages_prefetched"`
	Used       uint64 `json:"pages_used"`
	Wasted     uint64 `json:"pages_wasted"`
	// DemandMisses counts demand pages read from the device (direct), and
	// LatePrefetches demand pages that waited for a prefetch in flight.
	DemandMisses   uint64 `json:"demand_misses,omitempty"`
	DemandHits     uint64 `json:"demand_hits,omitempty"`
	LatePrefetches uint64 `json:"late_prefetches,omitempty"`
	// DevicePages counts pages the direct backend read with O_DIRECT,
	// demand and prefetch.
	DevicePages uint64 `json:"device_pages,omitempty"`
	// PagesDropped counts pages of requests the backend dropped because a
	// bound was hit (Counters.Dropped counts the requests).
	PagesDropped uint64 `json:"pages_dropped"`
	// DeviceReadBytes is the process's storage reads during the run
	// (read_bytes of /proc/self/io): demand, kernel readahead and
	// prefetch together.
	DeviceReadBytes uint64 `json:"device_read_bytes"`

	// Via says how the backend executed prefetches.
	Via      string                `json:"prefetch_via,omitempty"`
	Counters policies.BackendStats `json:"counters"`
	Events   uint64                `json:"events_dispatched"`
	Hints    int                   `json:"hints_delivered"`
	Warnings []string              `json:"warnings,omitempty"`

	lat []int64 // per-access latency, ns, sorted
}

// Latencies returns the run's per-access latencies in nanoseconds, sorted.
func (r *Run) Latencies() []int64 { return r.lat }

// demander executes the demand accesses of one run: through the page
// cache, or through the direct backend's user-space cache.
type demander interface {
	demand(w *worker, o *op) error
}

// Replayer replays one bundle.
type Replayer struct {
	t     *trace
	opt   Options
	paths []string
	fut   *policies.Future
}

// New loads the bundle in dir and checks its files.
func New(dir string, opt Options) (*Replayer, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	t, err := loadTrace(dir)
	if err != nil {
		return nil, err
	}
	return newReplayer(t, opt)
}

func (opt *Options) validate() error {
	if opt.Backend == "" {
		opt.Backend = BackendKernel
	}
	switch opt.Backend {
	case BackendKernel, BackendKmod, BackendDirect, BackendNone:
	default:
		return fmt.Errorf("replay: unknown backend %q; use kernel, kmod, direct or none", opt.Backend)
	}
	if opt.Backend == BackendKmod {
		if err := backend.KmodAvailable(); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	if opt.Timing == "" {
		opt.Timing = TimingRecorded
	}
	if opt.Timing != TimingRecorded && opt.Timing != TimingASAP {
		return fmt.Errorf("replay: unknown timing %q; use recorded or asap", opt.Timing)
	}
	if opt.Speed == 0 {
		opt.Speed = 1
	}
	if opt.Speed < 0 || math.IsNaN(opt.Speed) || math.IsInf(opt.Speed, 0) {
		return fmt.Errorf("replay: speed %v must be a positive number", opt.Speed)
	}
	if opt.Repeat <= 0 {
		opt.Repeat = 1
	}
	if len(opt.Runs) == 0 {
		opt.Runs = []string{Baseline}
	}
	return nil
}

func newReplayer(t *trace, opt Options) (*Replayer, error) {
	paths, err := checkFiles(t, opt.Root, opt.AllowChanged)
	if err != nil {
		return nil, err
	}
	if opt.Backend == BackendDirect {
		for _, f := range t.used() {
			if err := checkDirectFS(paths[f.idx]); err != nil {
				return nil, err
			}
		}
	}
	r := &Replayer{t: t, opt: opt, paths: paths}
	// Build every policy once up front so that a bad spec fails before
	// the first run.
	for _, spec := range opt.Runs {
		if _, err := r.buildPolicies(spec, nil); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Accesses returns the number of demand accesses a run replays.
func (r *Replayer) Accesses() int { return r.t.ops }

// Skipped returns accesses that are not replayed: non-demand kinds, unknown
// file ids, and pages past the recorded end of file.
func (r *Replayer) Skipped() (kinds, unknownFile, pastEOFPages uint64) {
	return r.t.skipped, r.t.unknown, r.t.clipped
}

// SplitRuns splits a comma-separated list of run specs. Commas inside one
// policy's parameters ("baseline,markov:depth=4,threshold=0.2") stay with it:
// an element with "=" but no ":" continues the previous spec.
func SplitRuns(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if len(out) > 0 && strings.Contains(part, "=") && !strings.Contains(part, ":") {
			out[len(out)-1] += "," + part
			continue
		}
		out = append(out, part)
	}
	return out
}

// policyEnv describes the trace's files to policies.
func (r *Replayer) policyEnv() policies.Env {
	ps := r.t.pageSize
	return policies.Env{
		PageSize: ps,
		FilePages: func(id uint32) uint64 {
			if fi := r.t.byID[id]; fi != nil {
				return fi.pages(ps)
			}
			return 0
		},
		FileKey: func(id uint32) (policies.FileKey, bool) {
			fi := r.t.byID[id]
			if fi == nil {
				return policies.FileKey{}, false
			}
			return policies.KeyOf(&fi.File), true
		},
		Markov: r.opt.Markov,
	}
}

// buildPolicies builds the policies of a run spec; baseline has none.
func (r *Replayer) buildPolicies(spec string, files []*openFile) ([]policies.Policy, error) {
	if spec == Baseline || spec == "" {
		return nil, nil
	}
	env := r.policyEnv()
	var out []policies.Policy
	for _, one := range strings.Split(spec, "+") {
		name, _, _ := strings.Cut(one, ":")
		if name == "oracle" {
			if r.fut == nil {
				r.fut = r.t.future()
			}
			env.Future = r.fut
		}
		p, err := policies.Build(one, env)
		if err != nil {
			return nil, fmt.Errorf("replay run %q: %w", spec, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Replay runs every run spec Repeat times, alternating (A B A B ...).
func (r *Replayer) Replay(ctx context.Context) (*Report, error) {
	rep := &Report{Bundle: r.t.dir, Backend: r.opt.Backend, Timing: r.opt.Timing, Speed: r.opt.Speed,
		Accesses: r.t.ops, Pages: r.t.pages, Threads: len(r.t.threads), Hints: len(r.t.hints),
		SkippedKinds: r.t.skipped, UnknownFileRows: r.t.unknown, UnknownFileHints: r.t.hintSkip, PagesPastEOF: r.t.clipped}
	for round := 0; round < r.opt.Repeat; round++ {
		for _, spec := range r.opt.Runs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			run, err := r.runOnce(ctx, spec, round)
			if err != nil {
				return nil, fmt.Errorf("replay run %q (round %d): %w", spec, round+1, err)
			}
			rep.Runs = append(rep.Runs, run)
		}
	}
	rep.summarize(r.opt.Runs)
	return rep, nil
}

// worker replays one recorded thread.
type worker struct {
	id    int
	r     *runState
	th    *thread
	buf   []byte
	sink  byte
	lat   []int64
	stall int64
	err   error

	slots, waitOn []waitSlot // direct backend scratch
}

// buffer returns a scratch buffer of n bytes, page aligned.
func (w *worker) buffer(n int) []byte {
	if cap(w.buf) < n {
		w.buf = alignedBuffer(n)
	}
	return w.buf[:n]
}

// runState is the shared state of one run.
type runState struct {
	rp       *Replayer
	dem      demander
	be       backend.Backend
	disp     *policies.Dispatcher
	mu       sync.Mutex // serializes the dispatcher
	ev       policies.Event
	emit     policies.Emit
	nextHint atomic.Uint64 // TS of the next undelivered hint; MaxUint64 when none
	hintIdx  int
	hints    int
	done     atomic.Int64
	start    time.Time
}

func (r *Replayer) runOnce(ctx context.Context, spec string, round int) (*Run, error) {
	name := r.opt.Backend
	if spec == Baseline && (name == BackendKernel || name == BackendKmod) {
		name = BackendNone // the baseline runs without prefetches
	}
	files, err := openFiles(r.t, r.paths, name == BackendDirect)
	if err != nil {
		return nil, err
	}
	defer closeFiles(files)

	run := &Run{Policy: spec, Round: round + 1, Backend: name, Accesses: r.t.ops, Pages: r.t.pages}
	if name != BackendDirect {
		if r.opt.Warm {
			run.Cold = false
		} else {
			if err := evict(files, r.opt.DropCaches, r.opt.skipEvict); err != nil {
				return nil, err
			}
			run.Cold = true
		}
	} else {
		run.Cold = true
	}
	ps, err := r.buildPolicies(spec, files)
	if err != nil {
		return nil, err
	}
	st := &runState{rp: r}
	fin, err := r.startBackend(st, name, files)
	if err != nil {
		return nil, err
	}
	if len(ps) > 0 {
		st.disp = policies.NewDispatcher(ps...)
		// Policies and the backend's registry both name files by bundle
		// file_id.
		be := st.be
		st.emit = func(req *policies.Request) { be.Submit(req) }
	}
	st.nextHint.Store(math.MaxUint64)
	if st.disp != nil && len(r.t.hints) > 0 {
		st.nextHint.Store(r.t.hints[0].TS)
	}

	io0 := readBytes()
	workers := make([]*worker, len(r.t.threads))
	for i, th := range r.t.threads {
		workers[i] = &worker{id: i, r: st, th: th, lat: make([]int64, len(th.ops))}
	}
	runtime.GC()
	st.start = time.Now()
	stopProgress := r.progress(st, spec, round)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx)
		}()
	}
	wg.Wait()
	run.WallNS = time.Since(st.start).Nanoseconds()
	stopProgress()
	if err := fin(run); err != nil {
		return nil, err
	}
	run.DeviceReadBytes = readBytes() - io0
	for _, w := range workers {
		if w.err != nil {
			return nil, w.err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lat := make([]int64, 0, r.t.ops)
	for _, w := range workers {
		run.StallNS += w.stall
		lat = append(lat, w.lat...)
	}
	sortInt64(lat)
	run.lat = lat
	run.P50US = float64(percentile(lat, 0.50)) / 1e3
	run.P99US = float64(percentile(lat, 0.99)) / 1e3
	run.MaxUS = float64(lat[len(lat)-1]) / 1e3
	if run.Policy == Baseline {
		run.Via = ""
	}

	if st.disp != nil {
		run.Events = st.disp.Events
	}
	run.Hints = st.hints
	return run, nil
}

// loop replays the thread's accesses in order.
func (w *worker) loop(ctx context.Context) {
	st := w.r
	opt := &st.rp.opt
	recorded := opt.Timing == TimingRecorded
	base, baseTS := st.start, st.rp.t.t0
	for i := range w.th.ops {
		if i&63 == 0 && ctx.Err() != nil {
			return
		}
		o := &w.th.ops[i]
		w.waitUntil(base, baseTS, o.ts, recorded)
		if st.disp != nil {
			st.mu.Lock()
			ev := &st.ev
			*ev = policies.Event{Kind: policies.EventFileAccess, TS: o.ts, PID: w.th.pid, TID: w.th.tid,
				File: st.rp.t.files[o.file].ID, Access: policies.FileAccess{Kind: o.kind, Page: o.page, NPages: o.n}}
			st.disp.Dispatch(ev, st.emit)
			st.mu.Unlock()
		}
		t0 := time.Now()
		err := st.dem.demand(w, o)
		end := time.Now()
		d := end.Sub(t0).Nanoseconds()
		w.lat[i] = d
		w.stall += d
		st.done.Add(1)
		if err != nil {
			w.err = err
			return
		}
		base, baseTS = end, o.ts
	}
}

// waitUntil delivers the hints due before ts, at their recorded offsets from
// (base, baseTS) when recorded, and with recorded timing waits until ts's
// offset.
func (w *worker) waitUntil(base time.Time, baseTS, ts uint64, recorded bool) {
	st := w.r
	speed := st.rp.opt.Speed
	for {
		h := st.nextHint.Load()
		if h > ts {
			break
		}
		// A hint due within hintSlack of the access is delivered now
		// rather than after a separate wait: early is harmless for a
		// hint, and it saves a timer per hint.
		if recorded && h > baseTS && float64(ts-h)/speed > float64(hintSlack) {
			sleepUntil(base.Add(time.Duration(float64(h-baseTS) / speed)))
		}
		st.deliverHints(h)
	}
	if recorded && ts > baseTS {
		sleepUntil(base.Add(time.Duration(float64(ts-baseTS) / speed)))
	}
}

// deliverHints dispatches every undelivered hint with TS <= upTo.
func (st *runState) deliverHints(upTo uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	hs := st.rp.t.hints
	for st.hintIdx < len(hs) && hs[st.hintIdx].TS <= upTo {
		h := &hs[st.hintIdx]
		st.hintIdx++
		if st.ev.FromHint(h) {
			st.disp.Dispatch(&st.ev, st.emit)
			st.hints++
		}
	}
	if st.hintIdx < len(hs) {
		st.nextHint.Store(hs[st.hintIdx].TS)
	} else {
		st.nextHint.Store(math.MaxUint64)
	}
}

// hintSlack is how much earlier than its timestamp a hint may be delivered
// with recorded timing.
const hintSlack = time.Millisecond

// sleepUntil waits until t: sleeping for waits over 1 ms, spinning (with
// yields) for the last stretch so that short think times are kept.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		if d > time.Millisecond {
			// Timers overshoot by tens of µs, more on a loaded machine:
			// sleep short of the target and spin the rest.
			time.Sleep(d - 500*time.Microsecond)
			continue
		}
		runtime.Gosched()
	}
}
