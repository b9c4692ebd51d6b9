package uring

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	// ErrNotSupported means the kernel has no io_uring (ENOSYS) or has it
	// disabled (kernel.io_uring_disabled, EPERM).
	ErrNotSupported = errors.New("io_uring not supported")
	// ErrClosed is returned by every method of a closed Ring.
	ErrClosed = errors.New("io_uring ring closed")
)

// params is struct io_uring_params (120 bytes).
type params struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// Option configures New.
type Option func(*config)

type config struct {
	p      params
	attach *Ring
	raw    bool
}

// WithSQPoll makes the kernel poll the SQ with a thread (IORING_SETUP_SQPOLL)
// that sleeps after idle without work (sq_thread_idle, millisecond
// resolution, at least 1 ms). Linux 5.1 as root, 5.11 unprivileged.
func WithSQPoll(idle time.Duration) Option {
	return func(c *config) {
		c.p.flags |= SetupSQPoll
		ms := idle.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		c.p.sqThreadIdle = uint32(ms)
	}
}

// WithSQThreadCPU pins the SQPOLL thread to cpu (IORING_SETUP_SQ_AFF).
// Only meaningful with WithSQPoll. Linux 5.1.
func WithSQThreadCPU(cpu int) Option {
	return func(c *config) {
		c.p.flags |= SetupSQAff
		c.p.sqThreadCPU = uint32(cpu)
	}
}

// WithAttachWQ shares r's async worker pool and, when both rings use
// SQPOLL, r's SQPOLL thread (IORING_SETUP_ATTACH_WQ): N rings then cost one
// poller instead of N. Linux 5.6; poller sharing since 5.12.
func WithAttachWQ(r *Ring) Option {
	return func(c *config) {
		c.p.flags |= SetupAttachWQ
		c.attach = r
	}
}

// WithSingleIssuer promises that only one task submits
// (IORING_SETUP_SINGLE_ISSUER); lock the goroutine to its thread first.
// Linux 6.0.
func WithSingleIssuer() Option {
	return func(c *config) { c.p.flags |= SetupSingleIssuer }
}

// WithCoopTaskrun runs completion task work only at kernel entries
// (IORING_SETUP_COOP_TASKRUN with IORING_SETUP_TASKRUN_FLAG, so Reap knows
// when to enter). Not with SQPOLL. Linux 5.19.
func WithCoopTaskrun() Option {
	return func(c *config) { c.p.flags |= SetupCoopTaskrun | SetupTaskrunFlag }
}

// WithDeferTaskrun defers completion work until the issuer waits
// (IORING_SETUP_DEFER_TASKRUN, implies SINGLE_ISSUER and sets
// TASKRUN_FLAG). Completions then appear only inside SubmitAndWait or Reap's
// flush. Not with SQPOLL. Linux 6.1.
func WithDeferTaskrun() Option {
	return func(c *config) {
		c.p.flags |= SetupDeferTaskrun | SetupSingleIssuer | SetupTaskrunFlag
	}
}

// WithDisabled creates the ring disabled (IORING_SETUP_R_DISABLED): it
// accepts registrations but no submissions until Enable. With
// WithSingleIssuer or WithDeferTaskrun, the task that calls Enable becomes
// the ring's only issuer, which lets a Go program create and register a ring
// on one goroutine and hand it to a worker that locked its OS thread.
// Linux 5.10.
func WithDisabled() Option {
	return func(c *config) { c.p.flags |= SetupRDisabled }
}

// WithRawSyscalls makes the waiting io_uring_enter calls (min_complete > 0)
// raw syscalls too, which do not tell the Go scheduler they may block; the
// calls that do not wait are raw always (see Ring.enter). On this 2-CPU
// machine that saves about 4 µs of CPU per blocking wait (the scheduler
// otherwise hands the P off and sysmon polls every 20 µs), but a waiting
// goroutine then holds its P, and a stop-the-world waits until sysmon's
// preemption signal interrupts the wait (EINTR, retried). Use it only for
// dedicated I/O goroutines, at most GOMAXPROCS-1 of them.
func WithRawSyscalls() Option {
	return func(c *config) { c.raw = true }
}

