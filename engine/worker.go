package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/predictio/predictio/uring"
	"golang.org/x/sys/unix"
)

// Stats are a worker's counters (Engine.Stats sums them).
type Stats struct {
	Ring       uring.Stats // the ring's own counters; Ring.Enters is exact
	Submitted  uint64      // requests accepted by Submit
	Completed  uint64      // completions passed to the handler
	Errors     uint64      // completions with Err != nil
	Backpress  uint64      // Submits that had to harvest first (queue full)
	Yields     uint64      // sched_yield calls made by HarvestBackoff (syscalls too)
	PauseSpins uint64      // PAUSE-tier re-checks made by HarvestBackoff
}

func (s *Stats) add(o Stats) {
	r, q := &s.Ring, o.Ring
	r.Enters += q.Enters
	r.SubmitEnters += q.SubmitEnters
	r.WaitEnters += q.WaitEnters
	r.Wakeups += q.Wakeups
	r.FlushEnters += q.FlushEnters
	r.Interrupted += q.Interrupted
	r.Submitted += q.Submitted
	r.Reaped += q.Reaped
	r.Registers += q.Registers
	r.Dropped += q.Dropped
	r.SQDropped += q.SQDropped
	s.Submitted += o.Submitted
	s.Completed += o.Completed
	s.Errors += o.Errors
	s.Backpress += o.Backpress
	s.Yields += o.Yields
	s.PauseSpins += o.PauseSpins
}

// Syscalls is the exact number of syscalls the worker made on its I/O path:
// io_uring_enter calls plus sched_yield calls.
func (s Stats) Syscalls() uint64 { return s.Ring.Enters + s.Yields }

type slot struct {
	req      Request
	buf      []byte
	bufIndex uint16
	start    time.Time
}

// Worker is one ring with its buffer pool and request slots.
type Worker struct {
	e      *Engine
	id     int
	ring   *uring.Ring
	mem    []byte
	slots  []slot
	free   []uint16 // stack of free slot indices
	cqes   []uring.CQE
	comp   Completion
	fds    []int32 // what goes in SQE.Fd: registered index or real fd
	fixedF bool
	fixedB bool
	closed bool
	stats  Stats
}

func newWorker(e *Engine, id int, entries uint32, fds []int32, ropts []uring.Option) (*Worker, error) {
	cfg := &e.cfg
	r, err := uring.New(entries, ropts...)
	if err != nil {
		return nil, err
	}
	w := &Worker{e: e, id: id, ring: r, fixedF: cfg.fixedFiles, fixedB: cfg.fixedBufs}
	w.mem, err = unix.Mmap(-1, 0, cfg.qd*cfg.bufSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("map %d buffers of %d bytes: %w", cfg.qd, cfg.bufSize, err)
	}
	if err := unix.Mlock(w.mem); err != nil {
		if e.mlocked {
			e.mlocked = false
			e.mlockErr = fmt.Errorf("mlock %d bytes of buffers: %w (continuing unlocked)", len(w.mem), err)
		}
	}
	w.slots = make([]slot, cfg.qd)
	w.free = make([]uint16, cfg.qd)
	bufs := make([][]byte, cfg.qd)
	for i := range w.slots {
		b := w.mem[i*cfg.bufSize : (i+1)*cfg.bufSize : (i+1)*cfg.bufSize]
		w.slots[i] = slot{buf: b, bufIndex: uint16(i)}
		bufs[i] = b
		w.free[i] = uint16(cfg.qd - 1 - i)
	}
	w.cqes = make([]uring.CQE, cfg.qd)
	if cfg.fixedBufs {
		if err := r.RegisterBuffers(bufs); err != nil {
			w.close()
			return nil, err
		}
	}
	w.fds = fds
	if cfg.fixedFiles {
		if err := r.RegisterFiles(fds); err != nil {
			w.close()
			return nil, err
		}
		w.fds = make([]int32, len(fds))
		for i := range w.fds {
			w.fds[i] = int32(i)
		}
	}
	return w, nil
}

// Ring is the worker's ring, for its counters and flags.
func (w *Worker) Ring() *uring.Ring { return w.ring }

// InFlight is the number of submitted requests not yet harvested.
func (w *Worker) InFlight() int { return len(w.slots) - len(w.free) }

// Stats returns the worker's counters. Call it from the worker's goroutine
// or after it stopped.
func (w *Worker) Stats() Stats {
	s := w.stats
	s.Ring = w.ring.Stats()
	return s
}

