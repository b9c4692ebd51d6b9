package simulate

import (
	"fmt"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Source is a stream of workload events in timestamp order. The event
// returned by Event is reused by the next call to Next.
type Source interface {
	Next() bool
	Event() *policies.Event
	Err() error
	Close() error
}

// SliceSource replays a slice of events. It is meant for tests and
// benchmarks.
type SliceSource struct {
	Events []policies.Event
	i      int
	cur    policies.Event
}

// Next advances to the next event.
func (s *SliceSource) Next() bool {
	if s.i >= len(s.Events) {
		return false
	}
	s.cur = s.Events[s.i]
	s.i++
	return true
}

// Event returns the current event.
func (s *SliceSource) Event() *policies.Event { return &s.cur }

// Err returns nil.
func (s *SliceSource) Err() error { return nil }

// Close does nothing.
func (s *SliceSource) Close() error { return nil }

// Reset rewinds the source.
func (s *SliceSource) Reset() { s.i = 0 }

// bundleSource merges a bundle's accesses and hints by timestamp; on equal
// timestamps the hint comes first, since a hint announces what follows.
type bundleSource struct {
	acc     *formats.AccessCursor
	hints   *formats.HintCursor
	accOK   bool
	hintOK  bool
	started bool
	// advance says which cursor the current event came from; it moves on
	// at the next call, since the event aliases the hint's children.
	advanceAcc, advanceHint bool
	hinted                  bool // s.ev holds hint payloads
	ev                      policies.Event
	err                     error
}

// BundleSource streams the accesses and hints of b merged by timestamp. It
// keeps one row of each table in memory.
func BundleSource(b *formats.Bundle) (Source, error) {
	acc, err := b.Accesses()
	if err != nil {
		return nil, fmt.Errorf("read accesses of %s: %w", b.Dir(), err)
	}
	hints, err := b.Hints()
	if err != nil {
		acc.Close()
		return nil, fmt.Errorf("read hints of %s: %w", b.Dir(), err)
	}
	return &bundleSource{acc: acc, hints: hints}, nil
}

func (s *bundleSource) Next() bool {
	if s.err != nil {
		return false
	}
	if !s.started {
		s.started = true
		s.accOK = s.acc.Next()
		s.hintOK = s.hints.Next()
	}
	if s.advanceAcc {
		s.accOK = s.acc.Next()
	}
	if s.advanceHint {
		s.hintOK = s.hints.Next()
	}
	s.advanceAcc, s.advanceHint = false, false
	if err := s.acc.Err(); err != nil {
		s.err = err
		return false
	}
	if err := s.hints.Err(); err != nil {
		s.err = err
		return false
	}
	switch {
	case s.hintOK && (!s.accOK || s.hints.At().TS <= s.acc.At().TS):
		// Custom hints carry no event for the built-in policies;
		// FromHint leaves kind 0 then, which the simulator skips.
		s.ev.FromHint(s.hints.At())
		s.advanceHint = true
		s.hinted = true
		return true
	case s.accOK:
		a := s.acc.At()
		ev := &s.ev
		if s.hinted {
			// Clear the hint payloads once; access events set only
			// scalar fields, which needs no write barriers.
			*ev = policies.Event{}
			s.hinted = false
		}
		ev.Kind, ev.TS, ev.PID, ev.TID, ev.File = policies.EventFileAccess, a.TS, a.PID, a.TID, a.FileID
		ev.Access = policies.AccessOf(a)
		if a.Kind == formats.KindExec {
			// The launch policy's trigger (Event.FromAccess).
			ev.Kind, ev.Access = policies.EventProcessExec, policies.FileAccess{}
		}
		s.advanceAcc = true
		return true
	}
	return false
}

// fill appends up to batchSize events to b: the accesses straight from
// their cursor while no hint is due, the hints through Next.
func (s *bundleSource) fill(b *batch) bool {
	for len(b.evs) < batchSize {
		if s.started && s.accOK && !s.hintOK && s.err == nil {
			s.fillAccesses(b)
			break
		}
		if !s.Next() {
			break
		}
		b.add(&s.ev)
	}
	if err := s.acc.Err(); err != nil && s.err == nil {
		s.err = err
	}
	return len(b.evs) > 0
}

// fillAccesses copies accesses into b without merging: no hint is left.
// It also does Simulator.check's work for the rows it copies, up to the
// first that check must look at closely (b.checked).
func (s *bundleSource) fillAccesses(b *batch) {
	n := len(b.evs)
	evs := b.evs[:batchSize]
	clean := b.checked == n
	for n < batchSize {
		if s.advanceAcc {
			s.advanceAcc = false
			if s.accOK = s.acc.Next(); !s.accOK {
				break
			}
		}
		a := s.acc.At()
		se := &evs[n]
		se.ts, se.pid, se.tid, se.file, se.hint = a.TS, a.PID, a.TID, a.FileID, -1
		se.access = policies.AccessOf(a)
		n++
		s.advanceAcc = true
		if clean {
			if a.FileID > maxFile || a.FirstPage > maxPage-maxReadPages || a.NPages > maxReadPages {
				clean = false
				continue
			}
			if policies.IsDemand(a.Kind) || isMetadata(a.Kind) {
				if se.access.End != 0 {
					b.timed++
				} else {
					b.untimed++
				}
			}
			b.checked = n
		}
	}
	b.evs = evs[:n]
}

func (s *bundleSource) Event() *policies.Event { return &s.ev }

func (s *bundleSource) Err() error { return s.err }

func (s *bundleSource) Close() error {
	err1 := s.acc.Close()
	err2 := s.hints.Close()
	if err1 != nil {
		return err1
	}
	return err2
}
