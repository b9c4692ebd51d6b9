package simulate

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Run's pipeline: one goroutine reads the source into batches of events
// and hands each batch to every lane; each lane runs in a goroutine of its
// own and returns the batch when done with it. Lanes never wait for each
// other, and the reader waits only when a lane's queue is full, so lanes
// run on as many cores as there are and reading overlaps simulating.

// batchSize is the number of events per batch.
const batchSize = 4096

// laneQueue is the number of batches queued per lane.
const laneQueue = 4

// simEvent is one event of a batch. Accesses are held here, hints in the
// batch's hints (hint >= 0).
type simEvent struct {
	ts             uint64
	pid, tid, file uint32
	hint           int32 // index into batch.hints; -1 for an access
	access         policies.FileAccess
}

// batch is a run of events shared read-only by every lane.
type batch struct {
	evs []simEvent
	// checked events were validated and counted into timed and untimed
	// by the source (fillAccesses) already.
	checked        int
	timed, untimed uint64
	hints          []policies.Event
	kids           []uint64 // storage of the hints' Children
	refs           atomic.Int32
	pool           *batchPool
}

func (b *batch) reset() {
	b.evs = b.evs[:0]
	b.checked, b.timed, b.untimed = 0, 0, 0
	b.hints = b.hints[:0]
	b.kids = b.kids[:0]
}

// add appends ev, copying what it refers to.
func (b *batch) add(ev *policies.Event) {
	se := simEvent{ts: ev.TS, pid: ev.PID, tid: ev.TID, file: ev.File, hint: -1}
	if ev.Kind == policies.EventFileAccess {
		se.access = ev.Access
	} else {
		h := *ev
		if n := len(ev.Tree.Children); n > 0 {
			at := len(b.kids)
			b.kids = append(b.kids, ev.Tree.Children...)
			h.Tree.Children = b.kids[at : at+n : at+n]
		}
		se.hint = int32(len(b.hints))
		b.hints = append(b.hints, h)
	}
	b.evs = append(b.evs, se)
}

// event sets ev to event i of b.
func (b *batch) event(i int, ev *policies.Event) {
	se := &b.evs[i]
	if se.hint >= 0 {
		*ev = b.hints[se.hint]
		return
	}
	if se.access.Kind == formats.KindExec {
		// The launch policy's trigger (Event.FromAccess).
		*ev = policies.Event{Kind: policies.EventProcessExec, TS: se.ts, PID: se.pid, TID: se.tid, File: se.file}
		return
	}
	if ev.Kind != policies.EventFileAccess {
		*ev = policies.Event{}
	}
	ev.Kind, ev.TS, ev.PID, ev.TID, ev.File = policies.EventFileAccess, se.ts, se.pid, se.tid, se.file
	ev.Access = se.access
}

// release drops one lane's hold on b; the last one recycles it.
func (b *batch) release() {
	if b.refs.Add(-1) == 0 {
		b.pool.put(b)
	}
}

// batchPool recycles batches.
type batchPool struct{ free chan *batch }

func newBatchPool() *batchPool { return &batchPool{free: make(chan *batch, 64)} }

func newBatch(p *batchPool) *batch { return &batch{evs: make([]simEvent, 0, batchSize), pool: p} }

func (p *batchPool) get() *batch {
	select {
	case b := <-p.free:
		b.reset()
		return b
	default:
		return newBatch(p)
	}
}

func (p *batchPool) put(b *batch) {
	select {
	case p.free <- b:
	default:
	}
}

// batchSource is a Source that fills batches itself, faster than event by
// event (bundleSource).
type batchSource interface {
	// fill appends up to batchSize events to b and reports whether any
	// were added; false at the end or on error (Err).
	fill(b *batch) bool
}

// fillFrom fills b from src event by event.
func fillFrom(src Source, b *batch) bool {
	for len(b.evs) < batchSize && src.Next() {
		b.add(src.Event())
	}
	return len(b.evs) > 0
}

// run simulates src through every lane in parallel.
func (s *Simulator) run(src Source) error {
	pool := newBatchPool()
	chans := make([]chan *batch, len(s.lanes))
	var wg sync.WaitGroup
	for i, l := range s.lanes {
		chans[i] = make(chan *batch, laneQueue)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.consume(s, chans[i])
		}()
	}
	err := s.produce(src, pool, chans)
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	return err
}

