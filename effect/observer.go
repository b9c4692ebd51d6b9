package effect

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/predictio/predictio/bpf"
	"github.com/predictio/predictio/internal/privs"
)

// ErrNotSupported means the kernel lacks what the observer needs: BTF,
// tp_btf programs, bpf_loop (Linux 5.17) or one of its tracepoints.
var ErrNotSupported = errors.New("not supported by this kernel")

// ErrPermission is wrapped when capabilities are missing.
var ErrPermission = privs.ErrPermission

// Options configure an Observer.
type Options struct {
	// Files is the most files watched at once; 0 means 8192.
	Files int
	// MaxPending is the most prefetched pages awaiting their first demand
	// that the observer follows; 0 means 131072 (512 MiB of 4 KiB pages).
	// Pages past it are counted Untracked.
	MaxPending int
	// KernelThreads counts pages that kernel threads insert as prefetched
	// (the predictio module's workers read in kernel threads).
	KernelThreads bool
	// NoSelf leaves this process out of the prefetchers (AddPrefetcher
	// adds processes).
	NoSelf bool
	// LazyReads attaches the system call hooks that see demand reads begin
	// only while a demand thread or process is registered. Any system call
	// hook puts every system call of the machine on the kernel's slower
	// tracing path (BenchmarkPreadHot); a daemon that is idle most of the
	// time should not pay for it.
	LazyReads bool
}

// Observer counts the effect of prefetches into the page cache for a set
// of watched files. Demand threads (AddDemandThread) or processes
// (AddDemandProcess) are those whose lookups count as demand; prefetchers
// (this process unless Options.NoSelf, AddPrefetcher) those whose inserts
// count as prefetches. Its methods are safe for concurrent use.
//
// Needs Linux 5.17 with BTF, CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN);
// faults are seen through the filemap tracepoints (Linux 6.11), or kprobes
// where the kernel predates them (Faults).
type Observer struct {
	mu        sync.Mutex
	coll      *ebpf.Collection
	objs      bpf.EffectMaps
	links     []link.Link
	faults    string      // how faults are seen: "tracepoints", "kprobes", or "" (not at all)
	faultErr  error       // why they are not
	reads     []link.Link // the system call hooks
	lazy      bool
	demanders int
	slots     map[uint32]uint32 // file id -> slot
	ids       map[uint32]uint32 // slot -> file id
	keys      map[uint32]bpf.EffectFileKey
	free      []uint32
	next      uint32
	max       uint32
}

// NewObserver loads and attaches the effect programs.
func NewObserver(o Options) (*Observer, error) {
	if err := privs.Check("observe the page cache"); err != nil {
		return nil, err
	}
	if o.Files <= 0 {
		o.Files = 8192
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 131072
	}
	spec, err := bpf.LoadEffect()
	if err != nil {
		return nil, fmt.Errorf("load effect programs: %w", err)
	}
	for _, m := range []string{bpf.EffectMapWatched, bpf.EffectMapCounts} {
		spec.Maps[m].MaxEntries = uint32(o.Files)
	}
	spec.Maps[bpf.EffectMapPending].MaxEntries = uint32(o.MaxPending)
	if o.KernelThreads {
		if err := spec.Variables[bpf.EffectVarKthreadPrefetch].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("configure effect programs: %w", err)
		}
	}
	ob := &Observer{slots: map[uint32]uint32{}, ids: map[uint32]uint32{}, keys: map[uint32]bpf.EffectFileKey{}, max: uint32(o.Files), lazy: o.LazyReads}
	// The fault tracepoints (Linux 6.11+) or, before them, kprobes on the
	// functions they sit in: load one pair.
	ob.faults = "tracepoints"
	drop := []string{bpf.EffectProgEffectFaultKprobe, bpf.EffectProgEffectMapKprobe}
	if !kernelHasTypes("trace_event_raw_mm_filemap_fault", "trace_event_raw_mm_filemap_op_page_cache_range") {
		ob.faults = "kprobes"
		drop = []string{bpf.EffectProgEffectFault, bpf.EffectProgEffectMap}
	}
	for _, name := range drop {
		delete(spec.Programs, name)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load effect programs: %w", notSupported(err))
	}
	ob.coll = coll
	if err := coll.Assign(&ob.objs); err != nil {
		coll.Close()
		return nil, fmt.Errorf("load effect programs: %w", err)
	}
	err = ob.attach()
	if err == nil && !o.LazyReads {
		err = ob.attachReads()
	}
	if err != nil {
		ob.Close()
		return nil, err
	}
	if !o.NoSelf {
		if err := ob.AddPrefetcher(os.Getpid()); err != nil {
			ob.Close()
			return nil, err
		}
	}
	return ob, nil
}

