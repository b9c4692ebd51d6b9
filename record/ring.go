package record

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
// to the writer; nBatches bounds the memory between them (64 × 4096 × 64 B
// = 16 MiB). When every batch is in use the reader waits and the kernel
// drops (and counts) what no longer fits in the ring.
const (
	batchLen = 4096
	nBatches = 64
	// readDeadline bounds how long events wait in the ring when fewer than
	// the wakeup threshold are pending (they are submitted without wakeup).
	readDeadline = 20 * time.Millisecond
)

type batch struct {
	n  int
	ev [batchLen]bpf.RecordEvent
}

// pipeline moves events from the ring (read goroutine) to the bundle
// (write goroutine) in reused batches, so compression never stalls the
// ring reader.
type pipeline struct {
	r    *recorder
	free chan *batch
	full chan *batch
}

func newPipeline(r *recorder) *pipeline {
	p := &pipeline{r: r, free: make(chan *batch, nBatches), full: make(chan *batch, nBatches)}
	for range nBatches {
		p.free <- new(batch)
	}
	return p
}

// read drains the events ring with ReadInto into batches; it allocates
// nothing per event.
func (p *pipeline) read() {
	runtime.LockOSThread()
	boostThread()
	defer func() { p.r.readCPU.Store(threadCPU()) }()
	defer close(p.full)
	rd := p.r.events
	var rec ringbuf.Record
	b := <-p.free
	final := false
	rd.SetDeadline(time.Now().Add(readDeadline))
	for {
		err := rd.ReadInto(&rec)
		if err == nil {
			if len(rec.RawSample) < eventSize {
				continue
			}
			b.ev[b.n] = *(*bpf.RecordEvent)(unsafe.Pointer(&rec.RawSample[0]))
			b.n++
			if b.n == batchLen {
				p.full <- b
				b = <-p.free
			}
			continue
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
			if b.n > 0 {
				p.full <- b
				b = <-p.free
			}
			if final && errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			if !final {
				rd.SetDeadline(time.Now().Add(readDeadline))
			}
		default:
			if b.n > 0 {
				p.full <- b
			}
			return
		}
		if p.r.stopping.Load() && !final {
			final = true
			rd.SetDeadline(time.Now())
		}
	}
}

// readerNice is the nice value of the reader and writer threads: on a busy
// machine they must keep up with the ring buffer or the kernel drops events.
const readerNice = -10

// boostThread lowers the calling (locked) thread's nice value when allowed
// (CAP_SYS_NICE); failure is harmless.
func boostThread() {
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), readerNice)
}

// threadCPU returns the CPU time of the calling thread in ns.
func threadCPU() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return uint64(ts.Nano())
}

// writer is the state of the write goroutine.
type writer struct {
	r        *recorder
	comms    map[[16]byte]string
	cache    map[fileKey]*fileEntry
	last     *fileEntry
	lastComm [16]byte
	comm     string
	a        formats.Access
}

func newWriter(r *recorder) *writer {
	return &writer{r: r, comms: make(map[[16]byte]string), cache: make(map[fileKey]*fileEntry)}
}

// write turns batches into accesses rows.
func (p *pipeline) write() {
	runtime.LockOSThread()
	boostThread()
	defer func() { p.r.writeCPU.Store(threadCPU()) }()
	r := p.r
	w := newWriter(r)
	forced := false
	for b := range p.full {
		if !forced && r.cfg.Force != nil {
			select {
			case <-r.cfg.Force:
				forced = true
			default:
			}
		}
		if forced || r.writeErr.Load() != nil {
			r.discarded.Add(uint64(b.n))
		} else {
			w.writeBatch(b)
		}
		b.n = 0
		p.free <- b
	}
	r.wmu.Lock()
	if err := r.out.Flush(); err != nil {
		r.setWriteErr(err)
	}
	r.wmu.Unlock()
}

// writeBatch appends the events of b; it allocates nothing per event once
// the file and comm are known.
func (w *writer) writeBatch(b *batch) {
	r := w.r
	var written, filtered uint64
	r.wmu.Lock()
	for i := 0; i < b.n; i++ {
		e := &b.ev[i]
		key := fileKey{dev: e.Dev, ino: e.Ino}
		fe := w.last
		if fe == nil || fe.key != key {
			fe = w.cache[key]
			if fe == nil {
				r.wmu.Unlock()
				fe = r.files.get(key)
				if fe == nil {
					r.waitOpens(e.Ts)
					fe = r.files.add(key, e.Pid, "")
				}
				r.wmu.Lock()
				w.cache[key] = fe
			}
			w.last = fe
		}
		if fe.state.Load() == stateDenied {
			filtered++
			continue
		}
		npages := e.Npages
		if fe.statAt != 0 {
			if npages = r.files.clamp(fe, e.Index, npages); npages == 0 {
				filtered++
				continue
			}
		}
		c := *(*[16]byte)(unsafe.Pointer(&e.Comm))
		if c != w.lastComm || w.comm == "" {
			var ok bool
			if w.comm, ok = w.comms[c]; !ok {
				w.comm = cstring(c[:])
				w.comms[c] = w.comm
			}
			w.lastComm = c
		}
		w.a = formats.Access{
			TS: e.Ts, PID: e.Pid, TID: e.Tid, Comm: w.comm, FileID: fe.id,
			FirstPage: e.Index, NPages: npages, Kind: formats.AccessKind(e.Kind),
		}
		if err := r.out.Append(&w.a); err != nil {
			r.setWriteErr(err)
			break
		}
		written++
	}
	r.wmu.Unlock()
	r.written.Add(written)
	r.filtered.Add(filtered)
}
