package simulate

import (
	"bytes"
	"sync/atomic"
	"unsafe"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// batch is a run of events shared read-only by every lane: access rows
// held column by column (a record batch of the bundle, or events a Source
// gave), and the hints merged between them.
type batch struct {
	n int // access rows

	ts, page, end, op, mapFirst, mapPages []uint64
	pid, tid, file, npg                   []uint32
	kind                                  []formats.AccessKind
	prot                                  []uint8 // nil: the lanes need no mapping columns (all zero)

	// hints[k] comes before access row hintAt[k] (n: after the last row).
	hints  []policies.Event
	hintAt []int32
	kids   []uint64 // storage of the hints' Children

	// Set by scan.
	scanned        bool
	bad            int // first row check must look at closely; n when none
	unknown        int // first row whose file the file table lacks; n when none
	timed, untimed uint64
	// simple: every row is a one-page demand access of file file0 on
	// thread thread0, without operation id or end time.
	simple  bool
	file0   uint32
	thread0 uint32
	facts   colFacts // of the columns of ab, as of the last scan

	ab   *formats.AccessBatch // the decoded record batch the columns alias
	err  error                // the error that ended decoding, instead of rows
	own  ownCols              // column storage for events from a Source
	refs atomic.Int32
	pool *batchPool
}

// ownCols holds the columns of a batch filled from events.
type ownCols struct {
	ts, page, end, op, mapFirst, mapPages []uint64
	pid, tid, file, npg                   []uint32
	kind                                  []formats.AccessKind
	prot                                  []uint8
}

// events returns the number of events of b: rows and hints.
func (b *batch) events() int { return b.n + len(b.hints) }

// firstTS returns the timestamp of b's first event.
func (b *batch) firstTS() uint64 {
	if len(b.hints) > 0 && b.hintAt[0] == 0 || b.n == 0 {
		return b.hints[0].TS
	}
	return b.ts[0]
}

func (b *batch) reset() {
	b.n = 0
	b.hints = b.hints[:0]
	b.hintAt = b.hintAt[:0]
	b.kids = b.kids[:0]
	b.scanned = false
	b.err = nil
	b.timed, b.untimed = 0, 0
	o := &b.own
	o.ts, o.page, o.end, o.op, o.mapFirst, o.mapPages = o.ts[:0], o.page[:0], o.end[:0], o.op[:0], o.mapFirst[:0], o.mapPages[:0]
	o.pid, o.tid, o.file, o.npg, o.kind, o.prot = o.pid[:0], o.tid[:0], o.file[:0], o.npg[:0], o.kind[:0], o.prot[:0]
	b.useOwn()
}

// useOwn points b's columns at its own storage.
func (b *batch) useOwn() {
	o := &b.own
	b.ts, b.page, b.end, b.op, b.mapFirst, b.mapPages = o.ts, o.page, o.end, o.op, o.mapFirst, o.mapPages
	b.pid, b.tid, b.file, b.npg, b.kind, b.prot = o.pid, o.tid, o.file, o.npg, o.kind, o.prot
}

// useColumns points b's columns at a decoded record batch. Columns not
// read (nil) are those the lanes do not need.
func (b *batch) useColumns(ab *formats.AccessBatch) {
	b.ab = ab
	b.n = ab.Rows
	b.ts, b.page, b.end, b.op, b.mapFirst, b.mapPages = ab.TS, ab.FirstPage, ab.EndNS, ab.Op, ab.MapFirstPage, ab.MapPages
	b.pid, b.tid, b.file, b.npg, b.kind, b.prot = ab.PID, ab.TID, ab.FileID, ab.NPages, ab.Kind, ab.Prot
}

// add appends ev, copying what it refers to.
func (b *batch) add(ev *policies.Event) {
	if ev.Kind != policies.EventFileAccess {
		b.addHint(ev)
		return
	}
	o := &b.own
	a := &ev.Access
	o.ts = append(o.ts, ev.TS)
	o.pid = append(o.pid, ev.PID)
	o.tid = append(o.tid, ev.TID)
	o.file = append(o.file, ev.File)
	o.page = append(o.page, a.Page)
	o.npg = append(o.npg, a.NPages)
	o.kind = append(o.kind, a.Kind)
	o.end = append(o.end, a.End)
	o.op = append(o.op, a.Op)
	o.prot = append(o.prot, a.Prot)
	o.mapFirst = append(o.mapFirst, a.MapFirst)
	o.mapPages = append(o.mapPages, a.MapPages)
	b.n++
	b.useOwn()
}

// addHint appends hint ev after the rows so far, copying its children.
func (b *batch) addHint(ev *policies.Event) { b.addHintAt(ev, b.n) }

// addHintAt appends hint ev before access row i, copying its children;
// hints must be added in order.
func (b *batch) addHintAt(ev *policies.Event, i int) {
	h := *ev
	if n := len(ev.Tree.Children); n > 0 {
		at := len(b.kids)
		b.kids = append(b.kids, ev.Tree.Children...)
		h.Tree.Children = b.kids[at : at+n : at+n]
	}
	b.hints = append(b.hints, h)
	b.hintAt = append(b.hintAt, int32(i))
}

// access returns row i as the FileAccess of an event.
func (b *batch) access(i int) policies.FileAccess {
	a := policies.FileAccess{Kind: b.kind[i], Page: b.page[i], NPages: b.npg[i], End: b.end[i], Op: b.op[i]}
	if b.prot != nil {
		a.Prot, a.MapFirst, a.MapPages = b.prot[i], b.mapFirst[i], b.mapPages[i]
	}
	return a
}

// row sets ev to access row i of b.
func (b *batch) row(i int, ev *policies.Event) {
	if ev.Kind != policies.EventFileAccess {
		*ev = policies.Event{} // clear a hint's payloads once
	}
	ev.Kind, ev.TS, ev.PID, ev.TID, ev.File = policies.EventFileAccess, b.ts[i], b.pid[i], b.tid[i], b.file[i]
	ev.Access = b.access(i)
	if b.kind[i] == formats.KindExec {
		// The launch policy's trigger (Event.FromAccess).
		ev.Kind, ev.Access = policies.EventProcessExec, policies.FileAccess{}
	}
}

// threadOf returns the clock row i runs on: its thread, or its process.
func (b *batch) threadOf(i int) uint32 {
	if t := b.tid[i]; t != 0 {
		return t
	}
	return b.pid[i]
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

func (p *batchPool) get() *batch {
	select {
	case b := <-p.free:
		b.reset()
		return b
	default:
		b := &batch{pool: p}
		b.reset()
		return b
	}
}

func (p *batchPool) put(b *batch) {
	select {
	case p.free <- b:
	default:
	}
}

// idSet is a set of file ids: a bitmap below 2^24, a map beyond.
type idSet struct {
	bits []uint64
	big  map[uint32]bool
}

func (s *idSet) add(id uint32) {
	if id > maxFile {
		if s.big == nil {
			s.big = map[uint32]bool{}
		}
		s.big[id] = true
		return
	}
	if w := int(id >> 6); w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits))...)
	}
	s.bits[id>>6] |= 1 << (id & 63)
}