// notSupported marks errors that mean the kernel lacks a feature.
func notSupported(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return err
}

// kernelHasTypes reports whether the kernel's BTF has every named type.
func kernelHasTypes(names ...string) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	for _, n := range names {
		if _, err := spec.AnyTypeByName(n); err != nil {
			return false
		}
	}
	return true
}

// attach attaches the tp_btf programs on page-cache inserts and deletes,
// and the fault hooks: the tracepoints, or the kprobes where the kernel
// predates them. Without either (no tracepoints and no kprobes) the
// observer still counts reads; Faults says so.
func (ob *Observer) attach() error {
	p := ob.coll.Programs
	for _, name := range []string{bpf.EffectProgEffectAdd, bpf.EffectProgEffectDelete} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p[name]})
		if err != nil {
			return fmt.Errorf("attach %s: %w", name, notSupported(err))
		}
		ob.links = append(ob.links, l)
	}
	var hooks []link.Link
	var err error
	if ob.faults == "tracepoints" {
		for _, tp := range [][2]string{{"mm_filemap_fault", bpf.EffectProgEffectFault}, {"mm_filemap_map_pages", bpf.EffectProgEffectMap}} {
			var l link.Link
			if l, err = link.Tracepoint("filemap", tp[0], p[tp[1]], nil); err != nil {
				err = fmt.Errorf("attach tracepoint filemap:%s: %w", tp[0], err)
				break
			}
			hooks = append(hooks, l)
		}
	} else {
		for _, kp := range [][2]string{{"filemap_fault", bpf.EffectProgEffectFaultKprobe}, {"filemap_map_pages", bpf.EffectProgEffectMapKprobe}} {
			var l link.Link
			if l, err = link.Kprobe(kp[0], p[kp[1]], nil); err != nil {
				err = fmt.Errorf("attach kprobe %s: %w", kp[0], err)
				break
			}
			hooks = append(hooks, l)
		}
	}
	if err != nil {
		closeLinks(hooks)
		ob.faults, ob.faultErr = "", err
		return nil
	}
	ob.links = append(ob.links, hooks...)
	return nil
}

// Faults says how the observer sees demand faults: "tracepoints",
// "kprobes" (before Linux 6.11), or "" with the reason: then prefetched
// pages that only faults demand count as wasted.
func (ob *Observer) Faults() (string, error) { return ob.faults, ob.faultErr }

// attachReads attaches the system call entry and exit hooks.
func (ob *Observer) attachReads() error {
	for _, name := range []string{bpf.EffectProgEffectSysEnter, bpf.EffectProgEffectSysExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: ob.coll.Programs[name]})
		if err != nil {
			closeLinks(ob.reads)
			ob.reads = nil
			return fmt.Errorf("attach %s: %w", name, notSupported(err))
		}
		ob.reads = append(ob.reads, l)
	}
	return nil
}

// demanderAdded and demanderRemoved attach and detach the system call
// hooks of a lazy observer as the first demander comes and the last goes.
func (ob *Observer) demanderAdded() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.demanders++
	if ob.lazy && ob.reads == nil {
		return ob.attachReads()
	}
	return nil
}

