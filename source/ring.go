package source

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bpf"
	"github.com/predictio/predictio/formats"
)

// eventSize is sizeof(struct event) in record.h.
const eventSize = int(unsafe.Sizeof(bpf.RecordEvent{}))

// queryEvery is QUERY_EVERY in record.h: the events programs sample the
// ring's fill once per this many records of a CPU.
const queryEvery = 16

// batchLen is the number of events per batch handed from the ring reader
// to the decoder; nBatches bounds the memory between them (64 × 4096 × 112 B
// = 28 MiB). When every batch is in use the reader waits and the kernel
// drops (and counts) what no longer fits in the ring.
const (
	batchLen = 4096
	nBatches = 64
	// defaultPoll bounds how long events wait in the ring in Batched mode
	// when fewer than the wakeup threshold are pending (they are submitted
	// without wakeup): pollTicks flushes the rings this often.
	defaultPoll = 20 * time.Millisecond
)

type rawBatch struct {
	n  int
	ev [batchLen]bpf.RecordEvent
}

// pollTicks flushes the event and opens rings every Config.Poll until
// done is closed, so that the Batched readers hand on what is pending. A
// ring with nothing pending is left alone, and while the source is paused
// (Pause: only execs, forks and exits are traced, and they wake the
// readers) nothing is flushed. The readers wait on no deadline: cilium/ebpf's
// poller rounds the time left to one down to whole milliseconds, so it spins
// through the last millisecond of every wait (TestBatchedPollDoesNotSpin).
// The ticker also measured cheaper at the 20 ms default: over a 2 s command
// with no I/O, 0.16 ms of reader CPU against 5.2 ms with a deadline; with
// 54 K events, 5.6-6.7 ms against 7.5-8.1 ms.
func (s *Source) pollTicks(done <-chan struct{}) {
	poll := s.pollEvery()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if s.paused.Load() {
			// No ticks at all while paused: an idle daemon wakes nobody.
			t.Stop()
			select {
			case <-done:
				return
			case <-s.pauses:
			}
			poll = s.pollEvery()
			t.Reset(poll)
			continue
		}
		select {
		case <-done:
			return
		case <-s.pauses:
			if p := s.pollEvery(); p != poll {
				poll = p
				t.Reset(poll)
			}
		case <-t.C:
			// Only a ring that holds something is flushed: a traced
			// program that does no I/O wakes no reader.
			if s.paused.Load() {
				break
			}
			if s.events.AvailableBytes() > 0 {
				s.events.Flush()
			}
			if s.opens.AvailableBytes() > 0 {
				s.flushOpens()
			}
		}
	}
}

// SetPoll changes the Batched readers' poll (Config.Poll; 0: the default)
// while the source runs; the daemon polls more often while it follows a
// program for the structure adapters. It has no effect in LowLatency mode.
func (s *Source) SetPoll(d time.Duration) {
	s.poll.Store(int64(d))
	select {
	case s.pauses <- struct{}{}:
	default:
	}
}

// pollEvery is the Batched readers' poll (Config.Poll, SetPoll).
func (s *Source) pollEvery() time.Duration {
	if p := time.Duration(s.poll.Load()); p > 0 {
		return max(p, minPoll)
	}
	return defaultPoll
}

// minPoll is the shortest Config.Poll.
const minPoll = 100 * time.Microsecond

// pipeline moves events from the ring to the consumer. In Batched mode the
// reader fills raw batches and a decoder goroutine decodes and delivers
// them, so a slow consumer never stalls the ring reader. In LowLatency mode
// the reader decodes and delivers itself, as soon as the ring is empty or a
// batch is full.
type pipeline struct {
	s       *Source
	free    chan *rawBatch
	full    chan *rawBatch
	batches int      // allocated so far (up to nBatches), by the reader
	dec     *decoder // LowLatency: the reader's
}

func newPipeline(s *Source) *pipeline {
	p := &pipeline{s: s}
	if s.cfg.Latency == LowLatency {
		p.dec = newDecoder(s)
		return p
	}
	p.free = make(chan *rawBatch, nBatches)
	p.full = make(chan *rawBatch, nBatches)
	return p
}

