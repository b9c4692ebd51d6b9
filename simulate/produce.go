package simulate

import (
	"fmt"
	"sync"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// batches starts decoding the bundle's record batches in workers()
// goroutines, each also scanning its batches (batch.scan); next hands
// them out in file order with the hints merged in.
func (s *bundleSource) batches(pool *batchPool, cols formats.AccessColumns) (batchProducer, error) {
	ab, err := s.b.AccessBatches(cols)
	if err != nil {
		return nil, err // it names the file
	}
	p := &bundleProducer{src: s, ab: ab, pool: pool, quit: make(chan struct{})}
	p.hintOK = s.hints.Next()
	if err := s.hints.Err(); err != nil {
		ab.Close()
		return nil, fmt.Errorf("read events: %w", err)
	}
	n := workers()
	p.out = make([]chan *batch, n)
	for w := range n {
		p.out[w] = make(chan *batch, 1)
		p.wg.Add(1)
		go p.decode(w, n)
	}
	return p, nil
}

// bundleProducer is the batchProducer of a bundle.
type bundleProducer struct {
	src   *bundleSource
	ab    *formats.AccessBatches
	pool  *batchPool
	out   []chan *batch // worker w's batches w, w+n, w+2n, ...
	quit  chan struct{}
	wg    sync.WaitGroup
	next_ int // next record batch to hand out

	hintOK bool // src.hints.At() is the next hint to merge
	ev     policies.Event
}

// decode is worker w of n: it reads batches w, w+n, ... and scans them.
func (p *bundleProducer) decode(w, n int) {
	defer p.wg.Done()
	for i := w; i < p.ab.Len(); i += n {
		b := p.pool.get()
		if b.ab == nil {
			b.ab = &formats.AccessBatch{}
		}
		err := p.ab.Read(i, b.ab)
		if b.err = err; err == nil {
			b.useColumns(b.ab)
			b.scan(p.src.known)
		}
		select {
		case p.out[w] <- b: // b belongs to the lanes now
		case <-p.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *bundleProducer) next() (*batch, error) {
	for p.next_ < p.ab.Len() {
		b := <-p.out[p.next_%len(p.out)]
		p.next_++
		if b.err != nil {
			p.next_ = p.ab.Len()
			p.hintOK = false
			return nil, fmt.Errorf("read events: %w", b.err)
		}
		if b.unknown < b.n {
			p.next_ = p.ab.Len()
			p.hintOK = false
			return nil, p.src.missing()
		}
		for i := 0; p.hintOK && i < b.n; i++ {
			for p.hintOK && p.src.hints.At().TS <= b.ts[i] {
				if err := p.hint(b, i); err != nil {
					return nil, err
				}
			}
		}
		if b.events() > 0 {
			return b, nil
		}
		p.pool.put(b)
	}
	if !p.hintOK {
		return nil, nil
	}
	// The hints after the last access row.
	b := p.pool.get()
	for p.hintOK && b.events() < batchSize {
		if err := p.hint(b, 0); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// hint moves the next hint into b before access row i (a hint announces
// what follows: it comes before rows of its timestamp).
func (p *bundleProducer) hint(b *batch, i int) error {
	hc := p.src.hints
	h := hc.At()
	if k := p.src.known; k != nil && h.FileID != 0 && !k.has(h.FileID) {
		p.hintOK = false
		return p.src.missing()
	}
	// Custom hints carry no event for the built-in policies; FromHint
	// leaves kind 0 then, which the simulator skips.
	p.ev.FromHint(h)
	b.addHintAt(&p.ev, i)
	p.hintOK = hc.Next()
	if err := hc.Err(); err != nil {
		p.hintOK = false
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}

func (p *bundleProducer) stop() {
	close(p.quit)
	p.wg.Wait()
	p.ab.Close()
}

// missing returns the error of the bundle's reference check.
func (s *bundleSource) missing() error {
	if err := s.b.CheckReferences(); err != nil {
		return err
	}
	return fmt.Errorf("check bundle %s: a file_id reference failed while reading but not when checked again", s.b.Dir())
}