func (s *idSet) has(id uint32) bool {
	if w := int(id >> 6); w < len(s.bits) {
		return s.bits[w]&(1<<(id&63)) != 0
	}
	return s.big[id]
}

// scan does the checks and counts of b's rows that need no order, so that
// the goroutines decoding batches can do them in parallel: the first row
// check must look at closely, the first row whose file known lacks (when
// known is set), the rows with and without service times, and whether the
// batch is simple. Columns that hold one value throughout (compared as
// memory, which is fast) are looked at once; what scan learned of a column
// is kept while the decoder says it did not change (AccessBatch.Same).
func (b *batch) scan(known *idSet) {
	n := b.n
	b.scanned = true
	b.bad, b.unknown = n, n
	b.timed, b.untimed, b.simple = 0, 0, false
	f := &b.facts
	// Facts of columns that changed since they were learned are void.
	if b.ab != nil {
		f.known &= b.ab.Same
	} else {
		f.known = 0
	}
	if n == 0 {
		return
	}
	learn := func(c formats.AccessColumns, fact *bool, now func() bool) {
		if f.known&c == 0 {
			*fact = now()
			if b.ab != nil {
				f.known |= c
			}
		}
	}
	file, npg, kind, end, op := b.file[:n], b.npg[:n], b.kind[:n], b.end[:n], b.op[:n]
	learn(formats.ColFileID, &f.oneFile, func() bool { return same(file) })
	learn(formats.ColKind, &f.oneKind, func() bool { return same(kind) })
	learn(formats.ColEndNS, &f.noEnd, func() bool { return zero(end) })
	if !f.oneFile || !f.oneKind || !f.noEnd {
		b.scanRows(known)
		return
	}
	// One file and kind, no end times.
	page := b.page[:n]
	maxPg, maxN := page[0], npg[0]
	for _, p := range page {
		maxPg = max(maxPg, p)
	}
	learn(formats.ColNPages, &f.oneNPages, func() bool { return same(npg) })
	if !f.oneNPages {
		for _, c := range npg {
			maxN = max(maxN, c)
		}
	}
	if file[0] > maxFile || maxPg > maxPage-maxReadPages || maxN > maxReadPages {
		b.scanRows(known)
		return
	}
	if known != nil && !known.has(file[0]) {
		b.unknown = 0
	}
	k := kind[0]
	if policies.IsDemand(k) || isMetadata(k) {
		b.untimed = uint64(n)
	}
	learn(formats.ColOp, &f.noOp, func() bool { return zero(op) })
	learn(formats.ColTID, &f.oneTID, func() bool { return same(b.tid[:n]) })
	learn(formats.ColPID, &f.onePID, func() bool { return same(b.pid[:n]) })
	oneThread := f.oneTID && (b.tid[0] != 0 || f.onePID)
	b.simple = policies.IsDemand(k) && maxN <= 1 && f.noOp && oneThread
	b.file0, b.thread0 = file[0], b.threadOf(0)
}