// produce reads src into batches and sends each to every lane.
func (s *Simulator) produce(src Source, pool *batchPool, chans []chan *batch) error {
	bs, fast := src.(batchSource)
	for {
		b := pool.get()
		var ok bool
		if fast {
			ok = bs.fill(b)
		} else {
			ok = fillFrom(src, b)
		}
		if !ok {
			if err := src.Err(); err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			return nil
		}
		if err := s.check(b); err != nil {
			return err
		}
		b.refs.Store(int32(len(chans)))
		for _, ch := range chans {
			ch <- b
		}
	}
}

// check validates b's accesses, counts its events and notes the trace
// start, before any lane sees the batch.
func (s *Simulator) check(b *batch) error {
	s.begin(b.evs[0].ts)
	s.rows += uint64(b.checked)
	s.timed += b.timed
	s.untimed += b.untimed
	for i := b.checked; i < len(b.evs); i++ {
		se := &b.evs[i]
		if se.hint >= 0 {
			continue
		}
		a := &se.access
		if se.file > maxFile || a.Page > maxPage-maxReadPages || a.NPages > maxReadPages {
			ev := policies.Event{Kind: policies.EventFileAccess, TS: se.ts, File: se.file, Access: *a}
			if err := checkAccess(&ev); err != nil {
				return s.accessError(s.rows, &ev, err)
			}
		}
		s.rows++
		if policies.IsDemand(a.Kind) || isMetadata(a.Kind) {
			if a.End != 0 {
				s.timed++
			} else {
				s.untimed++
			}
		}
	}
	s.events += uint64(len(b.evs))
	return nil
}

// consume runs the lane over the batches of ch.
func (l *lane) consume(s *Simulator, ch <-chan *batch) {
	switch {
	case l.fut != nil:
		l.consumeAhead(s, ch)
	case l.ra == nil && l.disp == nil && plainFastPath:
		for b := range ch {
			l.plain(s, b)
			b.release()
		}
	default:
		for b := range ch {
			for i := range b.evs {
				l.prefetchFor(b.evs, i)
				b.event(i, &l.ev)
				t, e := s.rel(&l.ev)
				l.step(&l.ev, t, e)
			}
			b.release()
		}
	}
}

// plainFastPath turns lane.plain on; tests turn it off to compare.
var plainFastPath = true

// prefetchAhead is how many events ahead plain prefetches page-table
// slots and victims.
const prefetchAhead = 6

// plain runs a lane without policies (the cache and the device alone)
// over b: one-page demand accesses are served inline, with the memory
// they will touch prefetched a few events ahead, and the common cases of
// the cache (a full LRU cache of direct-table pages) and of the device (a
// request in time order) inlined too; every other event takes step. The
// results are those of step (TestPlainFastPathMatches).
func (l *lane) plain(s *Simulator, b *batch) {
	c, dev := l.cache, l.dev
	evs := b.evs
	ts0 := s.ts0
	fastLRU := c.model == LRU && c.onEvict == nil
	var st Stats // counts of the inlined accesses, added to l.st at the end
	self := unsafe.Pointer(l)
	for i := range evs {
		// prefetchFor, inlined.
		pa, pb, pc := self, self, self
		if j := i + prefetchAhead; j < len(evs) {
			pa = c.slot(evs[j].file, evs[j].access.Page, self)
		}
		if q := &c.inactive; len(c.entries) == c.capacity && q.head+2*prefetchAhead < q.tail {
			m := uint64(len(q.buf) - 1)
			pb = unsafe.Pointer(&c.entries[q.buf[(q.head+2*prefetchAhead)&m].idx])
			k := c.entries[q.buf[(q.head+prefetchAhead)&m].idx].key
			pc = c.slot(uint32(k>>40), k&maxPage, self)
		}
		prefetch3(pa, pb, pc)
		se := &evs[i]
		if se.hint >= 0 || se.access.NPages > 1 || !policies.IsDemand(se.access.Kind) {
			b.event(i, &l.ev)
			t, e := s.rel(&l.ev)
			l.step(&l.ev, t, e)
			continue
		}
		var t int64
		if se.ts > ts0 {
			t = int64(se.ts - ts0)
		}
		e := int64(-1)
		if end := se.access.End; end >= se.ts && end != 0 {
			e = int64(end - ts0)
		}
		id := se.tid
		if id == 0 {
			id = se.pid
		}
		th := l.threads.get(id)
		var now int64
		if op := se.access.Op; th.started && (op == 0 || op != th.op) && l.speed == 1 {
			// begin's common case, inlined.
			think := max(t-th.ref, 0)
			st.ThinkNS += think
			now = th.clock + think
			th.op, th.ref = op, t
			if e >= t {
				th.ref = e
			}
		} else {
			now = l.begin(th, t, e, op)
		}
		st.Accesses++
		wait := now
		file, page := se.file, se.access.Page
		idx := int32(-1)
		var tab []uint32
		if int(file) < len(c.direct) {
			if tab = c.direct[file]; page < uint64(len(tab)) {
				idx = int32(tab[page]) - 1
			} else {
				idx = c.lookupHash(file, page)
			}
		} else {
			idx = c.lookupHash(file, page)
		}
		if idx >= 0 {
			ent := &c.entries[idx]
			st.Hits++
			if ent.flags&flagPrefetched != 0 {
				ent.flags &^= flagPrefetched
				if ent.ready > now {
					st.Late++
				} else {
					st.Used++
				}
			}
			wait = max(wait, ent.ready)
			c.touch(idx)
		} else {
			st.Misses++
			wait = dev.submitOne(now)
			if !fastLRU || page >= uint64(len(tab)) || c.replaceDirect(file, page, wait, flagReferenced) < 0 {
				c.insertSlow(file, page, wait, flagReferenced)
			}
		}
		st.StallNS += wait - now
		th.clock = wait
	}
	l.st.Accesses += st.Accesses
	l.st.Demand += st.Accesses
	l.st.Hits += st.Hits
	l.st.Misses += st.Misses
	l.st.PagesRead += st.Misses
	l.st.Requests += st.Misses
	l.st.Used += st.Used
	l.st.Late += st.Late
	l.st.StallNS += st.StallNS
	l.st.ThinkNS += st.ThinkNS
	l.demand += st.Accesses
}