// read drains the events ring with ReadInto into batches; it allocates
// nothing per event.
func (p *pipeline) read() {
	runtime.LockOSThread()
	if p.s.cfg.Latency == LowLatency {
		realtimeThread()
	} else {
		boostThread()
	}
	cpu0 := threadCPU() // the thread may have run other goroutines before
	defer func() { p.s.readCPU.Store(threadCPU() - cpu0) }()
	low := p.s.cfg.Latency == LowLatency
	rd := p.s.events
	var rec ringbuf.Record
	b := p.take()
	final := false
	// The reader blocks until the kernel wakes it (LowLatency: every
	// record; Batched: the pending data crossed wakeup_bytes) or a flush
	// (in Batched mode pollTicks flushes every Config.Poll).
	for {
		err := rd.ReadInto(&rec)
		if err == nil {
			if len(rec.RawSample) < eventSize {
				continue
			}
			b.ev[b.n] = *(*bpf.RecordEvent)(unsafe.Pointer(&rec.RawSample[0]))
			b.n++
			if b.n == batchLen || (low && (rec.Remaining == 0 || b.n == lowBatch)) {
				// After a dense delivery, nap: also when behind, so a
				// real-time reader never takes a whole CPU from the
				// traced program.
				dense := low && b.n >= denseBatch
				b = p.hand(b)
				if dense {
					nap(napTime)
				}
			}
			continue
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
			if b.n > 0 {
				b = p.hand(b)
			}
			if final && errors.Is(err, os.ErrDeadlineExceeded) {
				p.done()
				return
			}
		default:
			if b.n > 0 {
				p.last(b)
			}
			p.done()
			return
		}
		if p.s.stopping.Load() && !final {
			final = true
			rd.SetDeadline(time.Now())
		}
	}
}

// In LowLatency mode a reader that keeps up is woken for every event: a
// wakeup and a context switch in the traced program's path each time.
// When events come densely (a delivery held denseBatch or more), the
// reader naps for napTime before it looks again, so the events of the
// next napTime arrive in one wakeup; an event after a quiet spell is
// still delivered at once.
const (
	denseBatch = 16
	napTime    = 50 * time.Microsecond
	// lowBatch caps a LowLatency delivery: while the reader is behind (the
	// ring never runs empty) it still hands events on every lowBatch
	// (~1 ms at 200 K events/s), not every 4096 (~20 ms).
	lowBatch = 256
)

// take returns an empty batch: a free one, or a new one while fewer than
// nBatches exist (so a short trace does not pay for 26 MiB of them), or
// else the next one the decoder frees.
func (p *pipeline) take() *rawBatch {
	if p.dec != nil {
		return new(rawBatch)
	}
	select {
	case b := <-p.free:
		return b
	default:
	}
	if p.batches < nBatches {
		p.batches++
		return new(rawBatch)
	}
	return <-p.free
}

// hand passes b on (to the decoder, or, in LowLatency mode, decodes and
// delivers it here) and returns an empty batch.
func (p *pipeline) hand(b *rawBatch) *rawBatch {
	if p.dec != nil {
		p.dec.run(b)
		b.n = 0
		return b
	}
	p.full <- b
	return p.take()
}

// last passes b on as the reader's last batch, taking no empty one in
// its place.
func (p *pipeline) last(b *rawBatch) {
	if p.dec != nil {
		p.dec.run(b)
		b.n = 0
		return
	}
	p.full <- b
}

// done ends the reader's side.
func (p *pipeline) done() {
	if p.dec == nil {
		close(p.full)
	}
}

