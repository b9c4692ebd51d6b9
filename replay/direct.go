package replay

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/engine"
)

// slot states.
const (
	slotFree uint32 = iota
	slotLoading
	slotValid
)

type slot struct {
	state      atomic.Uint32
	key        uint64
	ref        bool // CLOCK reference bit
	prefetched bool // filled by a prefetch and not used yet
	late       bool // a prefetch a demand access waited for (counted late)
}

// directCache replays demand accesses through a user-space page cache of
// fixed, page-aligned slots, filled with O_DIRECT reads through the engine:
// demand misses are read by the worker that needs them; the direct backend
// (package backend) fills it with prefetches through Reserve and Fill. The
// page cache of the kernel is never involved, so no eviction is needed and
// no root.
type directCache struct {
	files []*openFile
	ps    int
	arena []byte
	slots []slot

	mu    sync.Mutex // guards index, hand, slot keys and flags
	index map[uint64]int32
	hand  int

	eng     *engine.Engine
	emap    []int // file index -> engine file index
	workers int   // engine workers for demand
	wmu     []sync.Mutex

	byID map[uint32]uint32 // bundle file id -> file index

	firstErr                                                      atomic.Pointer[error]
	misses, hits, waits, late, used, wasted, prefetched, devReads atomic.Uint64
	engineInfo                                                    string
}

type directOptions struct {
	cache   int // slots
	qd      int // reads in flight per demand worker
	sqpoll  bool
	threads int
}

func pageKey(file uint32, page uint64) uint64 { return uint64(file)<<40 | page }

func newDirectCache(files []*openFile, byID map[uint32]uint32, ps int, o directOptions) (*directCache, error) {
	if o.cache <= 0 {
		o.cache = 65536
	}
	if o.qd <= 0 {
		o.qd = 64
	}
	d := &directCache{
		files: files, ps: ps, byID: byID,
		slots: make([]slot, o.cache),
		index: make(map[uint64]int32, o.cache),
	}
	arena, err := unix.Mmap(-1, 0, o.cache*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("direct backend: map a cache of %d pages: %w (lower --cache)", o.cache, err)
	}
	d.arena = arena
	d.emap = make([]int, len(files))
	var efiles []*os.File
	for i, f := range files {
		d.emap[i] = -1
		if f != nil {
			d.emap[i] = len(efiles)
			efiles = append(efiles, f.dfile)
		}
	}
	d.workers = min(max(o.threads, 1), maxDemandWorkers)
	d.wmu = make([]sync.Mutex, d.workers)
	opts := []engine.Option{engine.WithWorkers(d.workers), engine.WithQueueDepth(o.qd), engine.WithHandler(d.onComplete)}
	d.engineInfo = "engine: io_uring READ_FIXED, fixed files"
	if o.sqpoll {
		opts = append(opts, engine.WithSharedPoller(100*time.Millisecond))
		d.engineInfo += ", shared SQPOLL poller"
	}
	d.eng, err = engine.New(efiles, opts...)
	if err != nil {
		unix.Munmap(arena)
		return nil, fmt.Errorf("direct backend: %w", err)
	}
	return d, nil
}

// onComplete is the engine's completion handler: it copies the page into
// its cache slot and marks the slot valid, or frees it after an error.
func (d *directCache) onComplete(c *engine.Completion) {
	s := int32(c.Token)
	err := c.Err
	if err == nil && c.Res == 0 {
		err = fmt.Errorf("read O_DIRECT page at offset %d: unexpected end of file", c.Off)
	}
	if err == nil {
		copy(d.buf(s), c.Data)
	}
	d.complete(s, err)
}

func (d *directCache) buf(s int32) []byte {
	return d.arena[int(s)*d.ps : (int(s)+1)*d.ps]
}

// alloc returns a free slot for key, evicting with CLOCK; -1 when every slot
// is loading. Called with mu held.
func (d *directCache) alloc(key uint64) int32 {
	n := len(d.slots)
	for i := 0; i < 2*n+1; i++ {
		h := d.hand
		d.hand = (d.hand + 1) % n
		s := &d.slots[h]
		switch s.state.Load() {
		case slotLoading:
			continue
		case slotValid:
			if s.ref {
				s.ref = false
				continue
			}
			delete(d.index, s.key)
			if s.prefetched {
				d.wasted.Add(1)
			}
		}
		s.key, s.ref, s.prefetched, s.late = key, true, false, false
		s.state.Store(slotLoading)
		d.index[key] = int32(h)
		return int32(h)
	}
	return -1
}