// WithCQSize sets the CQ size to n entries (IORING_SETUP_CQSIZE; the kernel
// rounds up to a power of two and requires n >= SQ entries). Linux 5.5.
func WithCQSize(n uint32) Option {
	return func(c *config) {
		c.p.flags |= SetupCQSize
		c.p.cqEntries = n
	}
}

// Ring is one io_uring instance: an SQ, a CQ and their shared memory.
type Ring struct {
	fd       int
	raw      bool
	flags    uint32
	features uint32
	closed   atomic.Bool
	mmaps    [][]byte
	// mapMu orders Stats' reads of the shared counters before Close's
	// munmap; lastDropped and lastSQDrop keep the counts after Close.
	mapMu                   sync.Mutex
	lastDropped, lastSQDrop uint32

	// SQ, shared with the kernel.
	sqHead    *uint32
	sqTail    *uint32
	sqFlags   *uint32
	sqDropped *uint32
	sqMask    uint32
	sqEntries uint32
	sqes      []SQE
	// sqeTail is our local tail: SQEs handed out by GetSQE; sqeHead is the
	// tail we last published.
	sqeTail uint32
	sqeHead uint32

	// CQ, shared with the kernel.
	cqHead     *uint32
	cqTail     *uint32
	cqOverflow *uint32
	cqMask     uint32
	cqEntries  uint32
	cqes       []CQE

	stats struct {
		enters, submitEnters, waitEnters, wakeups, flushes, eintr atomic.Uint64
		submitted, reaped, registers                              atomic.Uint64
	}
}

// Stats are a ring's counters. Enters counts every io_uring_enter syscall
// the Ring made, retries after EINTR included. It equals SubmitEnters +
// WaitEnters + Wakeups + FlushEnters except that a wakeup folded into
// SubmitAndWait's wait is counted in both WaitEnters and Wakeups (so with
// SQPOLL the sum can exceed Enters), and EINTR retries are counted in
// Interrupted, not in the four. Registers counts io_uring_register calls.
type Stats struct {
	Enters       uint64 // all io_uring_enter calls
	SubmitEnters uint64 // enters that only submitted (no SQPOLL)
	WaitEnters   uint64 // enters with IORING_ENTER_GETEVENTS and min_complete > 0
	Wakeups      uint64 // enters to wake a sleeping SQPOLL thread (IORING_SQ_NEED_WAKEUP)
	FlushEnters  uint64 // enters by Reap to flush CQ overflow or run task work
	Interrupted  uint64 // enters that failed with EINTR (a signal, such as Go's preemption) and were retried
	Submitted    uint64 // SQEs published to the kernel
	Reaped       uint64 // CQEs consumed
	Registers    uint64 // io_uring_register calls
	Dropped      uint64 // CQEs the kernel dropped (cq overflow counter)
	SQDropped    uint64 // invalid SQEs the kernel dropped
}

// New creates a ring with at least entries SQ entries (a power of two up to
// 32768). Needs Linux 5.1; see each Option for its minimum.
func New(entries uint32, opts ...Option) (*Ring, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.attach != nil {
		if c.attach.closed.Load() {
			return nil, fmt.Errorf("attach io_uring: %w", ErrClosed)
		}
		c.p.wqFd = uint32(c.attach.fd)
	}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&c.p)), 0)
	if errno != 0 {
		switch errno {
		case unix.ENOSYS:
			return nil, fmt.Errorf("setup io_uring: %w", ErrNotSupported)
		case unix.EPERM:
			return nil, fmt.Errorf("setup io_uring (flags %s): %w: %w (check sysctl kernel.io_uring_disabled; SQPOLL needs root before Linux 5.11)", FlagString(c.p.flags), ErrNotSupported, errno)
		}
		return nil, fmt.Errorf("setup io_uring (%d entries, flags %s): %w", entries, FlagString(c.p.flags), errno)
	}
	r := &Ring{fd: int(fd), flags: c.p.flags, features: c.p.features, raw: c.raw}
	if err := r.mapRings(&c.p); err != nil {
		r.unmap()
		unix.Close(r.fd)
		return nil, err
	}
	return r, nil
}

