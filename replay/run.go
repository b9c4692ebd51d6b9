package replay

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/rawsys"
	"github.com/predictio/predictio/policies"
)

// worker replays one recorded thread.
type worker struct {
	id    int
	r     *runState
	th    *thread
	buf   []byte
	vec   []byte // mincore's, for map rows
	sink  byte
	lat   []int64 // per demand access
	stall int64
	end   time.Time // when its last operation completed
	meta  Metadata
	kinds kindTimes // recorded against replayed times, per kind
	// Metadata replay (metadata.go): the descriptor the last replayed
	// open returned, plus one, for settle (0: none) and its file; descriptors
	// kept for later operations on files no demand reads, oldest first;
	// the file of the operation before (+1) when it was an open.
	pending     int
	pendingFile uint32
	fds         map[uint32]int
	fdOrder     []uint32
	lastOpen    uint32
	err         error
	warn        string

	slots, waitOn []waitSlot // direct backend scratch
	// paths makes the replayed calls that take a path: raw system calls,
	// as the program made them (internal/rawsys).
	paths rawsys.Paths
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
	files    []*openFile
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
	start    time.Time // the replay clock's origin: bundle time t0
	// left counts, per file index, the run's operations still to come on
	// the file (all threads'); at 0 the file is retired. reg is the
	// backend's registry (page-cache backends), whose descriptor of a
	// retired file is closed too.
	left []atomic.Int32
	reg  *backend.Registry
	// retired holds the ids of retired files still in reg, oldest first:
	// a request the backend queued before a file's last operation may
	// still name it, so the backend's descriptor closes only after
	// keepRetired more files are retired.
	retireMu    sync.Mutex
	retired     []uint32
	keepRetired int
}

// opDone counts an operation on file idx done, retiring the file (the
// run's descriptors of it, the worker's kept one and the backend's) after
// the last. The direct backend's files stay open for its cache.
func (w *worker) opDone(idx uint32) {
	st := w.r
	if st.left == nil || st.left[idx].Add(-1) != 0 {
		return
	}
	if fd, ok := w.fds[idx]; ok {
		unix.Close(fd)
		delete(w.fds, idx)
	}
	if f := st.files[idx]; f != nil {
		f.retire()
		if st.reg != nil {
			st.retireMu.Lock()
			st.retired = append(st.retired, f.info.ID)
			for len(st.retired) > st.keepRetired {
				st.reg.Remove(st.retired[0])
				st.retired = st.retired[1:]
			}
			st.retireMu.Unlock()
		}
	}
}

// keepRetired is how many retired files keep their backend descriptor: an
// eighth of RLIMIT_NOFILE, 16 to 1024.
func keepRetired() int {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return 16
	}
	return int(min(max(lim.Cur/8, 16), 1024))
}

// at returns when bundle time ts falls on the replay clock.
func (st *runState) at(ts uint64) time.Time {
	return st.start.Add(time.Duration(float64(ts-st.rp.t.t0) / st.rp.opt.Speed))
}