// maxDemandWorkers caps the engine workers for demand reads; replay
// workers beyond it share them.
const maxDemandWorkers = 64

// reader locks and returns the engine worker of replay worker w. Replay
// workers share engine workers by id modulo when there are more than
// maxDemandWorkers threads; each holds its engine worker for a whole access
// (submit and drain), so their reads do not interleave.
func (d *directCache) reader(w *worker) (*engine.Worker, func()) {
	i := w.id % d.workers
	d.wmu[i].Lock()
	return d.eng.Worker(i), d.wmu[i].Unlock
}

// read submits a read of one page into slot s.
func (d *directCache) read(ew *engine.Worker, file uint32, page uint64, s int32, token uint64) error {
	return ew.Submit(engine.Request{Op: engine.OpRead, File: d.emap[file], Off: int64(page) * int64(d.ps), Len: d.ps, Token: uint64(s) | token})
}

// demand serves pages [o.page, o.page+o.n) from the cache, reading misses
// from the device and waiting for reads still in flight. Every demanded
// page counts as exactly one of hit, miss, late (a prefetch found in
// flight) or wait (another worker's demand read found in flight). A hit on
// a prefetched page counts it used in time.
func (d *directCache) demand(w *worker, o *op) error {
	pr, unlock := d.reader(w)
	defer unlock()
	f := d.files[o.file]
	ps := uint64(d.ps)
	dst := w.buffer(int(o.n) * d.ps)
	w.slots = w.slots[:0]
	w.waitOn = w.waitOn[:0]
	for i := uint32(0); i < o.n; i++ {
		page := o.page + uint64(i)
		key := pageKey(o.file, page)
		d.mu.Lock()
		s, ok := d.index[key]
		if ok {
			sl := &d.slots[s]
			sl.ref = true
			if sl.state.Load() == slotValid {
				if sl.prefetched {
					sl.prefetched = false
					d.used.Add(1)
				}
				d.hits.Add(1)
				copy(dst[uint64(i)*ps:], d.buf(s))
				d.mu.Unlock()
				continue
			}
			// Loading: a prefetch (late) or another worker's demand is
			// reading it.
			if sl.prefetched {
				sl.prefetched, sl.late = false, true
				d.late.Add(1)
			} else {
				d.waits.Add(1)
			}
			d.mu.Unlock()
			w.waitOn = append(w.waitOn, waitSlot{s, i, key})
			continue
		}
		s = d.allocWait(key)
		d.mu.Unlock()
		d.misses.Add(1)
		if err := d.read(pr, o.file, page, s, 0); err != nil {
			return err
		}
		w.slots = append(w.slots, waitSlot{s, i, key})
	}
	if err := pr.Drain(); err != nil {
		return fmt.Errorf("read %s pages %d+%d: %w", f.path, o.page, o.n, err)
	}
	for _, ws := range w.slots {
		if !d.copyOut(ws, dst) {
			return d.lost(f, ws)
		}
	}
	for _, ws := range w.waitOn {
		for spins := 0; ; spins++ {
			if d.slots[ws.slot].state.Load() != slotLoading {
				break
			}
			if spins < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(10 * time.Microsecond)
			}
		}
		if d.copyOut(ws, dst) {
			continue
		}
		// The prefetch failed, or the page was evicted before we copied
		// it: read it again, as a demand read. A failed prefetch costs
		// the demand a read, never the replay.
		d.mu.Lock()
		s := d.allocWait(ws.key)
		d.mu.Unlock()
		if err := d.read(pr, o.file, o.page+uint64(ws.i), s, 0); err != nil {
			return err
		}
		if err := pr.Drain(); err != nil {
			return err
		}
		if !d.copyOut(waitSlot{s, ws.i, ws.key}, dst) {
			return d.lost(f, ws)
		}
	}
	return nil
}

