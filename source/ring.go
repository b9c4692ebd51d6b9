package source

import (
	"errors"
	"os"
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

// batchLen is the number of events per batch handed from the ring reader
// to the decoder; nBatches bounds the memory between them (64 × 4096 × 64 B
// = 16 MiB). When every batch is in use the reader waits and the kernel
// drops (and counts) what no longer fits in the ring.
const (
	batchLen = 4096
	nBatches = 64
	// readDeadline bounds how long events wait in the ring in Batched mode
	// when fewer than the wakeup threshold are pending (they are submitted
	// without wakeup).
	readDeadline = 20 * time.Millisecond
)

type rawBatch struct {
	n  int
	ev [batchLen]bpf.RecordEvent
}

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
	defer func() { p.s.readCPU.Store(threadCPU()) }()
	low := p.s.cfg.Latency == LowLatency
	rd := p.s.events
	var rec ringbuf.Record
	b := p.take()
	final := false
	poll := readDeadline
	if p.s.cfg.poll > 0 {
		poll = p.s.cfg.poll
	}
	if !low {
		rd.SetDeadline(time.Now().Add(poll))
	}
	for {
		err := rd.ReadInto(&rec)
		if err == nil {
			if len(rec.RawSample) < eventSize {
				continue
			}
			b.ev[b.n] = *(*bpf.RecordEvent)(unsafe.Pointer(&rec.RawSample[0]))
			b.n++
			if b.n == batchLen || (low && rec.Remaining == 0) {
				dense := b.n >= denseBatch
				b = p.hand(b)
				if low && dense {
					nap()
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
				p.done(b)
				return
			}
			if !final && !low {
				rd.SetDeadline(time.Now().Add(poll))
			}
		default:
			if b.n > 0 {
				b = p.hand(b)
			}
			p.done(b)
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
)

// nap sleeps napTime on the calling thread (a real-time thread has no
// timer slack, so it wakes on time).
func nap() {
	ts := unix.NsecToTimespec(int64(napTime))
	_ = unix.Nanosleep(&ts, nil)
}

// take returns an empty batch: a free one, or a new one while fewer than
// nBatches exist (so a short trace does not pay for 16 MiB of them), or
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

// done ends the reader's side.
func (p *pipeline) done(b *rawBatch) {
	if p.dec == nil {
		close(p.full)
	}
}

// decode is the Batched mode's decoder goroutine.
func (p *pipeline) decode() {
	runtime.LockOSThread()
	boostThread()
	defer func() { p.s.decodeCPU.Store(threadCPU()) }()
	d := newDecoder(p.s)
	for b := range p.full {
		d.run(b)
		b.n = 0
		p.free <- b
	}
}

// readerNice is the nice value of the reader, decoder and hint threads: on
// a busy machine they must keep up with the ring buffer or the kernel
// drops events.
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

// decoder turns raw events into accesses rows with file ids.
type decoder struct {
	s        *Source
	comms    map[[16]byte]string
	cache    map[fileKey]*fileEntry
	last     *fileEntry
	lastComm [16]byte
	comm     string
	rows     []formats.Access
}

func newDecoder(s *Source) *decoder {
	return &decoder{s: s, comms: make(map[[16]byte]string), cache: make(map[fileKey]*fileEntry),
		rows: make([]formats.Access, 0, batchLen)}
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
	for i := 0; i < b.n; i++ {
		e := &b.ev[i]
		key := fileKey{dev: e.Dev, ino: e.Ino}
		fe := d.last
		if fe == nil || fe.key != key {
			fe = d.cache[key]
			if fe == nil {
				fe = s.files.get(key)
				if fe == nil {
					s.waitOpens(e.Ts)
					fe = s.files.add(key, e.Pid, "")
				}
				d.cache[key] = fe
			}
			d.last = fe
		}
		if fe.state.Load() == stateDenied {
			filtered++
			continue
		}
		npages := e.Npages
		kind := formats.AccessKind(e.Kind)
		if fe.statAt != 0 && kind != KindExec {
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
		})
	}
	s.filtered.Add(filtered)
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