func (ob *Observer) demanderRemoved() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.demanders--
	if !ob.lazy || ob.demanders > 0 || ob.reads == nil {
		return nil
	}
	err := closeLinks(ob.reads)
	ob.reads = nil
	// Reads under way lost their exits: forget them.
	for _, m := range []*ebpf.Map{ob.objs.Active, ob.objs.Reading} {
		err = errors.Join(err, clearMap(m))
	}
	return err
}

// Watch starts counting file id, named by its device (the kernel's s_dev
// encoding, formats.KernelDev) and inode. Its counts start at zero.
func (ob *Observer) Watch(id uint32, dev, ino uint64) error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if _, ok := ob.slots[id]; ok {
		return fmt.Errorf("watch file id %d: watched already", id)
	}
	var slot uint32
	switch {
	case len(ob.free) > 0:
		slot = ob.free[len(ob.free)-1]
		ob.free = ob.free[:len(ob.free)-1]
	case ob.next < ob.max:
		slot = ob.next
		ob.next++
	default:
		return fmt.Errorf("watch file id %d: %d files watched already (Options.Files)", id, ob.max)
	}
	if err := ob.objs.Counts.Put(slot, bpf.EffectFileCounts{}); err != nil {
		return fmt.Errorf("watch file id %d: %w", id, err)
	}
	k := bpf.EffectFileKey{Ino: ino, Dev: uint32(dev)}
	if err := ob.objs.Watched.Update(k, slot, ebpf.UpdateNoExist); err != nil {
		ob.free = append(ob.free, slot)
		return fmt.Errorf("watch file id %d (dev %d:%d, ino %d): %w", id, dev>>20, dev&(1<<20-1), ino, err)
	}
	ob.slots[id], ob.ids[slot], ob.keys[slot] = slot, id, k
	return nil
}

// Unwatch stops counting file id; its counts are dropped.
func (ob *Observer) Unwatch(id uint32) error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	slot, ok := ob.slots[id]
	if !ok {
		return fmt.Errorf("unwatch file id %d: not watched", id)
	}
	if err := ob.objs.Watched.Delete(ob.keys[slot]); err != nil {
		return fmt.Errorf("unwatch file id %d: %w", id, err)
	}
	delete(ob.slots, id)
	delete(ob.ids, slot)
	delete(ob.keys, slot)
	ob.free = append(ob.free, slot)
	return ob.clearPending(func(s uint32) bool { return s == slot })
}

func put(m *ebpf.Map, key uint32, what string) error {
	if err := m.Put(key, uint8(1)); err != nil {
		return fmt.Errorf("add %s %d: %w", what, key, err)
	}
	return nil
}

func del(m *ebpf.Map, key uint32, what string) error {
	if err := m.Delete(key); err != nil {
		return fmt.Errorf("remove %s %d: %w", what, key, err)
	}
	return nil
}

// AddDemandThread makes thread tid's lookups demand (and its inserts its
// own misses). Replay's workers are locked to their OS threads for this.
func (ob *Observer) AddDemandThread(tid int) error {
	if err := put(ob.objs.DemandTids, uint32(tid), "demand thread"); err != nil {
		return err
	}
	return ob.demanderAdded()
}

// RemoveDemandThread undoes AddDemandThread.
func (ob *Observer) RemoveDemandThread(tid int) error {
	if err := del(ob.objs.DemandTids, uint32(tid), "demand thread"); err != nil {
		return err
	}
	return ob.demanderRemoved()
}

// AddDemandProcess makes every thread of process pid a demand thread.
func (ob *Observer) AddDemandProcess(pid int) error {
	if err := put(ob.objs.DemandPids, uint32(pid), "demand process"); err != nil {
		return err
	}
	return ob.demanderAdded()
}

