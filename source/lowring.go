package source

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// A LowLatency events ring wakes its reader for the first record the
// reader has not caught up with. When a traced program reads cached pages
// in a loop, that is one wakeup per record: an irq_work self-IPI in the
// traced thread's system call (on a virtual machine an APIC write that
// exits to the host) and a context switch to the reader, about 20 K of
// them in a cold 16 K-row sqlite3 scan.
//
// So while events come densely the reader polls: it sets the programs'
// reader_polling flag, which makes them submit without a wakeup, and looks
// at the ring every pollNap. After quietPolls empty looks it clears the
// flag and blocks again. A program that read the flag just before it was
// cleared may still submit its record without a wakeup after the reader's
// last look, and then the kernel wakes nobody for the records after it
// either (the reader has not caught up with them). So the first waits
// after a polling spell are bounded: firstBackoff, doubling up to
// maxBackoff, after which the reader blocks until it is woken.
//
// On that scan under `predictio run --policy tree` (2 vCPUs, A/B
// alternated, docs/BENCHMARKS.md) the median run went from 0.673 s to
// 0.444 s; the price is latency: while polling, an event waits up to
// pollNap in the ring.
const (
	// denseWakes wakeups in a row, each within denseGap of the one
	// before, start a polling spell: events come faster than the reader
	// would look. (One read system call may make two or three records
	// microseconds apart.)
	denseGap   = pollNap
	denseWakes = 4
	// pollNap is the time between two looks at the ring while polling.
	// Each look costs a timer interrupt and two context switches on the
	// reader's CPU: on the cold sqlite3 scan of docs/BENCHMARKS.md
	// (2 vCPUs) 200 µs measured fastest, against 20, 50, 100, 500 and
	// 1000 µs.
	pollNap = 200 * time.Microsecond
	// quietPolls empty looks in a row (1 ms) end a polling spell: events
	// 1 ms apart or more are delivered by wakeups.
	quietPolls = 5
	// firstBackoff and maxBackoff bound the waits after a spell.
	firstBackoff = time.Millisecond
	maxBackoff   = time.Second
)

// lowWait is the wait of an adaptive (LowLatency events) ring: its own
// epoll over the ring's fd and an eventfd that Flush, SetDeadline and
// Close write, and the polling state.
type lowWait struct {
	ep, wake int
	setFlag  func(on bool) error // sets reader_polling; on failure the state stays
	polling  bool
	quiet    int           // empty looks in a row while polling
	backoff  time.Duration // the next bounded wait; 0: block
	woken    time.Time     // when the kernel last woke the reader
	dense    int           // wakeups in a row within gap
	gap      time.Duration // denseGap (tests on slow machines widen it)
	quietMax int           // quietPolls (tests on slow machines raise it)
	kicked   atomic.Bool   // Flush, SetDeadline or Close since the last read
	evs      [2]unix.EpollEvent

	mu      sync.Mutex // close against a wait under way
	waiting bool
	closed  bool
}

// newLowWait makes the wait of an adaptive ring whose map fd is fd.
func newLowWait(fd int, setFlag func(bool) error) (*lowWait, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	w := &lowWait{ep: ep, wake: wake, setFlag: setFlag, gap: denseGap, quietMax: quietPolls}
	for _, f := range []int{fd, wake} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, f, &ev); err != nil {
			w.closeFDs()
			return nil, fmt.Errorf("add ring to epoll: %w", err)
		}
	}
	return w, nil
}

// readAdaptive reads the next record of an adaptive ring.
func (r *ring) readAdaptive(rec *ringbuf.Record) error {
	w := r.low
	for {
		if w.polling && !w.kicked.Load() && r.AvailableBytes() == 0 {
			// Looking costs no system call while polling.
			if err := w.idle(); err != nil {
				return err
			}
			continue
		}
		w.kicked.Store(false)
		// The reader's deadline is in the past: it never waits itself.
		err := r.Reader.ReadInto(rec)
		if err == nil {
			w.quiet = 0
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || r.final.Load() {
			return err
		}
		if err := w.idle(); err != nil {
			return err
		}
	}
}

// idle is called when the ring is empty: it naps while polling, ends a
// spell after quietPolls empty looks, and otherwise waits for a wakeup.
func (w *lowWait) idle() error {
	if w.polling {
		if w.quiet < w.quietMax {
			w.quiet++
			nap(pollNap)
			return nil
		}
		if w.setFlag(false) != nil {
			w.quiet = 0 // the programs still do not wake it: poll on
			return nil
		}
		w.polling = false
		w.backoff = firstBackoff
		w.woken = time.Now() // a wakeup soon after starts a new spell
		// The caller looks at the ring once more after the flag is
		// cleared.
		return nil
	}
	timeout := -1
	if w.backoff > 0 {
		timeout = int(w.backoff / time.Millisecond)
		if w.backoff *= 2; w.backoff > maxBackoff {
			w.backoff = 0
		}
	}
	woken, err := w.wait(timeout)
	if err != nil || !woken {
		return err
	}
	now := time.Now()
	if now.Sub(w.woken) >= w.gap {
		w.dense = 0
	} else if w.dense++; w.dense >= denseWakes && w.setFlag(true) == nil {
		w.polling, w.quiet, w.backoff, w.dense = true, 0, 0, 0
	}
	w.woken = now
	return nil
}

// errWaitClosed is wait's error once close was called.
var errWaitClosed = fmt.Errorf("ringbuffer: wait: %w", ringbuf.ErrClosed)

// wait waits up to timeout ms (-1: no limit) and reports whether the ring
// woke it (not a timeout or the eventfd).
func (w *lowWait) wait(timeout int) (bool, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false, errWaitClosed
	}
	w.waiting = true
	w.mu.Unlock()
	n, err := w.epollWait(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting = false
	if w.closed {
		// close left the descriptors to this wait.
		w.closeFDs()
		return false, errWaitClosed
	}
	if err != nil {
		return false, fmt.Errorf("ringbuffer: wait: %w", err)
	}
	ring := false
	for _, ev := range w.evs[:n] {
		if int(ev.Fd) == w.wake {
			var b [8]byte
			_, _ = unix.Read(w.wake, b[:])
		} else {
			ring = true
		}
	}
	return ring, nil
}

// epollWait is epoll_wait(2), retried on EINTR.
func (w *lowWait) epollWait(timeout int) (int, error) {
	for {
		n, err := unix.EpollWait(w.ep, w.evs[:], timeout)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// kick ends a wait under way (none after close).
func (w *lowWait) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.kickLocked()
	}
}

func (w *lowWait) kickLocked() {
	w.kicked.Store(true)
	b := [8]byte{1}
	_, _ = unix.Write(w.wake, b[:])
}

// close releases the descriptors, or, while a wait is under way, kicks it
// and leaves them to it: closing the eventfd now would take its pending
// event out of the epoll set before the wait saw it.
func (w *lowWait) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	if w.waiting {
		w.kickLocked()
		return
	}
	w.closeFDs()
}

func (w *lowWait) closeFDs() {
	unix.Close(w.wake)
	unix.Close(w.ep)
}

// nap sleeps d on the calling thread (a real-time thread has no timer
// slack, so it wakes on time).
func nap(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}
