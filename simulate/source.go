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
	b *formats.Bundle
	// known, when set, holds the file table's ids: batches check the
	// rows' references against it (Input.deferRefs), and a miss stops
	// the run with CheckReferences' error.
	known   *idSet
	acc     *formats.AccessCursor // opened on the first Next
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
	hints, err := b.Hints()
	if err != nil {
		return nil, fmt.Errorf("read hints of %s: %w", b.Dir(), err)
	}
	return &bundleSource{b: b, hints: hints}, nil
}

func (s *bundleSource) Next() bool {
	if s.err != nil {
		return false
	}
	if !s.started {
		s.started = true
		acc, err := s.b.Accesses()
		if err != nil {
			s.err = fmt.Errorf("read accesses of %s: %w", s.b.Dir(), err)
			return false
		}
		s.acc = acc
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
		if h := s.hints.At(); s.known != nil && h.FileID != 0 && !s.known.has(h.FileID) {
			s.err = s.missing()
			return false
		}
		// Custom hints carry no event for the built-in policies;
		// FromHint leaves kind 0 then, which the simulator skips.
		s.ev.FromHint(s.hints.At())
		s.advanceHint = true
		s.hinted = true
		return true
	case s.accOK:
		a := s.acc.At()
		if s.known != nil && !s.known.has(a.FileID) {
			s.err = s.missing()
			return false
		}
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

func (s *bundleSource) Event() *policies.Event { return &s.ev }

func (s *bundleSource) Err() error { return s.err }

func (s *bundleSource) Close() error {
	var err1 error
	if s.acc != nil {
		err1 = s.acc.Close()
	}
	err2 := s.hints.Close()
	if err1 != nil {
		return err1
	}
	return err2
}