// RemoveDemandProcess undoes AddDemandProcess.
func (ob *Observer) RemoveDemandProcess(pid int) error {
	if err := del(ob.objs.DemandPids, uint32(pid), "demand process"); err != nil {
		return err
	}
	return ob.demanderRemoved()
}

// AddPrefetcher makes the inserts of process pid's threads (other than
// demand threads) prefetches, io_uring workers included.
func (ob *Observer) AddPrefetcher(pid int) error {
	return put(ob.objs.PrefetchPids, uint32(pid), "prefetcher")
}

// Counts returns the counts so far, in total and per watched file id.
func (ob *Observer) Counts() (Counts, map[uint32]Counts, error) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var total Counts
	per := make(map[uint32]Counts, len(ob.slots))
	for id, slot := range ob.slots {
		var c bpf.EffectFileCounts
		if err := ob.objs.Counts.Lookup(slot, &c); err != nil {
			return total, nil, fmt.Errorf("read effect counts of file id %d: %w", id, err)
		}
		fc := Counts{Prefetched: c.Prefetched, UsedInTime: c.InTime, Late: c.Late, Wasted: c.Evicted, Evicted: c.Evicted,
			Pending: uint64(max(c.Pending, 0)), DemandRead: c.DemandRead, Foreign: c.Foreign, Untracked: c.Untracked}
		per[id] = fc
		total.Add(fc)
	}
	return total, per, nil
}

// Final returns the counts of a finished run: pages still pending are
// wasted.
func (ob *Observer) Final() (Counts, map[uint32]Counts, error) {
	total, per, err := ob.Counts()
	if err != nil {
		return total, per, err
	}
	total.Settle()
	for id, c := range per {
		c.Settle()
		per[id] = c
	}
	return total, per, nil
}

// Reset zeroes the counts of every watched file and forgets pending pages
// and demands under way, for the next run.
func (ob *Observer) Reset() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for slot := range ob.ids {
		if err := ob.objs.Counts.Put(slot, bpf.EffectFileCounts{}); err != nil {
			return fmt.Errorf("reset effect counts: %w", err)
		}
	}
	for _, m := range []*ebpf.Map{ob.objs.Active, ob.objs.Reading} {
		if err := clearMap(m); err != nil {
			return err
		}
	}
	return ob.clearPending(func(uint32) bool { return true })
}

// clearPending deletes the pending pages of the slots drop selects.
func (ob *Observer) clearPending(drop func(uint32) bool) error {
	var k bpf.EffectPageKey
	var v bpf.EffectPendingPage
	var keys []bpf.EffectPageKey
	it := ob.objs.Pending.Iterate()
	for it.Next(&k, &v) {
		if drop(k.Slot) {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("clear pending pages: %w", err)
	}
	for _, k := range keys {
		if err := ob.objs.Pending.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear pending pages: %w", err)
		}
	}
	return nil
}

// clearMap deletes every entry of a map with uint32 keys.
func clearMap(m *ebpf.Map) error {
	var keys []uint32
	var k uint32
	var prev any // nil: the first key
	for {
		err := m.NextKey(prev, &k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("clear %s: %w", m, err)
		}
		keys = append(keys, k)
		p := k
		prev = &p
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear %s: %w", m, err)
		}
	}
	return nil
}

// Close detaches the programs (in parallel: each link close waits for the
// kernel's RCU grace periods) and frees the maps.
func (ob *Observer) Close() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	err := closeLinks(append(ob.links, ob.reads...))
	ob.links, ob.reads = nil, nil
	if ob.coll != nil {
		ob.coll.Close()
		err = errors.Join(err, ob.objs.Close())
		ob.coll = nil
	}
	if err != nil {
		return fmt.Errorf("close effect observer: %w", err)
	}
	return nil
}

// closeLinks closes links in parallel.
func closeLinks(ls []link.Link) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Files returns the watched file ids, sorted.
func (ob *Observer) Files() []uint32 {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	out := make([]uint32, 0, len(ob.slots))
	for id := range ob.slots {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