// colFacts is what scan learned of a batch's columns, kept while they do
// not change.
type colFacts struct {
	known                                                    formats.AccessColumns // the columns whose facts hold
	oneFile, oneKind, noEnd, oneNPages, noOp, oneTID, onePID bool
}

// scanRows is scan row by row.
func (b *batch) scanRows(known *idSet) {
	n := b.n
	page, npg, file, kind, end := b.page[:n], b.npg[:n], b.file[:n], b.kind[:n], b.end[:n]
	var timed, untimed uint64
	lastKnown, lastOK := uint32(0), false
	for i := range n {
		f := file[i]
		if b.bad == n && (f > maxFile || page[i] > maxPage-maxReadPages || npg[i] > maxReadPages) {
			b.bad = i
		}
		if known != nil && b.unknown == n && !(lastOK && f == lastKnown) {
			if known.has(f) {
				lastKnown, lastOK = f, true
			} else {
				b.unknown = i
			}
		}
		if k := kind[i]; policies.IsDemand(k) || isMetadata(k) {
			if end[i] != 0 {
				timed++
			} else {
				untimed++
			}
		}
	}
	b.timed, b.untimed = timed, untimed
}

// same reports whether every element of s equals the first, comparing
// s with itself shifted by one element.
func same[T uint8 | formats.AccessKind | uint32 | uint64](s []T) bool {
	if len(s) < 2 {
		return true
	}
	w := int(unsafe.Sizeof(s[0]))
	m := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*w)
	return bytes.Equal(m[w:], m[:len(m)-w])
}

// zero reports whether every element of s is 0.
func zero(s []uint64) bool { return len(s) == 0 || s[0] == 0 && same(s) }
