package source

import "github.com/predictio/predictio/formats"

// Batch is what a Source delivers at once: accesses (and execs) decoded
// from the ring, or the hints of one receive. Files holds the files.arrow
// rows of files first seen since the previous batch: every file a batch's
// accesses or hints name is in that batch's Files or in an earlier one's.
// A row is the file as first resolved: its path may be empty then and be
// found later (Source.File, Source.Files).
//
// A Batch and everything it points to (slices, hint children, names) is
// valid only during the Consume call that receives it; copy what you keep.
type Batch struct {
	Files    []formats.File
	Accesses []formats.Access // in ring order (per CPU, the order the events happened)
	Hints    []formats.Hint   // in arrival order
}

// Consumer receives a Source's batches. Consume is never called
// concurrently. An error stops delivery: the Source closes Failed and
// discards what it reads from then on.
type Consumer interface {
	Consume(b *Batch) error
}

// ConsumerFunc adapts a function to Consumer.
type ConsumerFunc func(*Batch) error

// Consume calls f(b).
func (f ConsumerFunc) Consume(b *Batch) error { return f(b) }

// deliverAccesses hands rows, with the files first seen since the last
// delivery, to the consumer.
func (s *Source) deliverAccesses(rows []formats.Access) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if s.err.Load() != nil || s.discard.Load() {
		s.discarded.Add(uint64(len(rows)))
		return
	}
	b := &s.batch
	b.Files = s.files.takeFresh(b.Files[:0])
	b.Accesses, b.Hints = rows, nil
	if len(b.Files) == 0 && len(rows) == 0 {
		return
	}
	if err := s.consumer.Consume(b); err != nil {
		s.fail(err)
		return
	}
	s.delivered.Add(uint64(len(rows)))
}

// deliverHints hands hints to the consumer; it reports whether they were
// delivered.
func (s *Source) deliverHints(hs []formats.Hint) bool {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if s.err.Load() != nil || s.discard.Load() {
		return false
	}
	b := &s.batch
	b.Files = s.files.takeFresh(b.Files[:0])
	b.Accesses, b.Hints = nil, hs
	if err := s.consumer.Consume(b); err != nil {
		s.fail(err)
		return false
	}
	return true
}
