package live

import (
	"slices"
	"sync"

	"github.com/predictio/predictio/source"
)

// asyncSink hands copies of the source's batches to a slower consumer (a
// compressing bundle writer) on a goroutine of its own, so that it never
// delays the live loop. Its queue is bounded: when the writer falls
// behind by queueBatches batches, Consume waits for it (nothing recorded
// is dropped).
type asyncSink struct {
	next source.Consumer
	ch   chan *source.Batch
	free chan *source.Batch
	done chan struct{}
	err  error
	once sync.Once
}

const queueBatches = 64

func newAsyncSink(next source.Consumer) *asyncSink {
	s := &asyncSink{next: next, ch: make(chan *source.Batch, queueBatches), free: make(chan *source.Batch, queueBatches), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *asyncSink) run() {
	defer close(s.done)
	for b := range s.ch {
		if s.err == nil {
			s.err = s.next.Consume(b)
		}
		select {
		case s.free <- b:
		default:
		}
	}
}

// Consume queues a copy of b. It returns the writer's first error.
func (s *asyncSink) Consume(b *source.Batch) error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	var c *source.Batch
	select {
	case c = <-s.free:
	default:
		c = new(source.Batch)
	}
	c.Files = append(c.Files[:0], b.Files...)
	c.Accesses = append(c.Accesses[:0], b.Accesses...) // Comm strings are the source's, interned for good
	c.Hints = c.Hints[:0]
	for _, h := range b.Hints {
		h.Children = slices.Clone(h.Children)
		h.Name = string([]byte(h.Name)) // a view of the source's receive buffer
		c.Hints = append(c.Hints, h)
	}
	s.ch <- c
	return nil
}

// close waits until every queued batch is written and returns the
// writer's first error.
func (s *asyncSink) close() error {
	s.once.Do(func() { close(s.ch) })
	<-s.done
	return s.err
}
