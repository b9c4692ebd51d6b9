package simulate

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Run's pipeline: batches of events are produced in order (a bundle's
// record batches, decoded by up to GOMAXPROCS goroutines in parallel, one
// column per field and only the columns the lanes read; or events of any
// Source, in batches of batchSize) and handed to every lane; each lane runs
// in a goroutine of its own and returns the batch when done with it. Lanes
// never wait for each other, and the producer waits only when a lane's
// queue is full, so lanes run on as many cores as there are and decoding
// overlaps simulating.

// batchSize is the number of events per batch from a Source that is not a
// bundle; a bundle's batches are its record batches.
const batchSize = 4096

// laneQueue is the number of batches queued per lane.
const laneQueue = 2

// batchProducer yields batches in order.
type batchProducer interface {
	// next returns the next batch, nil at the end or on error.
	next() (*batch, error)
	// stop ends the producer's goroutines.
	stop()
}

// batchSource is a Source that produces batches itself (a bundle's).
type batchSource interface {
	// batches starts producing batches of the columns cols, checking file
	// references on the way unless they were checked before.
	batches(pool *batchPool, cols formats.AccessColumns) (batchProducer, error)
}

// eventProducer fills batches from a Source event by event.
type eventProducer struct {
	src  Source
	pool *batchPool
}

func (p *eventProducer) next() (*batch, error) {
	b := p.pool.get()
	for b.events() < batchSize && p.src.Next() {
		b.add(p.src.Event())
	}
	if err := p.src.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	if b.events() == 0 {
		return nil, nil
	}
	b.scan(nil)
	return b, nil
}

func (p *eventProducer) stop() {}

// Columns the lanes read: without policies no mapping columns; comm, ret
// and kind_name never.
const (
	plainColumns  = formats.ColTS | formats.ColPID | formats.ColTID | formats.ColFileID | formats.ColFirstPage | formats.ColNPages | formats.ColKind | formats.ColEndNS | formats.ColOp
	policyColumns = plainColumns | formats.ColProt | formats.ColMapFirstPage | formats.ColMapPages
)

// run simulates src through every lane in parallel.
func (s *Simulator) run(src Source) error {
	pool := newBatchPool()
	var prod batchProducer = &eventProducer{src: src, pool: pool}
	if bs, ok := src.(batchSource); ok {
		cols := plainColumns
		for _, l := range s.lanes {
			if l.ra != nil || l.disp != nil {
				cols = policyColumns
			}
		}
		p, err := bs.batches(pool, cols)
		if err != nil {
			return err
		}
		prod = p
	}
	defer prod.stop()
	chans := make([]chan *batch, len(s.lanes))
	var wg sync.WaitGroup
	for i, l := range s.lanes {
		chans[i] = make(chan *batch, laneQueue)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.consume(s, chans[i])
			l.finish()
		}()
	}
	err := s.produce(prod, chans)
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	return err
}