// decode is the Batched mode's decoder goroutine. Unlike the reader it
// runs at the default nice value: it does most of the recorder's work
// (decoding, resolving files, the consumer: a bundle writer's
// compression), and boosted it took CPU from the traced program whenever
// both wanted one (2 vCPUs: a recorded grep -r ran 1.005 s with it at nice
// 0 against 1.040 s boosted, docs/BENCHMARKS.md). Falling behind costs no events: the reader,
// boosted, queues up to nBatches batches for it.
func (p *pipeline) decode() {
	runtime.LockOSThread()
	cpu0 := threadCPU() // the thread may have run other goroutines before
	defer func() { p.s.decodeCPU.Store(threadCPU() - cpu0) }()
	d := newDecoder(p.s)
	for b := range p.full {
		d.run(b)
		b.n = 0
		p.free <- b
	}
}

// readerNice is the nice value of the reader and hint threads: on a busy
// machine they must keep up with the ring buffer or the kernel drops
// events.
const readerNice = -10

// boostThread lowers the calling (locked) thread's nice value when allowed
// (CAP_SYS_NICE); failure is harmless.
func boostThread() {
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), readerNice)
}

// realtimeThread makes the calling (locked) thread SCHED_FIFO at the lowest
// real-time priority when allowed (CAP_SYS_NICE), else boosts it like
// boostThread: a LowLatency reader then runs as soon as the kernel wakes
// it, ahead of every normal task, however busy the CPUs are. It blocks
// whenever the ring is empty, and the kernel's real-time throttling
// (sched_rt_runtime_us) bounds it if a consumer never returns.
func realtimeThread() {
	// struct sched_param { int sched_priority; }
	prio := int32(1)
	_, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, unix.SCHED_FIFO, uintptr(unsafe.Pointer(&prio)))
	if errno != 0 {
		boostThread()
	}
}

// threadCPU returns the CPU time of the calling thread in ns.
func threadCPU() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return uint64(ts.Nano())
}

// Event flags (record.h).
const (
	evSyscall = 1  // a system call's row: ts its entry, end its exit, ret its result
	evPath    = 2  // the opens ring carries the row's path (an open_event with its op)
	evUserDev = 4  // dev is a user-space st_dev
	evByPath  = 8  // no inode known: resolve the file by the path
	evFault   = 16 // a user page fault's row: ts the fault's entry, end this event
)

// decoder turns raw events into accesses rows with file ids.
type decoder struct {
	s        *Source
	comms    map[[16]byte]string
	cache    map[fileKey]*fileEntry
	last     *fileEntry
	lastComm [16]byte
	comm     string
	rows     []formats.Access
	faults   []int             // rows of faults in this batch
	opEnd    map[uint64]uint64 // a fault op's last event in this batch
	since    uint64            // monotonic time the batch's decoding began
}

func newDecoder(s *Source) *decoder {
	return &decoder{s: s, comms: make(map[[16]byte]string), cache: make(map[fileKey]*fileEntry),
		rows: make([]formats.Access, 0, batchLen), opEnd: make(map[uint64]uint64)}
}

// run decodes b and delivers the rows.
func (d *decoder) run(b *rawBatch) {
	s := d.s
	if s.discard.Load() || s.err.Load() != nil {
		s.discarded.Add(uint64(b.n))
		return
	}
	d.decodeBatch(b)
	s.deliverAccesses(d.rows)
}

// decodeBatch fills d.rows from b; it allocates nothing per event once the
// file and comm are known.
func (d *decoder) decodeBatch(b *rawBatch) {
	s := d.s
	var filtered uint64
	d.rows = d.rows[:0]
	d.faults = d.faults[:0]
	d.since = monoNow()
	for i := 0; i < b.n; i++ {
		e := &b.ev[i]
		var fe *fileEntry
		if e.Flags&evPath != 0 {
			fe = d.lookedUp(e)
		} else {
			fe = d.file(fileKey{dev: e.Dev, ino: e.Ino}, e.Pid, e.Ts, "")
		}
		if fe == nil || fe.state.Load() == stateDenied {
			filtered++
			continue
		}
		npages := e.Npages
		kind := formats.AccessKind(e.Kind)
		if fe.statAt != 0 && kind >= formats.KindRead && kind <= formats.KindImported {
			if npages = s.files.clamp(fe, e.Index, npages); npages == 0 {
				filtered++
				continue
			}
		}
		c := *(*[16]byte)(unsafe.Pointer(&e.Comm))
		if c != d.lastComm || d.comm == "" {
			var ok bool
			if d.comm, ok = d.comms[c]; !ok {
				d.comm = cstring(c[:])
				d.comms[c] = d.comm
			}
			d.lastComm = c
		}
		d.rows = append(d.rows, formats.Access{
			TS: e.Ts, PID: e.Pid, TID: e.Tid, Comm: d.comm, FileID: fe.id,
			FirstPage: e.Index, NPages: npages, Kind: kind,
			EndNS: e.End, Op: e.Op, Ret: e.Ret, Prot: e.Prot, MapFirstPage: e.MapPgoff, MapPages: e.MapPages,
			TracerNS: e.TracerNs, TracerCalls: e.TracerCalls,
		})
		if e.Flags&evFault != 0 {
			d.faults = append(d.faults, len(d.rows)-1)
		}
	}
	d.endFaults()
	s.filtered.Add(filtered)
}

