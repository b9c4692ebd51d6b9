package source

import (
	"errors"
	"math"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// openExec flags an open_event that came from execve/execveat.
const openExec = 1

// openEventSize is sizeof(struct open_event) in record.bpf.c.
const openEventSize = 280

// readOpens resolves open and exec events to path candidates.
func (s *Source) readOpens() {
	var rec ringbuf.Record
	final := false
	s.opens.SetDeadline(time.Now().Add(readDeadline))
	for {
		t := monoNow()
		err := s.opens.ReadInto(&rec)
		switch {
		case err == nil:
			if len(rec.RawSample) < openEventSize {
				continue
			}
			b := rec.RawSample
			pid := le32(b[8:])
			dfd := int32(le32(b[16:]))
			flags := le32(b[20:])
			path := cstring(b[24:openEventSize])
			s.files.resolveOpen(pid, dfd, path, flags&openExec != 0)
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.opensMark.Store(t)
			if !final {
				s.opens.SetDeadline(time.Now().Add(readDeadline))
			}
		case errors.Is(err, ringbuf.ErrFlushed):
			s.opensMark.Store(t)
		default:
			s.opensMark.Store(math.MaxUint64)
			return // closed
		}
		if s.stopping.Load() {
			if final {
				s.opensMark.Store(math.MaxUint64)
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
	s.opens.Flush()
	deadline := time.Now().Add(100 * time.Millisecond)
	for s.opensMark.Load() < ts && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