// allocWait allocates a slot for key, yielding while every slot is loading.
// Called and returns with mu held.
func (d *directCache) allocWait(key uint64) int32 {
	for {
		if s := d.alloc(key); s >= 0 {
			return s
		}
		d.mu.Unlock()
		runtime.Gosched()
		d.mu.Lock()
	}
}

type waitSlot struct {
	slot int32
	i    uint32
	key  uint64
}

// copyOut copies a valid slot holding ws.key into dst; false when the slot
// no longer holds it.
func (d *directCache) copyOut(ws waitSlot, dst []byte) bool {
	sl := &d.slots[ws.slot]
	d.mu.Lock()
	defer d.mu.Unlock()
	if sl.key != ws.key || sl.state.Load() != slotValid {
		return false
	}
	if sl.prefetched {
		sl.prefetched = false
		d.used.Add(1)
	}
	sl.ref = true
	copy(dst[uint64(ws.i)*uint64(d.ps):], d.buf(ws.slot))
	return true
}

func (d *directCache) lost(f *openFile, ws waitSlot) error {
	if e := d.firstErr.Load(); e != nil {
		return fmt.Errorf("read %s page %d: %w", f.path, ws.key&(1<<40-1), *e)
	}
	return fmt.Errorf("read %s page %d: cache slot reused before the read was copied; raise --cache", f.path, ws.key&(1<<40-1))
}

// complete marks a slot read (or frees it after an error).
func (d *directCache) complete(s int32, err error) {
	sl := &d.slots[s]
	if err != nil {
		d.firstErr.CompareAndSwap(nil, &err)
		d.mu.Lock()
		delete(d.index, sl.key)
		sl.key = ^uint64(0)
		if sl.prefetched {
			// A failed prefetch nobody waited for put nothing in the cache.
			d.prefetched.Add(^uint64(0))
		}
		sl.prefetched = false
		sl.state.Store(slotFree)
		d.mu.Unlock()
		return
	}
	d.devReads.Add(1)
	sl.state.Store(slotValid)
}

// Reserve claims a slot for a prefetch of page of bundle file id: the
// backend.Cache side of the direct backend.
func (d *directCache) Reserve(id uint32, page uint64) (int32, backend.Reservation) {
	idx, ok := d.byID[id]
	if !ok {
		return -1, backend.Full
	}
	key := pageKey(idx, page)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.index[key]; ok {
		return -1, backend.Present
	}
	s := d.alloc(key)
	if s < 0 {
		return -1, backend.Full
	}
	d.slots[s].prefetched = true
	d.prefetched.Add(1)
	return s, backend.Reserved
}

// Fill completes a prefetch read of slot s.
func (d *directCache) Fill(s int32, data []byte, err error) {
	if err == nil {
		copy(d.buf(s), data)
	}
	d.complete(s, err)
}

// directStats are what the cache counted in a run.
type directStats struct {
	effect                      effect.Counts
	misses, hits, waits, device uint64
	warnings                    []string
}

// finish closes the demand engine and returns the cache's counts; call it
// after the backend is closed.
func (d *directCache) finish() directStats {
	var warn []string
	if err := d.eng.Close(); err != nil {
		warn = append(warn, err.Error())
	}
	// Prefetched pages never used are wasted, evicted or not.
	var unused uint64
	for i := range d.slots {
		if d.slots[i].prefetched && d.slots[i].state.Load() == slotValid {
			unused++
		}
	}
	if !d.eng.Mlocked() && d.eng.MlockErr() != nil {
		warn = append(warn, d.eng.MlockErr().Error())
	}
	unix.Munmap(d.arena)
	d.arena = nil
	evicted := d.wasted.Load()
	return directStats{
		effect: effect.Counts{Prefetched: d.prefetched.Load(), UsedInTime: d.used.Load(), Late: d.late.Load(),
			Wasted: evicted + unused, Evicted: evicted, DemandRead: d.misses.Load()},
		misses: d.misses.Load(), hits: d.hits.Load(), waits: d.waits.Load(), device: d.devReads.Load(),
		warnings: warn,
	}
}