// Submit queues req. When QueueDepth requests are in flight it first
// harvests (calling the handler) until a slot is free. Without SQPOLL the
// request reaches the kernel at the next Harvest or Flush, batched with
// others into one io_uring_enter (or at once with WithEagerSubmit); with
// SQPOLL it is published at once.
func (w *Worker) Submit(req Request) error {
	if err := w.ready(); err != nil {
		return err
	}
	if req.File < 0 || req.File >= len(w.fds) {
		return fmt.Errorf("submit %s: file index %d out of range 0..%d", req.Op, req.File, len(w.fds)-1)
	}
	if req.Off < 0 {
		return fmt.Errorf("submit %s %s: negative offset %d", req.Op, w.e.names[req.File], req.Off)
	}
	if req.Op != OpFadvise && (req.Len <= 0 || req.Len > w.e.cfg.bufSize) {
		return fmt.Errorf("submit %s %s: length %d out of range 1..%d (the buffer size)", req.Op, w.e.names[req.File], req.Len, w.e.cfg.bufSize)
	}
	if req.Op == OpFadvise && (req.Len < 0 || uint64(req.Len) > math.MaxUint32) {
		// The SQE's length is 32 bits: 4 GiB would wrap to 0, which
		// fadvise reads as "to the end of the file".
		return fmt.Errorf("submit %s %s: length %d out of range 0..%d", req.Op, w.e.names[req.File], req.Len, uint32(math.MaxUint32))
	}
	if req.Op == OpWrite && req.Data != nil && len(req.Data) != req.Len {
		return fmt.Errorf("submit %s %s: %d bytes of data for length %d", req.Op, w.e.names[req.File], len(req.Data), req.Len)
	}
	if req.Op > OpFadvise {
		return fmt.Errorf("submit: unknown op %d", req.Op)
	}
	if len(w.free) == 0 {
		w.stats.Backpress++
		for len(w.free) == 0 {
			if _, err := w.Harvest(1); err != nil {
				return err
			}
		}
	}
	sqe := w.ring.GetSQE()
	for sqe == nil {
		// The SQ holds at least QueueDepth entries, so this only happens
		// while an SQPOLL thread has not consumed them yet.
		if _, err := w.ring.Submit(); err != nil {
			return fmt.Errorf("submit %s: %w", req.Op, err)
		}
		w.backoffStep(0)
		sqe = w.ring.GetSQE()
	}
	idx := w.free[len(w.free)-1]
	w.free = w.free[:len(w.free)-1]
	s := &w.slots[idx]
	s.req = req
	s.req.Data = nil
	fd := w.fds[req.File]
	switch req.Op {
	case OpRead:
		if w.fixedB {
			sqe.PrepReadFixed(fd, s.buf[:req.Len], uint64(req.Off), s.bufIndex)
		} else {
			sqe.PrepRead(fd, s.buf[:req.Len], uint64(req.Off))
		}
	case OpWrite:
		if req.Data != nil {
			copy(s.buf[:req.Len], req.Data)
		}
		if w.fixedB {
			sqe.PrepWriteFixed(fd, s.buf[:req.Len], uint64(req.Off), s.bufIndex)
		} else {
			sqe.PrepWrite(fd, s.buf[:req.Len], uint64(req.Off))
		}
	case OpFadvise:
		sqe.PrepFadvise(fd, uint64(req.Off), uint32(req.Len), req.Advice)
	}
	if w.fixedF {
		sqe.SetFixedFile()
	}
	sqe.UserData = uint64(idx)
	s.start = time.Now()
	w.stats.Submitted++
	if w.ring.SQPoll() || w.e.cfg.eager {
		if _, err := w.ring.Submit(); err != nil {
			return fmt.Errorf("submit %s: %w", req.Op, err)
		}
	}
	return nil
}

// Flush hands queued requests to the kernel without waiting.
func (w *Worker) Flush() error {
	if err := w.ready(); err != nil {
		return err
	}
	if _, err := w.ring.Submit(); err != nil {
		return fmt.Errorf("engine worker %d: flush: %w", w.id, err)
	}
	return nil
}

// Poll hands queued requests to the kernel and handles the completions that
// are ready, without waiting for more.
func (w *Worker) Poll() (int, error) {
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return w.reap()
}

// Harvest hands queued requests to the kernel and handles completions until
// at least min (capped at the requests in flight) have been handled, waiting
// the configured way (HarvestWait or HarvestBackoff). It returns how many it
// handled.
func (w *Worker) Harvest(min int) (int, error) {
	if err := w.ready(); err != nil {
		return 0, err
	}
	n, err := w.harvest(min)
	if err != nil {
		return n, fmt.Errorf("engine worker %d: harvest: %w", w.id, err)
	}
	return n, nil
}