// endFaults gives the rows of each fault in the batch the fault's last
// event as their end: a cold fault the kernel retried has a row before its
// I/O and one after. (A fault's rows in two batches keep each batch's
// last; the op's end is its last row's.)
func (d *decoder) endFaults() {
	if len(d.faults) < 2 {
		return
	}
	clear(d.opEnd)
	for _, i := range d.faults {
		a := &d.rows[i]
		d.opEnd[a.Op] = max(d.opEnd[a.Op], a.EndNS)
	}
	for _, i := range d.faults {
		a := &d.rows[i]
		a.EndNS = d.opEnd[a.Op]
	}
}

// file returns the entry of key, made on first sight (after the opens
// submitted before ts are processed, so the path is known), with path as
// its path when known.
func (d *decoder) file(key fileKey, pid uint32, ts uint64, path string) *fileEntry {
	s := d.s
	fe := d.last
	if fe != nil && fe.key == key {
		return fe
	}
	if fe = d.cache[key]; fe == nil {
		if fe = s.files.get(key); fe == nil {
			if path == "" {
				s.waitOpens(ts)
			}
			fe = s.files.add(key, pid, path)
		}
		d.cache[key] = fe
	}
	if path != "" {
		s.files.addCandidate(key, path)
	}
	d.last = fe
	return fe
}

// lookedUp returns the file of an open, stat or access row: the file it
// found (by inode, or, for access, by the path), or a path-only file for a
// lookup that failed; nil when neither is known.
func (d *decoder) lookedUp(e *bpf.RecordEvent) *fileEntry {
	s := d.s
	path := ""
	if rp, ok := s.takeRowPath(e.Op, d.since); ok {
		path = d.absPath(rp)
	}
	switch {
	case e.Ino != 0:
		dev := e.Dev
		if e.Flags&evUserDev != 0 {
			dev = uint32(formats.KernelDev(uint64(e.Dev)))
		}
		return d.file(fileKey{dev: dev, ino: e.Ino}, e.Pid, e.Ts, path)
	case path == "":
		return nil
	case e.Ret < 0:
		return s.files.addPathOnly(path)
	case e.Flags&evByPath != 0:
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			return s.files.addPathOnly(path) // gone since
		}
		return d.file(statKey(&st), e.Pid, e.Ts, path)
	}
	return nil
}

// absPath makes the path of a row absolute: relative to the path of the
// directory its dirfd was open on when the call returned, where the
// recording knows that directory (the program opened it), else as
// fileTable.absPath does, through /proc/PID/fd (which names what the
// descriptor is open on now: a program walking a tree, like grep -r, has
// opened another directory under that number by then).
func (d *decoder) absPath(rp rowPath) string {
	if rp.path != "" && !filepath.IsAbs(rp.path) && rp.dir.ino != 0 {
		if fe := d.s.files.get(rp.dir); fe != nil {
			if dir := d.s.files.pathOf(fe); filepath.IsAbs(dir) {
				return filepath.Join(dir, rp.path)
			}
		}
	}
	return d.s.files.absPath(rp.pid, rp.dfd, rp.path)
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
