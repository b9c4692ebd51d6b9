package simulate

import "github.com/predictio/predictio/policies"

// A block device's cached blocks are a filesystem's metadata (inode
// tables, directories, extent blocks): record keeps the pages the traced
// threads read into them as cache_add rows of the device's file
// (formats.ModeBlock, docs/format.md). They are I/O the program's lookups
// caused.
//
// Blocks a thread read inside one of its metadata operations (an open,
// stat, readdir or mmap whose recorded span holds their rows) are that
// operation's own reads: with a host model (a measured profile) the model
// serves them on the device, one run after another while the operation
// waits, and the operation takes its recorded time before the first block
// plus those reads plus at most Host.OpenNS after the last, instead of
// its recorded service time, which holds the recording's device. Other
// blocks (read inside an operation the bundle has no row for, such as a
// lookup of an excluded file) are submitted to the device at their time,
// where they hold slots and bandwidth that the program's reads queue
// behind.
//
// A block's row comes before its operation's row (the recorder writes an
// operation at its end), so runs wait, per thread, for the thread's next
// operation.

// metaGap is the longest gap between two cache_add rows of adjacent
// blocks that one request holds: ext4 reads an inode table's 32 blocks
// ahead in one request, and the kernel adds its pages one by one.
const metaGap = 50_000 // ns

// metaRun is a run of adjacent metadata blocks read by one thread: one
// device request.
type metaRun struct {
	tid       uint32
	file      uint32
	first, n  uint64
	t0, lastT int64 // trace time of its first and last rows
	at        int64 // when it is submitted if no operation holds it
	open      bool
}

// metaRead counts cache_add row ev of a block device, at trace time t:
// the block joins the run being gathered when it follows it, or starts a
// new one.
func (l *lane) metaRead(ev *policies.Event, t int64) {
	m := &l.meta
	tid := threadID(ev)
	page, n := ev.Access.Page, max(uint64(ev.Access.NPages), 1)
	if m.open && m.tid == tid && ev.File == m.file && page == m.first+m.n && t-m.lastT <= metaGap {
		m.n += n
		m.lastT = t
		return
	}
	l.flushMeta()
	at := scale(t, l.speed)
	if th := l.threads.find(tid); th != nil {
		// Inside or after the thread's last operation: as far from its
		// completion as recorded (never before the run's start).
		at = max(th.clock+scale(t-th.ref, l.speed), 0)
	}
	*m = metaRun{tid: tid, file: ev.File, first: page, n: n, t0: t, lastT: t, at: at, open: true}
}

// flushMeta closes the run being gathered: it waits for its thread's next
// operation.
func (l *lane) flushMeta() {
	m := &l.meta
	if !m.open {
		return
	}
	m.open = false
	l.metaPend = append(l.metaPend, *m)
}

// metaHold is how long, in trace time, a run waits for its thread's next
// operation: a run whose thread has none (its lookups were of files the
// bundle leaves out) goes to the device once the rows have moved this far
// past it, so that the runs waiting stay few. An operation that waited
// longer for its metadata keeps its recorded service.
const metaHold = 100_000_000 // ns

// takeMeta hands thread tid's waiting runs to its operation at trace time
// t with recorded end e (-1 unknown), starting at simulated time now: with
// inside set (a metadata operation, with a host model) the runs its span
// holds are read as its own and it returns the operation's modelled
// service and true; the thread's other runs, and other threads' runs
// older than metaHold, are submitted at their time. The caller has closed
// the run being gathered (flushMeta).
func (l *lane) takeMeta(tid uint32, t, e, now int64, inside bool) (int64, bool) {
	at, lastT, held := now, int64(0), false
	keep := l.metaPend[:0]
	for _, m := range l.metaPend {
		switch {
		case m.tid != tid && m.lastT >= t-metaHold:
			keep = append(keep, m)
			continue
		case m.tid == tid && inside && e > t && m.t0 >= t && m.lastT <= e:
			if !held {
				at += scale(m.t0-t, l.speed) // the operation's work before its first read
				held = true
			}
			at = l.dev.submitSyncFor(at, m.n, m.file)
			lastT = m.lastT
			l.st.MetaSyncRequests++
		default:
			l.dev.submitFor(m.at, m.n, m.file)
		}
		l.st.MetaPagesRead += m.n
		l.st.MetaRequests++
	}
	l.metaPend = keep
	if !held {
		return 0, false
	}
	return at - now + min(scale(e-lastT, l.speed), l.host.OpenNS), true
}

// finishMeta submits the runs still waiting for an operation.
func (l *lane) finishMeta() {
	l.flushMeta()
	for _, m := range l.metaPend {
		l.dev.submitFor(m.at, m.n, m.file)
		l.st.MetaPagesRead += m.n
		l.st.MetaRequests++
	}
	l.metaPend = l.metaPend[:0]
}
