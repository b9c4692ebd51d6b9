package source

import (
	"errors"
	"math"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// open_event flags (record.bpf.c).
const (
	openExec = 1 // the path was given to execve/execveat
	openRow  = 2 // the path of the row with this op (evPath)
)

// openEventSize is sizeof(struct open_event) in record.bpf.c.
const openEventSize = 304

// rowPath is the path of a metadata row, as its system call was given it:
// relative to the directory dfd was open on then (dir, when the kernel
// named one), or to the working directory.
type rowPath struct {
	pid  uint32
	dfd  int32
	dir  fileKey
	path string
}

// readOpens resolves open and exec events to path candidates.
func (s *Source) readOpens() {
	var rec ringbuf.Record
	final := false
	// The reader blocks until an open arrives (the programs submit them
	// with a wakeup) or a flush (flushOpens; in Batched mode pollTicks
	// flushes what is pending every Config.Poll): a source with nothing to
	// trace wakes nobody.
	if s.cfg.Latency != Batched {
		// The LowLatency event reader (real-time) waits for this one
		// to resolve a new file's path: it must not wait behind the
		// machine's other tasks.
		runtime.LockOSThread()
		realtimeThread()
	}
	for {
		t := monoNow()
		err := s.opens.ReadInto(&rec)
		switch {
		case err == nil:
			if len(rec.RawSample) < openEventSize {
				continue
			}
			b := rec.RawSample
			op := le64(b[8:])
			pid := le32(b[16:])
			dfd := int32(le32(b[24:]))
			flags := le32(b[28:])
			dir := fileKey{dev: le32(b[32:]), ino: le64(b[40:])}
			path := cstring(b[48:openEventSize])
			if flags&openRow != 0 && op != 0 {
				s.putRowPath(op, rowPath{pid: pid, dfd: dfd, dir: dir, path: path})
			} else {
				s.files.resolveOpen(pid, dfd, path, flags&openExec != 0)
				if flags&openExec != 0 {
					s.noteExec(le64(b[0:]), pid, dfd, path)
				}
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.markOpens(t)
		case errors.Is(err, ringbuf.ErrFlushed):
			// Everything submitted before the flush was asked for has
			// been read (t may be older: taken before a blocking read).
			s.markOpens(max(t, s.flushAt.Load()))
		default:
			s.markOpens(math.MaxUint64)
			return // closed
		}
		if s.stopping.Load() {
			if final {
				s.markOpens(math.MaxUint64)
				return
			}
			// Drain what is left, then stop.
			final = true
			s.opens.SetDeadline(time.Now())
		}
	}
}

// waitOpens waits (briefly) until every open event submitted before ts has
// been processed, so a file's path candidate is known at its first access.
func (s *Source) waitOpens(ts uint64) {
	if s.opensMark.Load() >= ts {
		return
	}
	moved := s.opensMoved()
	s.flushOpens()
	timeout := time.NewTimer(100 * time.Millisecond)
	defer timeout.Stop()
	for s.opensMark.Load() < ts {
		select {
		case <-moved:
			moved = s.opensMoved()
		case <-timeout.C:
			return
		}
	}
}

// markOpens records that every open event submitted before ts has been
// processed, and wakes the waiters (waitOpens, takeRowPath).
func (s *Source) markOpens(ts uint64) {
	s.opensMark.Store(ts)
	s.movedMu.Lock()
	if s.moved != nil {
		close(s.moved)
		s.moved = nil
	}
	s.movedMu.Unlock()
}

// opensMoved returns a channel closed at the next markOpens.
func (s *Source) opensMoved() <-chan struct{} {
	s.movedMu.Lock()
	defer s.movedMu.Unlock()
	if s.moved == nil {
		s.moved = make(chan struct{})
	}
	return s.moved
}

// maxRowPaths bounds the paths waiting for their rows (a row lost in a
// full ring leaves its path behind).
const maxRowPaths = 65536

func (s *Source) putRowPath(op uint64, p rowPath) {
	s.rpmu.Lock()
	if len(s.rowPaths) >= maxRowPaths {
		clear(s.rowPaths)
	}
	s.rowPaths[op] = p
	s.rpmu.Unlock()
}

// takeRowPath returns (and forgets) the path of the row with op. The path
// was submitted to the opens ring just before the row; after is a time
// after the row was submitted. It waits until the opens reader has
// processed everything submitted before after: a path still missing then
// was lost (the opens ring was full).
func (s *Source) takeRowPath(op, after uint64) (rowPath, bool) {
	var timeout *time.Timer
	for {
		moved := s.opensMoved()
		s.rpmu.Lock()
		p, ok := s.rowPaths[op]
		if ok {
			delete(s.rowPaths, op)
		}
		s.rpmu.Unlock()
		if ok {
			return p, true
		}
		if s.opensMark.Load() >= after {
			return rowPath{}, false
		}
		if timeout == nil {
			s.flushOpens()
			timeout = time.NewTimer(100 * time.Millisecond)
			defer timeout.Stop()
		}
		select {
		case <-moved:
		case <-timeout.C:
			return rowPath{}, false
		}
	}
}

// flushOpens has the opens reader read what is in the ring now and then
// mark everything submitted before now as processed.
func (s *Source) flushOpens() {
	s.flushAt.Store(monoNow())
	s.opens.Flush()
}

func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