func (r *Ring) mapRings(p *params) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(CQE{})))
	single := p.features&FeatSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	sq, err := unix.Mmap(r.fd, offSQRing, sqSize, prot, flags)
	if err != nil {
		return fmt.Errorf("map io_uring SQ ring: %w", err)
	}
	r.mmaps = append(r.mmaps, sq)
	cq := sq
	if !single {
		cq, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags)
		if err != nil {
			return fmt.Errorf("map io_uring CQ ring: %w", err)
		}
		r.mmaps = append(r.mmaps, cq)
	}
	sqeBytes, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(SQE{})), prot, flags)
	if err != nil {
		return fmt.Errorf("map io_uring SQEs: %w", err)
	}
	r.mmaps = append(r.mmaps, sqeBytes)

	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead = u32(sq, p.sqOff.head)
	r.sqTail = u32(sq, p.sqOff.tail)
	r.sqFlags = u32(sq, p.sqOff.flags)
	r.sqDropped = u32(sq, p.sqOff.dropped)
	r.sqMask = *u32(sq, p.sqOff.ringMask)
	r.sqEntries = *u32(sq, p.sqOff.ringEntries)
	array := unsafe.Slice(u32(sq, p.sqOff.array), r.sqEntries)
	for i := range array {
		// SQE i always sits in slot i, so the indirection array is static.
		atomic.StoreUint32(&array[i], uint32(i))
	}
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&sqeBytes[0])), r.sqEntries)
	r.sqeTail = atomic.LoadUint32(r.sqTail)
	r.sqeHead = r.sqeTail

	r.cqHead = u32(cq, p.cqOff.head)
	r.cqTail = u32(cq, p.cqOff.tail)
	r.cqOverflow = u32(cq, p.cqOff.overflow)
	r.cqMask = *u32(cq, p.cqOff.ringMask)
	r.cqEntries = *u32(cq, p.cqOff.ringEntries)
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&cq[p.cqOff.cqes])), r.cqEntries)
	return nil
}

func (r *Ring) unmap() {
	for _, m := range r.mmaps {
		unix.Munmap(m)
	}
	r.mmaps = nil
}

// Close unmaps the rings and closes the ring fd. In-flight requests are
// cancelled by the kernel. Close must not run concurrently with other
// methods; afterwards they return ErrClosed.
func (r *Ring) Close() error {
	if r == nil || r.closed.Swap(true) {
		return ErrClosed
	}
	r.mapMu.Lock()
	r.lastDropped = atomic.LoadUint32(r.cqOverflow)
	r.lastSQDrop = atomic.LoadUint32(r.sqDropped)
	r.unmap()
	r.mapMu.Unlock()
	r.sqes, r.cqes = nil, nil
	if err := unix.Close(r.fd); err != nil {
		return fmt.Errorf("close io_uring: %w", err)
	}
	return nil
}

// Fd is the ring's file descriptor.
func (r *Ring) Fd() int { return r.fd }

// Flags are the setup flags the ring was created with.
func (r *Ring) Flags() uint32 { return r.flags }

// Features are the IORING_FEAT_* bits the kernel reported.
func (r *Ring) Features() uint32 { return r.features }

// SQEntries and CQEntries are the ring sizes the kernel chose.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries is the CQ size the kernel chose.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// SQPoll reports whether the ring has a kernel SQ polling thread.
func (r *Ring) SQPoll() bool { return r.flags&SetupSQPoll != 0 }

// Stats returns the ring's counters; safe from any goroutine, also while
// another closes the ring (after Close it reports the final counts).
func (r *Ring) Stats() Stats {
	s := Stats{
		Enters:       r.stats.enters.Load(),
		SubmitEnters: r.stats.submitEnters.Load(),
		WaitEnters:   r.stats.waitEnters.Load(),
		Wakeups:      r.stats.wakeups.Load(),
		FlushEnters:  r.stats.flushes.Load(),
		Interrupted:  r.stats.eintr.Load(),
		Submitted:    r.stats.submitted.Load(),
		Reaped:       r.stats.reaped.Load(),
		Registers:    r.stats.registers.Load(),
	}
	r.mapMu.Lock()
	if r.closed.Load() {
		s.Dropped, s.SQDropped = uint64(r.lastDropped), uint64(r.lastSQDrop)
	} else {
		s.Dropped = uint64(atomic.LoadUint32(r.cqOverflow))
		s.SQDropped = uint64(atomic.LoadUint32(r.sqDropped))
	}
	r.mapMu.Unlock()
	return s
}

