package simulate

import "github.com/predictio/predictio/policies"

// A block device's cached blocks are a filesystem's metadata (inode
// tables, directories, extent blocks): record keeps the pages the traced
// threads read into them as cache_add rows of the device's file
// (formats.ModeBlock, docs/format.md). They are I/O the program's lookups
// caused, which its recorded metadata service times already wait for;
// the model submits them to the device at their time, where they hold
// slots and bandwidth that the program's data reads then queue behind.

// metaGap is the longest gap between two cache_add rows of adjacent
// blocks that one request holds: ext4 reads an inode table's 32 blocks
// ahead in one request, and the kernel adds its pages one by one.
const metaGap = 50_000 // ns

// metaRun is the run of adjacent metadata blocks being gathered into one
// device request.
type metaRun struct {
	file      uint32
	first, n  uint64
	at, lastT int64 // simulated submission; trace time of its last row
	open      bool
}

// metaRead counts cache_add row ev of a block device, at trace time t:
// the block joins the run being gathered when it follows it, or starts a
// new one after submitting it.
func (l *lane) metaRead(ev *policies.Event, t int64) {
	m := &l.meta
	page, n := ev.Access.Page, max(uint64(ev.Access.NPages), 1)
	if m.open && ev.File == m.file && page == m.first+m.n && t-m.lastT <= metaGap {
		m.n += n
		m.lastT = t
		return
	}
	l.flushMeta()
	at := scale(t, l.speed)
	if th := l.threads.find(threadID(ev)); th != nil {
		// Inside or after the thread's last operation: as far from its
		// completion as recorded (never before the run's start).
		at = max(th.clock+scale(t-th.ref, l.speed), 0)
	}
	*m = metaRun{file: ev.File, first: page, n: n, at: at, lastT: t, open: true}
}

// flushMeta submits the run being gathered.
func (l *lane) flushMeta() {
	m := &l.meta
	if !m.open {
		return
	}
	l.dev.submit(m.at, m.n)
	l.st.MetaPagesRead += m.n
	l.st.MetaRequests++
	m.open = false
}