// produce hands every batch of prod to every lane.
func (s *Simulator) produce(prod batchProducer, chans []chan *batch) error {
	for {
		b, err := prod.next()
		if err != nil {
			return err
		}
		if b == nil {
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
	s.begin(b.firstTS())
	for i := b.bad; i < b.n; i++ {
		if b.file[i] > maxFile || b.page[i] > maxPage-maxReadPages || b.npg[i] > maxReadPages {
			ev := policies.Event{Kind: policies.EventFileAccess, TS: b.ts[i], File: b.file[i], Access: b.access(i)}
			if err := checkAccess(&ev); err != nil {
				return s.accessError(s.rows+uint64(i), &ev, err)
			}
		}
	}
	s.rows += uint64(b.n)
	s.timed += b.timed
	s.untimed += b.untimed
	s.events += uint64(b.events())
	return nil
}

// workers returns how many goroutines decode a bundle's batches.
func workers() int { return max(1, min(runtime.GOMAXPROCS(0), 4)) }

// consume runs the lane over the batches of ch.
func (l *lane) consume(s *Simulator, ch <-chan *batch) {
	switch {
	case l.fut != nil:
		l.consumeAhead(s, ch)
	case l.ra == nil && l.disp == nil && plainFastPath && l.kinds == nil && l.block == nil:
		for b := range ch {
			l.plainBatch(s, b)
			b.release()
		}
	default:
		for b := range ch {
			h := 0
			for i := range b.n {
				for ; h < len(b.hints) && int(b.hintAt[h]) == i; h++ {
					l.stepHint(s, b, h)
				}
				l.prefetchFor(b, i)
				if k := b.kind[i]; l.disp == nil && l.ra != nil && b.npg[i] <= 1 && (k == formats.KindRead || k == formats.KindImported) {
					l.readRow(s, b, i)
				} else {
					l.stepRow(s, b, i)
				}
			}
			for ; h < len(b.hints); h++ {
				l.stepHint(s, b, h)
			}
			b.release()
		}
	}
}

// stepRow serves access row i of b through step.
func (l *lane) stepRow(s *Simulator, b *batch, i int) {
	b.row(i, &l.ev)
	t, e := s.rel(&l.ev)
	l.step(&l.ev, t, e)
}

// stepHint serves hint h of b through step.
func (l *lane) stepHint(s *Simulator, b *batch, h int) {
	l.ev = b.hints[h]
	t, e := s.rel(&l.ev)
	l.step(&l.ev, t, e)
}

// plainFastPath turns lane.plain on; tests turn it off to compare.
var plainFastPath = true

// prefetchAhead is how many events ahead plain prefetches page-table
// slots and victims.
const prefetchAhead = 6

// plainBatch runs a lane without policies (the cache and the device
// alone) over b: hints and rows that are not one-page demand accesses
// take step, the others plain, or plainRun's flat loop over runs of a
// simple batch.
func (l *lane) plainBatch(s *Simulator, b *batch) {
	h := 0
	for i := 0; i < b.n; {
		for ; h < len(b.hints) && int(b.hintAt[h]) == i; h++ {
			l.stepHint(s, b, h)
		}
		end := b.n
		if h < len(b.hints) {
			end = int(b.hintAt[h])
		}
		// The flat loop where it applies; the general one for a row where
		// it stops, or for 64 rows where it cannot start.
		n := 64
		if b.simple {
			j := l.plainSimple(s, b, i, end)
			if j > i {
				n = 1
			}
			i = j
		}
		if i < end {
			l.plain(s, b, i, min(end, i+n))
			i = min(end, i+n)
		}
	}
	for ; h < len(b.hints); h++ {
		l.stepHint(s, b, h)
	}
}

// plainSimple serves rows [i, end) of a simple batch with plainRun as far
// as it goes, and returns where it stopped.
func (l *lane) plainSimple(s *Simulator, b *batch, i, end int) int {
	c := l.cache
	if int(b.file0) >= len(c.direct) {
		return i
	}
	tab := c.direct[b.file0]
	th := l.threads.find(b.thread0)
	if len(tab) == 0 || th == nil {
		return i
	}
	return l.plainRun(b.ts[:end], b.page[:end], i, s.ts0, th, b.file0, tab)
}

// plain serves rows [from, to) of b, one-page demand accesses inline, with
// the memory they will touch prefetched a few events ahead, and the common
// cases of the cache (a full LRU cache of direct-table pages) and of the
// device (a request in time order) inlined too; every other row takes
// step. The results are those of step (TestPlainFastPathMatches).
func (l *lane) plain(s *Simulator, b *batch, from, to int) {
	c, dev := l.cache, l.dev
	ts0 := s.ts0
	fastLRU := c.model == LRU && c.onEvict == nil
	var st Stats // counts of the inlined accesses, added to l.st at the end
	for i := from; i < to; i++ {
		l.prefetchFor(b, i)
		if b.npg[i] > 1 || !policies.IsDemand(b.kind[i]) {
			l.stepRow(s, b, i)
			continue
		}
		var t int64
		if ts := b.ts[i]; ts > ts0 {
			t = int64(ts - ts0)
		}
		e := int64(-1)
		if end := b.end[i]; end >= b.ts[i] && end != 0 {
			e = int64(end - ts0)
		}
		th := l.threads.get(b.threadOf(i))
		var now int64
		if op := b.op[i]; th.started && (op == 0 || op != th.op) && l.speed == 1 {
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
			l.noteFirst(now) // a lane's first operation comes this way
		}
		st.Accesses++
		wait := now
		file, page := b.file[i], b.page[i]
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
			if dev.rates != nil {
				wait = dev.submitSyncFor(now, 1, file)
			} else {
				wait = dev.submitOne(now)
			}
			if !fastLRU || page >= uint64(len(tab)) || c.replaceDirect(file, page, wait, flagReferenced) < 0 {
				c.insertSlow(file, page, wait, flagReferenced)
			}
			wait += l.missNS
		}
		st.StallNS += wait - now
		if idx >= 0 && e >= t && l.host != nil && b.kind[i] != formats.KindMap {
			wait = l.cachedRead(wait, 1)
		}
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

// prefetchFor prefetches what serving row i of b and the rows after it
// will touch: the direct-table slot of the row prefetchAhead ahead and,
// in a lane with readahead, the model's byte of that page (PageState); the
// entry of the row half as far ahead when its slot holds one (a hit reads
// it); the entry of the LRU victim 2 prefetchAhead ahead and the table
// slot of the victim prefetchAhead ahead (whose entry the prefetch before
// brought in); and, for a lane with an oracle, the slot of the page
// prefetchAhead past its window's front (Future.Upcoming), which it will
// soon request. The misses of several events then overlap. Lines not
// worth prefetching point at the lane itself; one call prefetches all.
func (l *lane) prefetchFor(b *batch, i int) {
	c := l.cache
	self := unsafe.Pointer(l)
	pa, pb, pc, pd, pe, pf, pg, ph := self, self, self, self, self, self, self, self
	if j := i + prefetchAhead; j < b.n {
		pa = c.slot(b.file[j], b.page[j], self)
		if l.ra != nil {
			// The readahead model's byte of that page, which it reads
			// first.
			if p := l.ra.PageState(b.file[j], b.page[j]); p != nil {
				pd = unsafe.Pointer(p)
			}
		}
	}
	if q := &c.inactive; len(c.entries) == c.capacity && q.head+2*prefetchAhead < q.tail {
		m := uint64(len(q.buf) - 1)
		pb = unsafe.Pointer(&c.entries[q.buf[(q.head+2*prefetchAhead)&m].idx])
		if q.head+2*prefetchAhead+1 < q.tail {
			// A lane whose hits leave stale records (an oracle's) pops
			// two records a miss.
			pg = unsafe.Pointer(&c.entries[q.buf[(q.head+2*prefetchAhead+1)&m].idx])
		}
		k := c.entries[q.buf[(q.head+prefetchAhead)&m].idx].key
		pc = c.slot(uint32(k>>40), k&maxPage, self)
	}
	if l.fut != nil {
		if f, p, ok := l.fut.Upcoming(prefetchAhead); ok {
			pe = c.slot(f, p, self)
		}
	}
	// The entry of the row half as far ahead, when its slot (prefetched
	// before) holds one: a hit reads it.
	if j := i + prefetchAhead/2; j < b.n {
		if s := (*uint32)(c.slot(b.file[j], b.page[j], nil)); s != nil && *s != 0 {
			pf = unsafe.Pointer(&c.entries[*s-1])
		}
	}
	prefetch8(pa, pb, pc, pd, pe, pf, pg, ph)
}

// consumeAhead is consume for a lane whose policies read a streamed
// future: before each demand access the lane feeds the future from the
// batches ahead until it holds what the policies need (Future.Needs),
// holding those batches meanwhile.
func (l *lane) consumeAhead(s *Simulator, ch <-chan *batch) {
	var held []*batch // held[0] is being served
	var fb, fi int    // next row to feed: held[fb] row fi
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
			if b.n == 0 {
				fb++ // hints only: nothing to feed
			}
		}
		hb := held[fb]
		if policies.IsDemand(hb.kind[fi]) {
			l.fut.Add(policies.FutureAccess{File: hb.file[fi], Page: hb.page[fi], NPages: hb.npg[fi]})
			l.futureHeld = max(l.futureHeld, l.fut.Held())
		}
		if fi++; fi == hb.n {
			fb, fi = fb+1, 0
		}
		return true
	}
	for {
		if len(held) == 0 {
			feed()
			if len(held) == 0 {
				return
			}
		}
		b := held[0]
		h := 0
		for i := range b.n {
			for ; h < len(b.hints) && int(b.hintAt[h]) == i; h++ {
				l.stepHint(s, b, h)
			}
			if policies.IsDemand(b.kind[i]) {
				for l.fut.Needs(int(l.demand)) && feed() {
				}
			}
			l.prefetchFor(b, i)
			l.stepRow(s, b, i)
		}
		for ; h < len(b.hints); h++ {
			l.stepHint(s, b, h)
		}
		for fb == 0 && feed() { // feed past b before dropping it
		}
		held = held[1:]
		fb--
		b.release()
	}
}