func (r *Replayer) runOnce(ctx context.Context, spec string, round int) (*Run, error) {
	name := r.opt.Backend
	if spec == Baseline && (name == BackendKernel || name == BackendKmod) {
		name = BackendNone // the baseline runs without prefetches
	}
	files, err := openFiles(r.t, r.paths, name == BackendDirect, r.t.metaOps > 0)
	if err != nil {
		return nil, err
	}
	defer closeFiles(files)

	run := &Run{Policy: spec, Round: round + 1, Backend: name, Accesses: r.t.ops, Pages: r.t.pages}
	if r.opt.beforeRun != nil {
		r.opt.beforeRun(spec, round)
	}
	r.observe(spec)
	if err := r.makeCold(run, files); err != nil {
		return nil, err
	}
	ps, err := r.buildPolicies(spec, files)
	if err != nil {
		return nil, err
	}
	st := &runState{rp: r, files: files}
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
		// The bundle's exec rows (a launch's exec comes before its
		// accesses) are dispatched as the run starts: the launch policy
		// prefetches from them.
		for i := range r.t.execRows {
			var ev policies.Event
			ev.FromAccess(&r.t.execRows[i])
			st.disp.Dispatch(&ev, st.emit)
		}
	}
	io0 := readBytes()
	workers := r.execute(ctx, st, spec, round)
	if err := fin(run); err != nil {
		return nil, err
	}
	run.DeviceReadBytes = readBytes() - io0
	for _, w := range workers {
		if w.err != nil {
			return nil, w.err
		}
		if w.warn != "" {
			run.Warnings = append(run.Warnings, w.warn)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.measure(run, st, workers)
	if st.disp != nil {
		run.Events = st.disp.Events
	}
	run.Hints = st.hints
	return run, nil
}

// makeCold evicts the run's files before a page-cache run and resets the
// effect counters; a direct run starts with an empty cache.
func (r *Replayer) makeCold(run *Run, files []*openFile) error {
	if run.Backend == BackendDirect {
		run.Cold = true
		if r.t.metaOps > 0 {
			run.Metadata = &Metadata{Warm: "the direct backend opens every file before the run"}
		}
		return nil
	}
	if !r.opt.Warm {
		if err := r.evictTo(run, files); err != nil {
			return err
		}
		run.Cold = true
	}
	if r.obs != nil {
		if err := r.obs.Reset(); err != nil {
			return fmt.Errorf("reset the effect counters: %w", err)
		}
	}
	return nil
}

// evictTo evicts the run's files and checks what stayed: the first cold
// run's residue is the reference, refused above Options.MaxResidue; a
// later run is brought to the same residue by reading in what it lacks,
// and reports what it has beyond (pages that could not be evicted this
// time).
func (r *Replayer) evictTo(run *Run, files []*openFile) error {
	var res *Residue
	// Pages still being read (another program's readahead) cannot be
	// dropped yet: try again after their reads are done.
	for try := 0; ; try++ {
		if !r.opt.skipEvict {
			if err := evict(files, r.opt.DropCaches); err != nil {
				return err
			}
		}
		last := r.opt.skipEvict || try == 2
		var err error
		if res, err = r.measureResidue(files, last); err != nil {
			return err
		}
		if res.Pages == 0 {
			break
		}
		if last {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ref := r.residue; ref != nil {
		for idx, s := range res.sets {
			res.Extra += s.minus(ref.sets[idx]).count()
		}
		warmed, err := warmTo(files, res, ref)
		if err != nil {
			return err
		}
		if warmed > 0 {
			extra := res.Extra
			if res, err = r.measureResidue(files, true); err != nil {
				return err
			}
			res.Warmed, res.Extra = warmed, extra
		}
	}
	if res.Fraction > r.opt.MaxResidue {
		return residueError(res, r.opt.MaxResidue)
	}
	if r.residue == nil {
		r.residue = res
	}
	if res.Pages > 0 {
		run.Residue = res
	}
	if r.t.metaOps > 0 {
		m := r.coldMetadata(files)
		run.Metadata = &m
	}
	return nil
}

// execute runs one worker per recorded thread, each locked to its own OS
// thread (so that its waits are the kernel's and the effect observer
// knows the demand threads), and, with recorded timing, the replay clock's
// hints. The clock starts once every worker is ready.
func (r *Replayer) execute(ctx context.Context, st *runState, spec string, round int) []*worker {
	workers := make([]*worker, len(r.t.threads))
	for i, th := range r.t.threads {
		workers[i] = &worker{id: i, r: st, th: th, lat: make([]int64, 0, len(th.ops))}
	}
	st.nextHint.Store(math.MaxUint64)
	hintsLive := st.disp != nil && len(r.t.global) > 0
	if hintsLive && r.opt.Timing == TimingASAP {
		st.nextHint.Store(r.t.global[0].TS)
	}
	// Each worker is an OS thread that sleeps in the kernel between its
	// accesses, as the program's threads did; a sleeping thread holds its
	// P until the runtime retakes it, so give the runtime a spare P per
	// worker, lest a thread that wakes find none free.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), len(workers)+4)))
	runtime.GC()
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	for _, w := range workers {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			clockThread()
			w.register()
			ready.Done()
			<-start
			w.loop(ctx)
			w.closeFDs(st.files)
			w.unregister()
		}()
	}
	ready.Wait()
	if r.opt.duringRun != nil {
		r.opt.duringRun(spec)
	}
	st.start = time.Now()
	close(start)
	stopHints := make(chan struct{})
	hintsDone := make(chan struct{})
	if hintsLive && r.opt.Timing == TimingRecorded {
		go func() {
			defer close(hintsDone)
			clockThread()
			st.hintClock(stopHints)
		}()
	} else {
		close(hintsDone)
	}
	stopProgress := r.progress(st, spec, round)
	wg.Wait()
	close(stopHints)
	<-hintsDone
	if hintsLive && r.opt.Timing == TimingRecorded {
		// Hints due before the last access that the clock had not
		// delivered when the workers finished: late, but due.
		var last uint64
		for _, th := range r.t.threads {
			last = max(last, th.ops[len(th.ops)-1].ts)
		}
		st.deliverGlobal(last)
	}
	stopProgress()
	return workers
}

// register makes the worker's OS thread a demand thread of the effect
// observer.
func (w *worker) register() {
	if ob := w.r.rp.obs; ob != nil {
		if err := ob.AddDemandThread(unix.Gettid()); err != nil {
			w.warn = fmt.Sprintf("effect counters miss thread %d: %v", w.th.tid, err)
		}
	}
}

func (w *worker) unregister() {
	if ob := w.r.rp.obs; ob != nil {
		ob.RemoveDemandThread(unix.Gettid())
	}
}

// measure fills in the run's wall, stall and latency figures. The wall
// runs from the first access's due time to the last access's completion.
func (r *Replayer) measure(run *Run, st *runState, workers []*worker) {
	first := st.start
	if r.opt.Timing == TimingRecorded && r.t.firstTS > r.t.t0 {
		first = st.at(r.t.firstTS)
	}
	var last time.Time
	lat := make([]int64, 0, r.t.ops)
	for _, w := range workers {
		run.StallNS += w.stall
		lat = append(lat, w.lat...)
		if w.end.After(last) {
			last = w.end
		}
		if m := run.Metadata; m != nil {
			m.Ops += w.meta.Ops
			m.TimeNS += w.meta.TimeNS
			m.Mismatched += w.meta.Mismatched
			m.Skipped += w.meta.Skipped
			m.Mappings += w.meta.Mappings
		}
	}
	for _, f := range st.files {
		if f != nil && f.mapErr != nil {
			run.Warnings = append(run.Warnings, f.mapErr.Error())
		}
	}
	run.WallNS = last.Sub(first).Nanoseconds()
	run.Fidelity = fidelity(workers)
	sortInt64(lat)
	run.lat = lat
	run.P50US = float64(percentile(lat, 0.50)) / 1e3
	run.P99US = float64(percentile(lat, 0.99)) / 1e3
	run.MaxUS = float64(lat[len(lat)-1]) / 1e3
	if run.Policy == Baseline {
		run.Via = ""
	}
}

// loop replays the thread's accesses in order, delivering the hints the
// thread sent before each. With recorded timing the first access (or
// hint) is due at its offset on the replay clock, and each later one its
// recorded think time after the previous access completed here.
func (w *worker) loop(ctx context.Context) {
	st := w.r
	recorded := st.rp.opt.Timing == TimingRecorded
	var prev *op
	hi := 0
	for i := range w.th.ops {
		if i&63 == 0 && ctx.Err() != nil {
			return
		}
		o := &w.th.ops[i]
		for ; hi < len(w.th.hints) && w.th.hints[hi].TS <= o.ts; hi++ {
			if recorded {
				sleepUntil(w.due(prev, w.th.hints[hi].TS))
			}
			st.deliver(&w.th.hints[hi])
		}
		if recorded {
			sleepUntil(w.due(prev, o.ts))
		} else {
			st.hintsUpTo(o.ts)
		}
		if o.meta {
			t0 := time.Now()
			w.metadata(o, st.files)
			end := time.Now()
			w.meta.TimeNS += end.Sub(t0).Nanoseconds()
			w.kinds.add(o, prev, t0.Sub(w.end), end.Sub(t0))
			w.end = end
			w.settle(st.files)
			w.opDone(o.file)
			prev = o
			continue
		}
		w.lastOpen = 0
		if st.disp != nil {
			st.mu.Lock()
			ev := &st.ev
			*ev = policies.Event{Kind: policies.EventFileAccess, TS: o.ts, PID: w.th.pid, TID: w.th.tid,
				File: st.rp.t.files[o.file].ID, Access: o.access()}
			st.disp.Dispatch(ev, st.emit)
			st.mu.Unlock()
		}
		t0 := time.Now()
		err := st.dem.demand(w, o)
		end := time.Now()
		d := end.Sub(t0).Nanoseconds()
		w.kinds.add(o, prev, t0.Sub(w.end), end.Sub(t0))
		w.end = end
		w.lat = append(w.lat, d)
		w.stall += d
		st.done.Add(1)
		if err != nil {
			w.err = err
			return
		}
		w.opDone(o.file)
		prev = o
	}
}

// due returns when an event of the thread at bundle time ts is due: at its
// offset on the replay clock before the thread's first access, else its
// recorded think time after the previous access prev completed here.
func (w *worker) due(prev *op, ts uint64) time.Time {
	if prev == nil {
		return w.r.at(ts)
	}
	from := prev.thinkFrom()
	if ts <= from {
		return w.end
	}
	return w.end.Add(time.Duration(float64(ts-from) / w.r.rp.opt.Speed))
}

// thinkFrom is the recorded time the next access's think time counts
// from: the access's completion when the bundle has service times, else
// its start (then the gap holds the recorded service time too).
func (o *op) thinkFrom() uint64 {
	if o.end != 0 {
		return o.end
	}
	return o.ts
}

// hintClock delivers every hint no replayed thread sent at its recorded
// time on the replay clock, never earlier, until stop closes.
func (st *runState) hintClock(stop <-chan struct{}) {
	hs := st.rp.t.global
	for st.hintIdx < len(hs) {
		if !sleepUntilStop(st.at(hs[st.hintIdx].TS), stop) {
			return
		}
		st.deliverGlobal(hs[st.hintIdx].TS)
	}
}

// hintsUpTo delivers, with asap timing, the replay clock's hints due
// before an access at ts, in timestamp order.
func (st *runState) hintsUpTo(ts uint64) {
	for h := st.nextHint.Load(); h <= ts; h = st.nextHint.Load() {
		st.deliverGlobal(h)
	}
}

// deliverGlobal dispatches every undelivered replay-clock hint with TS <=
// upTo.
func (st *runState) deliverGlobal(upTo uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	hs := st.rp.t.global
	for st.hintIdx < len(hs) && hs[st.hintIdx].TS <= upTo {
		st.dispatchHint(&hs[st.hintIdx])
		st.hintIdx++
	}
	if st.hintIdx < len(hs) && st.rp.opt.Timing == TimingASAP {
		st.nextHint.Store(hs[st.hintIdx].TS)
	} else {
		st.nextHint.Store(math.MaxUint64)
	}
}

// deliver dispatches one hint of a thread.
func (st *runState) deliver(h *formats.Hint) {
	if st.disp == nil {
		return
	}
	st.mu.Lock()
	st.dispatchHint(h)
	st.mu.Unlock()
}

// dispatchHint dispatches h; called with mu held.
func (st *runState) dispatchHint(h *formats.Hint) {
	if st.rp.opt.onHint != nil {
		st.rp.opt.onHint(st, h)
	}
	if st.ev.FromHint(h) {
		st.disp.Dispatch(&st.ev, st.emit)
		st.hints++
	}
}

// clockThread locks the calling goroutine to its OS thread for the rest
// of its life and makes the thread's timer slack 1 ns, so that sleepUntil
// wakes it within the kernel's timer precision (tens of µs on a busy
// machine) instead of the default 50 µs slack.
func clockThread() {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// spinWake is how long before a wait's end sleepUntil stops sleeping and
// spins instead: waits up to it are spun whole. The kernel's wake-up from
// clock_nanosleep is late by 5–20 µs on this kind of VM (more under load),
// and most think times of a program's system calls are shorter than that
// (82% of a python3 launch's are under 50 µs), so sleeping them would add
// the wake-up latency to every operation: 70 ms over the 1700 operations
// of a python3 launch. A program's thread spends its think time mostly on
// the CPU, as the spin does.
const spinWake = 100 * time.Microsecond

// sleepUntil blocks the calling thread until t and never returns before
// t. A wait longer than spinWake sleeps in the kernel with
// clock_nanosleep(TIMER_ABSTIME) until spinWake before t, burning no CPU;
// the rest is spun, so that the wait ends on time rather than late by the
// kernel's wake-up latency. The goroutine should be a clockThread; its P
// is retaken while it sleeps, so the run gives the runtime spare Ps
// (execute).
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if d > spinWake {
		var now unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil {
			ts := unix.NsecToTimespec(now.Nano() + (d - spinWake).Nanoseconds())
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
			}
		}
	}
	// Go's clock and CLOCK_MONOTONIC are one clock.
	for time.Until(t) > 0 {
	}
}

// sleepUntilStop is sleepUntil that gives up (false) when stop closes; it
// checks stop at least every 10 ms.
func sleepUntilStop(t time.Time, stop <-chan struct{}) bool {
	for {
		select {
		case <-stop:
			return false
		default:
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		sleepUntil(time.Now().Add(min(d, 10*time.Millisecond)))
	}
}