// GetSQE returns the next free SQE, or nil when the SQ is full (publish with
// Submit and retry) or the ring is closed. Fill it with a Prep method, then
// set UserData.
func (r *Ring) GetSQE() *SQE {
	if r.closed.Load() {
		return nil
	}
	head := atomic.LoadUint32(r.sqHead)
	if r.sqeTail-head >= r.sqEntries {
		return nil
	}
	s := &r.sqes[r.sqeTail&r.sqMask]
	r.sqeTail++
	return s
}

// SQReady is the number of SQEs prepared but not yet published by Submit.
func (r *Ring) SQReady() uint32 { return r.sqeTail - r.sqeHead }

// flush publishes prepared SQEs by storing the SQ tail and returns how many.
func (r *Ring) flush() uint32 {
	n := r.sqeTail - r.sqeHead
	if n > 0 {
		atomic.StoreUint32(r.sqTail, r.sqeTail)
		r.sqeHead = r.sqeTail
		r.stats.submitted.Add(uint64(n))
	}
	return n
}

// enter calls io_uring_enter. A call that does not wait for completions
// (min_complete 0: submit, wake the SQPOLL thread, flush) is a raw syscall:
// io_uring issues requests without blocking (what would block is punted to
// its io-wq workers), so the call only spends CPU, like Go code that takes
// a page fault, and telling the scheduler would only cost entersyscall,
// exitsyscall and, when sysmon sees the P in the syscall, a P hand-off. At
// queue depth 1 on this VM (a 12 µs submit, most of it the virtio kick)
// that is 1–2 µs per operation at the median and more in the tail
// (docs/engine.md). Waits are raw only with WithRawSyscalls.
func (r *Ring) enter(toSubmit, minComplete, flags uint32) (int, error) {
	raw := r.raw || minComplete == 0
	for {
		r.stats.enters.Add(1)
		var n uintptr
		var errno unix.Errno
		if raw {
			n, _, errno = unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
		} else {
			n, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
		}
		if errno == unix.EINTR {
			r.stats.eintr.Add(1)
			continue
		}
		if errno != 0 {
			return int(n), fmt.Errorf("enter io_uring: %w", errno)
		}
		return int(n), nil
	}
}

// Submit publishes prepared SQEs and returns how many. Without SQPOLL it
// makes one io_uring_enter when there is anything to submit. With SQPOLL it
// stores the tail and then enters only to wake a sleeping poller
// (IORING_SQ_NEED_WAKEUP), so an awake poller costs no syscall.
func (r *Ring) Submit() (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	n := r.flush()
	if r.flags&SetupSQPoll != 0 {
		// The atomic store of the tail in flush is sequentially consistent
		// with this load, the barrier liburing puts between them.
		if atomic.LoadUint32(r.sqFlags)&sqNeedWakeup != 0 {
			r.stats.wakeups.Add(1)
			if _, err := r.enter(n, 0, enterSQWakeup); err != nil {
				return 0, err
			}
		}
		return int(n), nil
	}
	// Submit everything published but not yet consumed, including SQEs a
	// failed earlier enter left behind.
	pending := r.sqeTail - atomic.LoadUint32(r.sqHead)
	if pending == 0 {
		return 0, nil
	}
	r.stats.submitEnters.Add(1)
	got, err := r.enter(pending, 0, 0)
	return got, err
}