func (w *Worker) harvest(min int) (int, error) {
	if min > w.InFlight() {
		min = w.InFlight()
	}
	done := 0
	if w.e.cfg.harvest == HarvestBackoff {
		if _, err := w.ring.Submit(); err != nil {
			return 0, err
		}
		for tries := 0; ; tries++ {
			n, err := w.reap()
			if err != nil {
				return done, err
			}
			if n > 0 {
				done += n
				tries = 0
			}
			if done >= min && (done > 0 || min == 0) {
				return done, nil
			}
			w.backoffStep(tries)
		}
	}
	for {
		done += w.reapReady()
		if done >= min && (done > 0 || min == 0) {
			// Never leave queued requests behind in the SQ.
			if w.ring.SQReady() > 0 {
				if _, err := w.ring.Submit(); err != nil {
					return done, err
				}
			}
			return done, nil
		}
		if _, err := w.ring.SubmitAndWait(uint32(min - done)); err != nil {
			return done, err
		}
	}
}

// backoffStep waits a little: spin, then PAUSE, then sched_yield.
func (w *Worker) backoffStep(tries int) {
	cfg := &w.e.cfg
	switch {
	case tries < cfg.spins:
	case tries < cfg.spins+cfg.pauses:
		w.stats.PauseSpins++
		cpuPause()
	default:
		w.stats.Yields++
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// ready enables a disabled (single-issuer) ring on the calling thread.
func (w *Worker) ready() error {
	if w.closed {
		return ErrClosed
	}
	if w.ring.Disabled() {
		if err := w.ring.Enable(); err != nil {
			return fmt.Errorf("engine worker %d: %w", w.id, err)
		}
	}
	return nil
}

// reap handles every ready completion, flushing kernel-held ones first.
// Completions copied out are handled even when the flush failed.
func (w *Worker) reap() (int, error) {
	n, err := w.ring.Reap(w.cqes)
	return w.handle(n), err
}

// reapReady handles the completions already in the CQ, without a syscall.
func (w *Worker) reapReady() int { return w.handle(w.ring.ReapNoEnter(w.cqes)) }

// handle passes the first n reaped CQEs to the handler and frees their slots.
func (w *Worker) handle(n int) int {
	for i := 0; i < n; i++ {
		cqe := &w.cqes[i]
		idx := uint16(cqe.UserData)
		s := &w.slots[idx]
		c := &w.comp
		*c = Completion{Token: s.req.Token, Op: s.req.Op, File: s.req.File, Off: s.req.Off, Worker: w.id, Res: int(cqe.Res), Latency: time.Since(s.start)}
		if cqe.Res < 0 {
			w.stats.Errors++
			c.Res = 0
			c.Err = uring.ResultError(ringOp(s.req.Op, w.fixedB), w.e.names[s.req.File], s.req.Off, cqe.Res)
		} else if s.req.Op == OpRead {
			c.Data = s.buf[:cqe.Res]
		}
		w.stats.Completed++
		w.e.cfg.handler(c)
		w.free = append(w.free, idx)
	}
	return n
}

func ringOp(op Op, fixed bool) uring.Op {
	switch {
	case op == OpRead && fixed:
		return uring.OpReadFixed
	case op == OpRead:
		return uring.OpRead
	case op == OpWrite && fixed:
		return uring.OpWriteFixed
	case op == OpWrite:
		return uring.OpWrite
	}
	return uring.OpFadvise
}

// Drain harvests until nothing is in flight.
func (w *Worker) Drain() error {
	for w.InFlight() > 0 {
		if _, err := w.Harvest(w.InFlight()); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) close() error {
	if w.closed {
		return nil
	}
	var errs []error
	keep := false
	if w.ring != nil {
		if !w.ring.Disabled() {
			// A single-issuer ring refuses waits from other threads
			// (EEXIST); closing it cancels what is in flight.
			if err := w.Drain(); err != nil && !errors.Is(err, unix.EEXIST) {
				errs = append(errs, err)
			}
		}
		// The kernel tears a ring down asynchronously after close, and a
		// request already executing (an io-wq buffered read) copies into
		// its buffer by virtual address unless the buffers are registered
		// (pinned). Unmapping them now could let such a late read land in
		// whatever is mapped there next, so with requests left in flight
		// and unregistered buffers the pages stay mapped: a leak, on an
		// error path only.
		keep = w.InFlight() > 0 && !w.fixedB
		errs = append(errs, w.ring.Close())
	}
	w.closed = true
	if w.mem != nil && !keep {
		unix.Munlock(w.mem)
		errs = append(errs, unix.Munmap(w.mem))
		w.mem = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close engine worker %d: %w", w.id, err)
	}
	return nil
}
