// Package bench holds the logic of `predictio bench engine` (the ringio
// study's backend matrix, optionally against fio) and `predictio bench
// device` (a device profile for simulate).
package bench

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/predictio/predictio/engine"
	"github.com/predictio/predictio/uring"
	"golang.org/x/sys/unix"
)

// Backends of `bench engine`, in the ringio paper's order.
const (
	Psync        = "psync"               // pread/pwrite, one blocking syscall per op
	Libaio       = "libaio"              // io_submit + io_getevents
	Uring        = "uring"               // engine, no SQPOLL
	UringSQPoll  = "uring-sqpoll"        // engine, one SQPOLL thread per worker
	UringShared  = "uring-sqpoll-shared" // engine, all workers share one SQPOLL thread
	harvestWait  = "wait"
	harvestSpin  = "backoff"
	clockTicksHz = 100 // USER_HZ of /proc/*/stat on Linux
)

// AllBackends lists the backends.
var AllBackends = []string{Psync, Libaio, Uring, UringSQPoll, UringShared}

// Point is one benchmark configuration.
type Point struct {
	Path     string        // scratch file, prepared with PrepareScratch
	Size     int64         // working set: offsets are uniform in [0, Size)
	Backend  string        // one of AllBackends
	RW       string        // randread, randwrite or mix (reads and writes alternate)
	Threads  int           // worker threads, each with its own fd/context/ring
	QD       int           // requests in flight per thread (psync: 1)
	Duration time.Duration // measured time
	// Stop, when closed, ends the run before Duration; its Result is
	// then of the shorter time.
	Stop <-chan struct{} `json:"-"`

	FixedBufs     bool          // uring backends: registered buffers
	RegisterFiles bool          // uring backends: registered files
	Harvest       string        // uring backends: "wait", "backoff" or "auto" (""): wait for uring, backoff with SQPOLL, as fio does
	DeferTaskrun  bool          // uring (no SQPOLL): COOP_TASKRUN|SINGLE_ISSUER|DEFER_TASKRUN like fio 3.33
	SQThreadIdle  time.Duration // SQPOLL idle window
	// RawSyscalls issues the syscalls that may block (pread/pwrite,
	// io_submit, io_getevents, waiting io_uring_enter) without telling the
	// Go scheduler, and raises GOMAXPROCS to Threads+1 for the point so
	// each thread keeps its P.
	RawSyscalls bool
	// BatchSubmit submits the requests freed by one harvest together (one
	// io_submit / io_uring_enter) instead of one syscall per request as
	// fio does by default (iodepth_batch_submit=1).
	BatchSubmit bool
	// CPUs pins worker thread i to the i-th CPU of this set (ascending,
	// modulo its size), as fio's cpus_allowed with cpus_allowed_policy=split
	// pins job i; empty: the scheduler places the threads.
	CPUs []int
}

