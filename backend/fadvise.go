package backend

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/uring"
)

// fadviseSlot is one FADVISE in flight: its file (held until completion)
// and its pages.
type fadviseSlot struct {
	f        *File
	first, n uint64
	at       time.Time // submitted
	sub      time.Time // when its request was submitted to the backend
}

// fadviser issues FADVISE(WILLNEED) through one io_uring with plain
// descriptors (no registered files, so files can come and go). It is
// owned by one goroutine; done is called on it for every completion.
// Needs Linux 5.6 (IORING_OP_FADVISE).
type fadviser struct {
	ring  *uring.Ring
	slots []fadviseSlot
	busy  []bool
	free  []uint64
	cqes  []uring.CQE
	done  func(fadviseSlot, error)
}

var errAbandoned = errors.New("io_uring abandoned after a ring failure")

func newFadviser(depth int, done func(fadviseSlot, error)) (*fadviser, error) {
	r, err := uring.New(uint32(depth))
	if err != nil {
		return nil, err
	}
	p, err := r.Probe()
	if err != nil || !p.Supported(uring.OpFadvise) {
		r.Close()
		return nil, fmt.Errorf("probe io_uring: %w", errors.Join(errNoFadvise, err, uring.ErrNotSupported))
	}
	a := &fadviser{ring: r, slots: make([]fadviseSlot, depth), busy: make([]bool, depth), cqes: make([]uring.CQE, depth), done: done}
	for i := depth - 1; i >= 0; i-- {
		a.free = append(a.free, uint64(i))
	}
	return a, nil
}

func (a *fadviser) inflight() int { return len(a.slots) - len(a.free) }

// submit queues one FADVISE(WILLNEED) of n bytes at off, waiting for a
// completion first when every slot is busy. flush submits what is queued.
func (a *fadviser) submit(fd int, off, n uint64, s fadviseSlot) error {
	for len(a.free) == 0 {
		if err := a.wait(1); err != nil {
			return err
		}
	}
	sqe := a.ring.GetSQE()
	if sqe == nil {
		if _, err := a.ring.Submit(); err != nil {
			return err
		}
		if sqe = a.ring.GetSQE(); sqe == nil {
			return errors.New("submission queue full")
		}
	}
	i := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	s.at = time.Now()
	a.slots[i], a.busy[i] = s, true
	sqe.PrepFadvise(int32(fd), off, uint32(n), unix.FADV_WILLNEED)
	sqe.UserData = i
	return nil
}

// flush submits the queued requests.
func (a *fadviser) flush() error {
	if a.ring.SQReady() == 0 {
		return nil
	}
	_, err := a.ring.Submit()
	return err
}

// wait submits what is queued and waits for at least min completions.
func (a *fadviser) wait(min int) error {
	if _, err := a.ring.SubmitAndWait(uint32(min)); err != nil {
		return err
	}
	return a.poll()
}

// poll reaps the completions that are ready.
func (a *fadviser) poll() error {
	for {
		n, err := a.ring.Reap(a.cqes)
		for _, c := range a.cqes[:n] {
			i := c.UserData
			if i >= uint64(len(a.slots)) || !a.busy[i] {
				continue
			}
			s := a.slots[i]
			a.slots[i], a.busy[i] = fadviseSlot{}, false
			a.free = append(a.free, i)
			a.done(s, c.Err())
		}
		if err != nil || n < len(a.cqes) {
			return err
		}
	}
}

// drain waits for every FADVISE in flight.
func (a *fadviser) drain() error {
	for a.inflight() > 0 {
		if err := a.wait(1); err != nil {
			return err
		}
	}
	return nil
}

// abandon closes the ring and completes whatever was in flight with
// errAbandoned, so that their files are released and pages settled.
func (a *fadviser) abandon() {
	a.ring.Close()
	for i, b := range a.busy {
		if b {
			s := a.slots[i]
			a.slots[i], a.busy[i] = fadviseSlot{}, false
			a.done(s, errAbandoned)
		}
	}
	a.free = a.free[:0]
}

func (a *fadviser) close() { a.ring.Close() }