// prefetchFor prefetches what serving evs[i] and the events after it
// will touch: the direct-table slot of the event prefetchAhead ahead, the
// entry of the LRU victim 2 prefetchAhead ahead and the table slot of the
// victim prefetchAhead ahead (whose entry the prefetch before brought in),
// and, for a lane with an oracle, the slot of the page prefetchAhead past
// its window's front (Future.Upcoming), which it will soon request. The
// misses of several events then overlap. Lines not worth prefetching point
// at the lane itself.
func (l *lane) prefetchFor(evs []simEvent, i int) {
	c := l.cache
	self := unsafe.Pointer(l)
	pa, pb, pc := self, self, self
	if j := i + prefetchAhead; j < len(evs) {
		pa = c.slot(evs[j].file, evs[j].access.Page, self)
	}
	if q := &c.inactive; len(c.entries) == c.capacity && q.head+2*prefetchAhead < q.tail {
		m := uint64(len(q.buf) - 1)
		pb = unsafe.Pointer(&c.entries[q.buf[(q.head+2*prefetchAhead)&m].idx])
		k := c.entries[q.buf[(q.head+prefetchAhead)&m].idx].key
		pc = c.slot(uint32(k>>40), k&maxPage, self)
	}
	if l.fut != nil {
		if f, p, ok := l.fut.Upcoming(prefetchAhead); ok {
			prefetch(c.slot(f, p, self))
		}
	}
	prefetch3(pa, pb, pc)
}

// consumeAhead is consume for a lane whose policies read a streamed
// future: before each demand access the lane feeds the future from the
// batches ahead until it holds what the policies need (Future.Needs),
// holding those batches meanwhile.
func (l *lane) consumeAhead(s *Simulator, ch <-chan *batch) {
	var held []*batch // held[0] is being served
	var fb, fi int    // next event to feed: held[fb].evs[fi]
	eof := false
	feed := func() bool {
		for fb == len(held) {
			if eof {
				return false
			}
			b, ok := <-ch
			if !ok {
				eof = true
				l.fut.Close()
				return false
			}
			held = append(held, b)
		}
		se := &held[fb].evs[fi]
		if se.hint < 0 && policies.IsDemand(se.access.Kind) {
			l.fut.Add(policies.FutureAccess{File: se.file, Page: se.access.Page, NPages: se.access.NPages})
			l.futureHeld = max(l.futureHeld, l.fut.Held())
		}
		if fi++; fi == len(held[fb].evs) {
			fb, fi = fb+1, 0
		}
		return true
	}
	for {
		if len(held) == 0 && !feed() {
			return
		}
		b := held[0]
		for i := range b.evs {
			if se := &b.evs[i]; se.hint < 0 && policies.IsDemand(se.access.Kind) {
				for l.fut.Needs(int(l.demand)) && feed() {
				}
			}
			l.prefetchFor(b.evs, i)
			b.event(i, &l.ev)
			t, e := s.rel(&l.ev)
			l.step(&l.ev, t, e)
		}
		for fb == 0 && feed() { // feed past b before dropping it
		}
		held = held[1:]
		fb--
		b.release()
	}
}