// Result is one measured point. The JSON keys are stable.
type Result struct {
	Tool     string  `json:"tool"` // "predictio" or "fio"
	Backend  string  `json:"backend"`
	RW       string  `json:"rw"`
	Threads  int     `json:"threads"`
	QD       int     `json:"qd"`
	Rep      int     `json:"rep"`
	Ops      uint64  `json:"ops"`
	Seconds  float64 `json:"seconds"`
	IOPS     float64 `json:"iops"`
	MiBs     float64 `json:"mib_s"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	P999us   float64 `json:"p999_us"`
	Syscalls float64 `json:"syscalls_per_op"` // exact; -1 for fio (not counted)
	// CPUus is process CPU (user+system, getrusage RUSAGE_SELF; for fio
	// RUSAGE_CHILDREN) per op. Measured on Linux 6.18, SQPOLL threads
	// are threads of the process and their time is included; PollerCPUus
	// reports it separately from /proc/self/task/*/stat.
	CPUus       float64 `json:"cpu_us_per_op"`
	PollerCPUus float64 `json:"poller_cpu_us_per_op"`
	Pollers     int     `json:"pollers"`
	Yields      float64 `json:"yields_per_op,omitempty"`
	Wakeups     uint64  `json:"sqpoll_wakeups,omitempty"`
	CachedPages uint64  `json:"cached_pages_before"` // page-cache pages of the file before the point (dropped if > 0)
	FixedBufs   bool    `json:"fixedbufs"`
	RegFiles    bool    `json:"registerfiles"`
	Harvest     string  `json:"harvest,omitempty"`
	DeferTR     bool    `json:"defer_taskrun,omitempty"`
	Raw         bool    `json:"raw_syscalls"`
	Batch       bool    `json:"batch_submit"`
	Mlocked     *bool   `json:"mlocked,omitempty"`
	Errors      uint64  `json:"errors"`
	// CPUs is the pin set (Point.CPUs), empty when unpinned.
	CPUs string `json:"cpus,omitempty"`
	// Placement is the share of the worker threads' run time by CPU, e.g.
	// "0:3% 1:97%", sampled every 10 ms from /proc for ours and for fio.
	Placement string `json:"placement"`
	// OnIRQCPU is the share of that run time on the CPUs that take the
	// device's completion interrupts (nil when they are unknown).
	OnIRQCPU *float64 `json:"on_irq_cpu_share,omitempty"`
	// CtxSwitches, Involuntary and Migrations are the worker threads'
	// context switches (all, and involuntary ones) and CPU migrations per
	// operation, from /proc/PID/task/TID/sched; fio's include its set-up.
	CtxSwitches float64 `json:"ctx_switches_per_op"`
	Involuntary float64 `json:"involuntary_switches_per_op"`
	Migrations  float64 `json:"migrations_per_op"`
}

// threadResult is what one benchmark thread reports.
type threadResult struct {
	ops, syscalls, errors uint64
	hist                  Histogram
	cpus                  cpuTally // call cpus.tick() once per operation
	err                   error
}

type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x * 0x2545f4914f6cdd1d
}

func (p *Point) validate() error {
	switch p.Backend {
	case Psync, Libaio, Uring, UringSQPoll, UringShared:
	default:
		return fmt.Errorf("unknown backend %q (want one of %v)", p.Backend, AllBackends)
	}
	switch p.RW {
	case "randread", "randwrite", "mix":
	default:
		return fmt.Errorf("unknown --rw %q (want randread, randwrite or mix)", p.RW)
	}
	if p.Threads < 1 || p.Threads > 256 {
		return fmt.Errorf("threads %d out of range 1..256", p.Threads)
	}
	if p.QD < 1 || p.QD > 4096 {
		return fmt.Errorf("queue depth %d out of range 1..4096", p.QD)
	}
	if p.Size < BlockSize {
		return fmt.Errorf("size %d smaller than one block", p.Size)
	}
	if p.Duration <= 0 {
		return fmt.Errorf("duration %v is not positive", p.Duration)
	}
	if p.Harvest == "" || p.Harvest == "auto" {
		// Like fio: io_uring waits in io_uring_enter, sqthread_poll
		// polls the CQ without a syscall.
		p.Harvest = harvestWait
		if p.Backend == UringSQPoll || p.Backend == UringShared {
			p.Harvest = harvestSpin
		}
	}
	if p.Harvest != harvestWait && p.Harvest != harvestSpin {
		return fmt.Errorf("unknown harvest mode %q (want auto, wait or backoff)", p.Harvest)
	}
	if p.Backend == Psync {
		p.QD = 1
	}
	if len(p.CPUs) > 0 {
		cpus, err := allowedCPUs(p.CPUs)
		if err != nil {
			return err
		}
		p.CPUs = cpus
	}
	return nil
}

// allowedCPUs sorts and dedups cpus and checks that this process may run
// on each.
func allowedCPUs(cpus []int) ([]int, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	set := map[int]bool{}
	var out []int
	for _, c := range cpus {
		if c < 0 || c >= maxCPU || !allowed.IsSet(c) {
			return nil, fmt.Errorf("CPU %d is not one this process may run on (see taskset -p %d)", c, os.Getpid())
		}
		if !set[c] {
			set[c] = true
			out = append(out, c)
		}
	}
	sort.Ints(out)
	return out, nil
}

// pinThread pins the calling (locked) OS thread to cpu and returns a
// function restoring its previous affinity.
func pinThread(cpu int) (func(), error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("read thread CPU affinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin thread to CPU %d: %w", cpu, err)
	}
	return func() { unix.SchedSetaffinity(0, &old) }, nil
}

// isWrite says whether op i of a thread writes.
func (p *Point) isWrite(i uint64) bool {
	switch p.RW {
	case "randwrite":
		return true
	case "mix":
		return i&1 == 1
	}
	return false
}

func cpuNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pollerTicks() map[int]uint64 {
	ps, _ := uring.PollerThreads(0)
	m := make(map[int]uint64, len(ps))
	for _, p := range ps {
		m[p.TID] = p.CPUTicks
	}
	return m
}

// quiesce waits (up to 2 s) for SQPOLL threads of closed rings to exit, so
// that they neither use CPU during the next point nor count in it.
func quiesce() {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ps, _ := uring.PollerThreads(0); len(ps) == 0 {
			return
		}
	}
}

// pollerDelta sums the CPU ticks each poller thread gained between two
// snapshots (threads that exited in between are left out).
func pollerDelta(before, after map[int]uint64) uint64 {
	var d uint64
	for tid, t := range after {
		if t >= before[tid] {
			d += t - before[tid]
		}
	}
	return d
}

// Run measures one point. The file must be prepared; Run checks with
// cachestat that none of its pages are cached (dropping them if some are).
func Run(p Point) (Result, error) {
	if err := p.validate(); err != nil {
		return Result{}, fmt.Errorf("bench %s: %w", p.Backend, err)
	}
	quiesce()
	cached, err := EnsureCold(p.Path, p.Size)
	if err != nil {
		return Result{}, err
	}
	res := Result{Tool: "predictio", Backend: p.Backend, RW: p.RW, Threads: p.Threads, QD: p.QD, CachedPages: cached, Raw: p.RawSyscalls, Batch: p.BatchSubmit,
		CPUs: formatCPUList(p.CPUs)}
	if p.RawSyscalls {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.NumCPU(), p.Threads+1)))
	}
	switch p.Backend {
	case Psync:
		err = runThreads(&p, &res, nil, func(i int, stop *atomic.Bool, tr *threadResult) { psyncThread(&p, i, stop, tr) })
	case Libaio:
		err = runThreads(&p, &res, nil, func(i int, stop *atomic.Bool, tr *threadResult) { aioThread(&p, i, stop, tr) })
	default:
		err = runEngine(&p, &res)
	}
	if err != nil {
		return res, fmt.Errorf("bench %s threads %d qd %d: %w", p.Backend, p.Threads, p.QD, err)
	}
	return res, nil
}

// runThreads runs body on p.Threads locked OS threads for p.Duration and
// fills res. extra, when set, is called after the threads stop and before
// the CPU snapshot is taken.
func runThreads(p *Point, res *Result, extra func(), body func(i int, stop *atomic.Bool, tr *threadResult)) error {
	trs := make([]threadResult, p.Threads)
	first := make([]schedCounters, p.Threads)
	last := make([]schedCounters, p.Threads)
	pid := os.Getpid()
	var stop atomic.Bool
	var ready, done sync.WaitGroup
	startGate := make(chan struct{})
	for i := range trs {
		ready.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			if len(p.CPUs) > 0 {
				restore, err := pinThread(p.CPUs[i%len(p.CPUs)])
				if err != nil {
					trs[i].err = err
					ready.Done()
					return
				}
				defer restore()
			}
			first[i], _ = readSchedCounters(pid, tid)
			ready.Done()
			<-startGate
			body(i, &stop, &trs[i])
			last[i], _ = readSchedCounters(pid, tid)
		}(i)
	}
	ready.Wait()
	for i := range trs {
		if trs[i].err != nil {
			// Release the others; they see stop before their first op.
			stop.Store(true)
		}
	}
	irqCPUs := CompletionIRQCPUs(p.Path)
	ticks0 := pollerTicks()
	cpu0 := cpuNow()
	t0 := time.Now()
	close(startGate)
	select {
	case <-time.After(p.Duration):
	case <-p.Stop:
	}
	stop.Store(true)
	done.Wait()
	elapsed := time.Since(t0)
	cpu := cpuNow() - cpu0
	ticks1 := pollerTicks()
	if extra != nil {
		extra()
	}
	var h Histogram
	var errs []error
	for i := range trs {
		t := &trs[i]
		res.Ops += t.ops
		res.Errors += t.errors
		h.Merge(&t.hist)
		res.Syscalls += float64(t.syscalls)
		if t.err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", i, t.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if res.Ops == 0 {
		return errors.New("no operation completed")
	}
	ops := float64(res.Ops)
	res.Seconds = elapsed.Seconds()
	res.IOPS = ops / res.Seconds
	res.MiBs = res.IOPS * BlockSize / (1 << 20)
	res.P50us = float64(h.Quantile(0.50)) / 1e3
	res.P99us = float64(h.Quantile(0.99)) / 1e3
	res.P999us = float64(h.Quantile(0.999)) / 1e3
	res.Syscalls /= ops
	res.CPUus = float64(cpu.Microseconds()) / ops
	res.Pollers = len(ticks1)
	res.PollerCPUus = float64(pollerDelta(ticks0, ticks1)) * (1e6 / clockTicksHz) / ops
	selfPlacement(tallies(trs), first, last).fill(res, irqCPUs)
	return nil
}

func tallies(trs []threadResult) []cpuTally {
	t := make([]cpuTally, len(trs))
	for i := range trs {
		t[i] = trs[i].cpus
	}
	return t
}

// rw64 is pread64/pwrite64, raw or through the Go scheduler.
func rw64(raw bool, nr uintptr, fd int, buf []byte, off int64) (int, error) {
	var r uintptr
	var e unix.Errno
	if raw {
		r, _, e = unix.RawSyscall6(nr, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(off), 0, 0)
	} else {
		r, _, e = unix.Syscall6(nr, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(off), 0, 0)
	}
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// openThreadFile opens the scratch file O_DIRECT for one thread.
func openThreadFile(p *Point) (*os.File, error) {
	flag := os.O_RDONLY
	if p.RW != "randread" {
		flag = os.O_RDWR
	}
	return engine.OpenDirect(p.Path, flag)
}

func mapBuffers(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n*BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("map %d buffers: %w", n, err)
	}
	for i := range b {
		b[i] = byte(i) | 1
	}
	return b, nil
}

func psyncThread(p *Point, id int, stop *atomic.Bool, tr *threadResult) {
	f, err := openThreadFile(p)
	if err != nil {
		tr.err = err
		return
	}
	defer f.Close()
	buf, err := mapBuffers(1)
	if err != nil {
		tr.err = err
		return
	}
	defer unix.Munmap(buf)
	fd := int(f.Fd())
	blocks := uint64(p.Size / BlockSize)
	r := rng(0x9e3779b97f4a7c15 ^ uint64(id+1)*0xbf58476d1ce4e5b9)
	// At least one operation per thread, however late the thread starts.
	for i := uint64(0); i == 0 || !stop.Load(); i++ {
		off := int64(r.next()%blocks) * BlockSize
		t0 := time.Now()
		var n int
		nr := uintptr(unix.SYS_PREAD64)
		if p.isWrite(i) {
			nr = unix.SYS_PWRITE64
		}
		n, err = rw64(p.RawSyscalls, nr, fd, buf, off)
		tr.syscalls++
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != BlockSize {
			tr.errors++
			tr.err = fmt.Errorf("pread/pwrite %s at %d: %d bytes, %v", p.Path, off, n, err)
			return
		}
		tr.hist.Record(time.Since(t0))
		tr.ops++
		tr.cpus.tick()
	}
}

func aioThread(p *Point, id int, stop *atomic.Bool, tr *threadResult) {
	f, err := openThreadFile(p)
	if err != nil {
		tr.err = err
		return
	}
	defer f.Close()
	qd := p.QD
	mem, err := mapBuffers(qd)
	if err != nil {
		tr.err = err
		return
	}
	defer unix.Munmap(mem)
	ctx, err := ioSetup(qd)
	if err != nil {
		tr.err = err
		return
	}
	defer ioDestroy(ctx)
	cbs := make([]iocb, qd)
	ptrs := make([]*iocb, qd)
	starts := make([]time.Time, qd)
	free := make([]int, 0, qd)
	for i := qd - 1; i >= 0; i-- {
		free = append(free, i)
	}
	pending := ptrs[:0] // prepared, not yet accepted by io_submit
	evs := make([]ioEvent, qd)
	blocks := uint64(p.Size / BlockSize)
	r := rng(0x9e3779b97f4a7c15 ^ uint64(id+1)*0xbf58476d1ce4e5b9)
	var seq uint64
	inflight := 0
	fd := uint32(f.Fd())
	for {
		stopping := seq > 0 && stop.Load()
		if !stopping {
			for len(free) > 0 {
				s := free[len(free)-1]
				free = free[:len(free)-1]
				cb := &cbs[s]
				*cb = iocb{data: uint64(s), fildes: fd, nbytes: BlockSize, opcode: iocbCmdPread,
					buf: uint64(uintptr(unsafe.Pointer(&mem[s*BlockSize]))), offset: int64(r.next()%blocks) * BlockSize}
				if p.isWrite(seq) {
					cb.opcode = iocbCmdPwrite
				}
				seq++
				pending = append(pending, cb)
			}
		}
		for len(pending) > 0 {
			batch := pending
			if !p.BatchSubmit {
				batch = pending[:1]
			}
			now := time.Now()
			n, err := ioSubmit(ctx, batch, p.RawSyscalls)
			tr.syscalls++
			if err != nil {
				tr.err = err
				return
			}
			for _, cb := range batch[:n] {
				starts[cb.data] = now
			}
			inflight += n
			pending = append(pending[:0], pending[n:]...)
			if n < len(batch) {
				break // the kernel took fewer: reap first
			}
		}
		if inflight == 0 {
			if stopping {
				return
			}
			continue
		}
		n, err := ioGetevents(ctx, 1, evs, p.RawSyscalls)
		tr.syscalls++
		if err != nil {
			tr.err = err
			return
		}
		for _, ev := range evs[:n] {
			s := int(ev.data)
			if ev.res != BlockSize {
				tr.errors++
				tr.err = fmt.Errorf("aio on %s at %d: res %d", p.Path, cbs[s].offset, ev.res)
			}
			tr.hist.Record(time.Since(starts[s]))
			tr.ops++
			tr.cpus.tick()
			free = append(free, s)
		}
		inflight -= n
		if tr.err != nil && inflight == 0 {
			return
		}
	}
}

func runEngine(p *Point, res *Result) error {
	// One O_DIRECT file per point; each worker's ring registers it.
	f, err := openThreadFile(p)
	if err != nil {
		return err
	}
	defer f.Close()
	hists := make([]Histogram, p.Threads)
	errCount := make([]uint64, p.Threads)
	firstErr := make([]error, p.Threads)
	opts := []engine.Option{
		engine.WithWorkers(p.Threads), engine.WithQueueDepth(p.QD),
		engine.WithFixedBuffers(p.FixedBufs), engine.WithFixedFiles(p.RegisterFiles),
		engine.WithHandler(func(c *engine.Completion) {
			if c.Err != nil {
				errCount[c.Worker]++
				if firstErr[c.Worker] == nil {
					firstErr[c.Worker] = c.Err
				}
				return
			}
			hists[c.Worker].Record(c.Latency)
		}),
	}
	idle := p.SQThreadIdle
	if idle <= 0 {
		idle = time.Second
	}
	switch p.Backend {
	case UringSQPoll:
		opts = append(opts, engine.WithSQPoll(idle))
	case UringShared:
		opts = append(opts, engine.WithSharedPoller(idle))
	case Uring:
		if p.DeferTaskrun {
			opts = append(opts, engine.WithDeferTaskrun())
			res.DeferTR = true
		}
	}
	if p.Harvest == harvestSpin {
		opts = append(opts, engine.WithHarvest(engine.HarvestBackoff))
	}
	if p.RawSyscalls {
		opts = append(opts, engine.WithRawSyscalls())
	}
	if !p.BatchSubmit {
		opts = append(opts, engine.WithEagerSubmit())
	}
	res.FixedBufs, res.RegFiles, res.Harvest = p.FixedBufs, p.RegisterFiles, p.Harvest
	e, err := engine.New([]*os.File{f}, opts...)
	if err != nil {
		return err
	}
	defer e.Close()
	ml := e.Mlocked()
	res.Mlocked = &ml
	blocks := uint64(p.Size / BlockSize)
	err = runThreads(p, res, nil, func(i int, stop *atomic.Bool, tr *threadResult) {
		w := e.Worker(i)
		r := rng(0x9e3779b97f4a7c15 ^ uint64(i+1)*0xbf58476d1ce4e5b9)
		req := engine.Request{Op: engine.OpRead, Len: BlockSize}
		for seq := uint64(0); seq == 0 || !stop.Load(); seq++ {
			req.Op = engine.OpRead
			if p.isWrite(seq) {
				req.Op = engine.OpWrite
			}
			req.Off = int64(r.next()%blocks) * BlockSize
			req.Token = seq
			if err := w.Submit(req); err != nil {
				tr.err = err
				break
			}
			tr.cpus.tick()
			if errCount[i] > 0 {
				break
			}
		}
		if err := w.Drain(); err != nil && tr.err == nil {
			tr.err = err
		}
		s := w.Stats()
		tr.ops = hists[i].Count()
		tr.hist = hists[i]
		tr.errors = errCount[i]
		tr.syscalls = s.Syscalls()
		if tr.err == nil && firstErr[i] != nil {
			tr.err = firstErr[i]
		}
	})
	if err != nil {
		return err
	}
	s := e.Stats()
	res.Yields = float64(s.Yields) / float64(res.Ops)
	res.Wakeups = s.Ring.Wakeups
	return nil
}