// SubmitAndWait publishes prepared SQEs and waits until at least wait CQEs
// are ready, in one io_uring_enter (plus a wakeup for a sleeping SQPOLL
// thread folded into the same call). With wait == 0 it is Submit. If wait
// CQEs are already ready and nothing needs submitting it makes no syscall.
func (r *Ring) SubmitAndWait(wait uint32) (int, error) {
	if wait == 0 {
		return r.Submit()
	}
	if r.closed.Load() {
		return 0, ErrClosed
	}
	n := r.flush()
	flags := enterGetEvents
	toSubmit := r.sqeTail - atomic.LoadUint32(r.sqHead)
	if r.flags&SetupSQPoll != 0 {
		toSubmit = 0
		if atomic.LoadUint32(r.sqFlags)&sqNeedWakeup != 0 {
			flags |= enterSQWakeup
			r.stats.wakeups.Add(1)
		} else if r.CQReady() >= wait {
			return int(n), nil
		}
	} else if toSubmit == 0 && r.CQReady() >= wait && r.flags&SetupDeferTaskrun == 0 {
		return 0, nil
	}
	r.stats.waitEnters.Add(1)
	if _, err := r.enter(toSubmit, wait, flags); err != nil {
		return 0, err
	}
	return int(n), nil
}

// CQReady is the number of CQEs waiting to be reaped.
func (r *Ring) CQReady() uint32 {
	if r.closed.Load() {
		return 0
	}
	return atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead)
}

// Enable enables a ring created with WithDisabled
// (IORING_REGISTER_ENABLE_RINGS); the calling thread becomes the issuer of a
// single-issuer ring. Linux 5.10.
func (r *Ring) Enable() error {
	if err := r.register(registerEnableRings, 0, nil); err != nil {
		return fmt.Errorf("enable io_uring: %w", err)
	}
	r.flags &^= SetupRDisabled
	return nil
}

// Disabled reports whether the ring still waits for Enable.
func (r *Ring) Disabled() bool { return r.flags&SetupRDisabled != 0 }

// ReapNoEnter is Reap without the flush: it only copies CQEs already in the
// CQ and never makes a syscall. Use it before SubmitAndWait, which runs
// pending task work and flushes overflow itself.
func (r *Ring) ReapNoEnter(dst []CQE) int {
	if r.closed.Load() || len(dst) == 0 {
		return 0
	}
	return r.copyOut(dst, atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail))
}

func (r *Ring) copyOut(dst []CQE, head, tail uint32) int {
	n := 0
	for head != tail && n < len(dst) {
		dst[n] = r.cqes[head&r.cqMask]
		head++
		n++
	}
	if n > 0 {
		atomic.StoreUint32(r.cqHead, head)
		r.stats.reaped.Add(uint64(n))
	}
	return n
}

// Reap copies up to len(dst) ready CQEs into dst, marks them consumed and
// returns how many; it never blocks. When the CQ is empty but the kernel
// holds overflowed CQEs (IORING_SQ_CQ_OVERFLOW) or pending task work
// (IORING_SQ_TASKRUN), it makes one io_uring_enter to flush them first and
// returns that call's error (for example EEXIST when another thread than a
// single-issuer ring's issuer flushes), so a polling loop does not spin on a
// flush that can never succeed. A closed ring returns ErrClosed.
func (r *Ring) Reap(dst []CQE) (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	if len(dst) == 0 {
		return 0, nil
	}
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	if head == tail {
		if atomic.LoadUint32(r.sqFlags)&(sqCQOverflow|sqTaskrun) == 0 {
			return 0, nil
		}
		r.stats.flushes.Add(1)
		if _, err := r.enter(0, 0, enterGetEvents); err != nil {
			return 0, fmt.Errorf("flush io_uring completions: %w", err)
		}
		tail = atomic.LoadUint32(r.cqTail)
	}
	return r.copyOut(dst, head, tail), nil
}

// FlagString names setup flags, e.g. "sqpoll|attach_wq".
func FlagString(f uint32) string {
	names := []string{"iopoll", "sqpoll", "sq_aff", "cqsize", "clamp", "attach_wq", "r_disabled", "submit_all", "coop_taskrun", "taskrun_flag", "sqe128", "cqe32", "single_issuer", "defer_taskrun"}
	var parts []string
	for i, n := range names {
		if f&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}
