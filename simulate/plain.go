package simulate

import "unsafe"

// plainRun serves rows [i, n) of a run of one-page demand reads of one
// thread th on file's direct table tab, without operation ids or end
// times, in a lane without policies over a full LRU cache: the common case
// of a plain lane, kept in one flat loop over the ts and page columns. It
// returns the first row it did not serve (a page past the table, a hashed
// or stale victim, a submission out of time order), for the general path.
// Its results are those of step (TestPlainFastPathMatches).
var victimAhead uint64 = 6

func (l *lane) plainRun(ts, pages []uint64, i int, ts0 uint64, th *thread, file uint32, tab []uint32) int {
	c, dev := l.cache, l.dev
	if c.model != LRU || c.onEvict != nil || len(c.entries) != c.capacity || !th.started || l.speed != 1 || th.op != 0 || dev.rates != nil {
		return i
	}
	n := min(len(ts), len(pages))
	entries := c.entries
	q := &c.inactive
	qbuf := q.buf
	qm := uint64(len(qbuf) - 1)
	qhead, qtail := q.head, q.tail
	qlimit := uint64(2*c.capacity + 64)
	slots := dev.slots
	shead := dev.head
	latency, onePage, missNS := dev.latency, dev.onePage, l.missNS
	slat := dev.slat // a demand read's latency by depth, or nil
	key := uint64(file) << 40
	clock, ref := th.clock, th.ref
	var hits, misses, used, late, wasted uint64
	var think, stall int64
	self := unsafe.Pointer(l)
	for ; i < n; i++ {
		// Prefetch the table slot of the page prefetchAhead rows on, the
		// victim's entry 2 prefetchAhead misses on and the table slot of
		// the victim prefetchAhead misses on (its entry came in before).
		pa, pb, pc := self, self, self
		if j := i + prefetchAhead; j < n {
			if p := pages[j]; p < uint64(len(tab)) {
				pa = unsafe.Pointer(&tab[p])
			}
		}
		if qhead+2*victimAhead < qtail {
			pb = unsafe.Pointer(&entries[qbuf[(qhead+2*victimAhead)&qm].idx])
			if k := entries[qbuf[(qhead+victimAhead)&qm].idx].key; k>>40 == uint64(file) && k&maxPage < uint64(len(tab)) {
				pc = unsafe.Pointer(&tab[k&maxPage])
			}
		}
		prefetch3(pa, pb, pc)

		p := pages[i]
		if p >= uint64(len(tab)) {
			break
		}
		var t int64
		if x := ts[i]; x > ts0 {
			t = int64(x - ts0)
		}
		// begin: think time since the last operation's start (no end
		// times), no operation ids.
		dt := max(t-ref, 0)
		now := clock + dt
		wait := now
		if ix := tab[p]; ix != 0 {
			e := &entries[ix-1]
			if e.flags&flagPrefetched != 0 {
				e.flags &^= flagPrefetched
				if e.ready > now {
					late++
				} else {
					used++
				}
			}
			wait = max(wait, e.ready)
			// touch: a record at the most recent end unless it is there.
			if r := qbuf[(qtail-1)&qm]; r.idx != ix-1 || r.ver != e.ver {
				if qtail-qhead == uint64(len(qbuf)) || qtail-qhead+1 > qlimit {
					break
				}
				e.ver++
				qbuf[qtail&qm] = qrec{ix - 1, e.ver}
				qtail++
			}
			hits++
		} else {
			// The victim: the oldest record, live and on this table.
			r := qbuf[qhead&qm]
			e := &entries[r.idx]
			for e.ver != r.ver { // stale: the entry was queued again later
				qhead++
				r = qbuf[qhead&qm]
				e = &entries[r.idx]
			}
			vp := e.key & maxPage
			if e.key>>40 != uint64(file) || vp >= uint64(len(tab)) {
				break
			}
			// The device, in time order: the read starts when a slot
			// frees and crosses the channel after the last span.
			start := max(now, slots[shead])
			lat := latency
			if slat != nil {
				dev.head = shead
				lat = dev.latencyAt(start, slat)
			}
			x := start + lat
			k := len(dev.busy)
			if k == 0 || x < dev.busy[k-1].start {
				break
			}
			last := &dev.busy[k-1]
			var done int64
			if x <= last.end {
				done = last.end + onePage
				last.end = done
			} else {
				done = x + onePage
				dev.busy = append(dev.busy, span{x, done})
				if k >= 2*maxSpans {
					dev.trim()
				}
			}
			j := shead - 1
			if j < 0 {
				j = len(slots) - 1
			}
			if len(slots) > 1 && slots[j] > done {
				dev.head = shead
				dev.free(done)
				shead = dev.head
			} else {
				slots[shead] = done
				if shead++; shead == len(slots) {
					shead = 0
				}
			}
			qhead++
			if e.flags&flagPrefetched != 0 {
				wasted++
			}
			tab[vp] = 0
			tab[p] = r.idx + 1
			e.key, e.ready, e.flags = key|p, done, flagReferenced|flagUsed
			e.ver++
			qbuf[qtail&qm] = qrec{r.idx, e.ver}
			qtail++
			wait = done + missNS
			misses++
		}
		think += dt
		stall += wait - now
		clock, ref = wait, t
	}
	q.head, q.tail = qhead, qtail
	dev.head = shead
	th.clock, th.ref = clock, ref
	c.wasted += wasted
	st := &l.st
	acc := hits + misses
	l.flatRows += acc
	st.Accesses += acc
	st.Demand += acc
	st.Hits += hits
	st.Misses += misses
	st.PagesRead += misses
	st.Requests += misses
	st.Used += used
	st.Late += late
	st.StallNS += stall
	st.ThinkNS += think
	l.demand += acc
	return i
}
