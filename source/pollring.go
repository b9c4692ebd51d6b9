package source

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// ring is a ring buffer's reader. Unless it blocks (LowLatency), it waits
// for records in the Go runtime's network poller, not in cilium/ebpf's
// blocking epoll_wait.
//
// A goroutine blocked in a system call keeps its P in the syscall state:
// the runtime's sysmon thread then cannot sleep until that P is retaken,
// and after every wakeup it polls every 20 µs for a millisecond and more.
// A goroutine parked in the poller holds no P, and sysmon sleeps sooner.
// Measured on an idle daemon (2 vCPUs, Linux 6.18, docs/BENCHMARKS.md),
// A/B alternated, 3 × 1000 execs of an ignored program: 203-215 µs of its
// CPU per exec with blocking readers, 165-176 µs with this one.
//
// A LowLatency reader runs on its own real-time thread, which the kernel
// wakes itself: there a wakeup through the poller would add a second
// thread's wakeup to every event's latency. The events ring's LowLatency
// reader is adaptive (lowring.go): it polls while events are dense.
type ring struct {
	*ringbuf.Reader
	f     *os.File // a duplicate of the ring's fd, in the poller; nil: blocking
	rc    syscall.RawConn
	low   *lowWait    // ringAdaptive's wait
	final atomic.Bool // SetDeadline was called: ReadInto no longer waits
}

// ringMode is how a ring's reader waits for records.
type ringMode int

const (
	ringPolled   ringMode = iota // in the Go runtime's poller (Batched)
	ringBlocking                 // in cilium/ebpf's epoll_wait (LowLatency opens)
	ringAdaptive                 // lowWait (LowLatency events)
)

// newRing opens the reader of the ring buffer m. setFlag sets the
// programs' reader_polling flag (ringAdaptive only).
func newRing(m *ebpf.Map, mode ringMode, setFlag func(bool) error) (*ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	r := &ring{Reader: rd}
	switch mode {
	case ringBlocking:
		return r, nil
	case ringAdaptive:
		r.low, err = newLowWait(m.FD(), setFlag)
	default:
		err = r.poll(m)
	}
	if err != nil {
		rd.Close()
		return nil, err
	}
	// A deadline in the past: the reader's own wait never blocks.
	rd.SetDeadline(time.Unix(1, 0))
	return r, nil
}

// poll registers a duplicate of m's fd with the Go runtime's poller.
func (r *ring) poll(m *ebpf.Map) error {
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("duplicate ring fd: %w", err)
	}
	// O_NONBLOCK has no effect on a map's fd but to let the poller take
	// it: bpf(2) and the ring's mmap ignore it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("set ring fd non-blocking: %w", err)
	}
	r.f = os.NewFile(uintptr(fd), m.String())
	if r.rc, err = r.f.SyscallConn(); err != nil {
		r.f.Close()
		return fmt.Errorf("poll ring: %w", err)
	}
	// The poller must have taken it: a deadline on a file it could not
	// register fails with ErrNoDeadline.
	if err := r.f.SetReadDeadline(time.Time{}); err != nil {
		r.f.Close()
		return fmt.Errorf("poll ring: %w", err)
	}
	return nil
}

// ReadInto reads the next record as ringbuf.Reader.ReadInto does: it
// waits until one is submitted with a wakeup, or Flush, or SetDeadline.
func (r *ring) ReadInto(rec *ringbuf.Record) error {
	if r.low != nil {
		return r.readAdaptive(rec)
	}
	if r.f == nil {
		return r.Reader.ReadInto(rec)
	}
	for {
		err := r.Reader.ReadInto(rec)
		if !errors.Is(err, os.ErrDeadlineExceeded) || r.final.Load() {
			return err
		}
		if err := r.wait(); err != nil {
			return err
		}
	}
}

// wait parks the caller in the poller until the ring holds records, or a
// Flush or SetDeadline wakes it.
func (r *ring) wait() error {
	err := r.rc.Read(func(uintptr) bool { return r.final.Load() || r.AvailableBytes() > 0 })
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A wakeup (wake): whatever it was for, the next ReadInto sees.
		r.f.SetReadDeadline(time.Time{})
		return nil
	}
	if err != nil {
		return fmt.Errorf("ringbuffer: %w", ringbuf.ErrClosed)
	}
	return nil
}

// wake wakes a reader parked in the poller or in its lowWait.
func (r *ring) wake() {
	switch {
	case r.low != nil:
		r.low.kick()
	case r.f != nil:
		r.f.SetReadDeadline(time.Unix(1, 0))
	}
}

// Flush makes the reader return ringbuf.ErrFlushed once it has read the
// records submitted before.
func (r *ring) Flush() error {
	err := r.Reader.Flush()
	r.wake()
	return err
}

// SetDeadline makes ReadInto return os.ErrDeadlineExceeded once the ring
// is empty, instead of waiting (only a deadline now or in the past is
// used: the readers' final drain).
func (r *ring) SetDeadline(t time.Time) {
	if r.f == nil && r.low == nil {
		r.Reader.SetDeadline(t)
		return
	}
	r.final.Store(true)
	r.wake()
}

// Close closes the reader; a ReadInto under way returns ringbuf.ErrClosed.
func (r *ring) Close() error {
	err := r.Reader.Close()
	if r.f != nil {
		r.f.Close()
	}
	if r.low != nil {
		r.low.close()
	}
	return err
}
