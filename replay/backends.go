package replay

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/effect"
)

// startBackend creates the run's backend (package backend) over a registry
// of the run's files, and its demand side: the page cache, or the direct
// backend's user-space cache. It returns the function that stops both and
// fills in run's counters.
func (r *Replayer) startBackend(st *runState, name string, files []*openFile) (func(*Run) error, error) {
	reg, err := registry(files)
	if err != nil {
		return nil, err
	}
	if name == BackendDirect {
		return r.startDirect(st, reg, files)
	}
	ps := r.t.pageSize
	be, err := backend.New(name, reg, backend.Options{PageSize: ps, InFlight: r.opt.InFlight, Readahead: r.opt.Readahead})
	if err != nil {
		reg.Close()
		return nil, err
	}
	st.dem, st.be, st.reg = &pageCacheDemand{files: files, ps: ps}, be, reg
	st.left, st.keepRetired = make([]atomic.Int32, len(files)), keepRetired()
	for idx, n := range r.t.fileOps {
		st.left[idx].Store(n)
	}
	return func(run *Run) error {
		rep, err := be.Close()
		reg.Close()
		run.Counters, run.PagesDropped, run.Via, run.Warnings = rep.Stats, rep.PagesDropped, rep.Via, rep.Warnings
		run.BackendBusyNS, run.BackendAcquireNS, run.BackendAcquires = rep.BusyNS, rep.AcquireNS, rep.Acquires
		run.BackendOpenNS, run.BackendOpens = rep.OpenNS, rep.Opens
		run.BackendAdviseNS, run.BackendAdvised, run.BackendPipelineNS = rep.AdviseNS, rep.Advised, rep.PipelineNS
		r.effectCounts(run)
		return err
	}, nil
}

// effectCounts fills in the run's counts by effect from the observer. A
// baseline prefetches nothing and runs without the observer (observe).
func (r *Replayer) effectCounts(run *Run) {
	if run.Policy == Baseline {
		return
	}
	if r.obs == nil {
		run.EffectNote = r.obsErr
		if r.opt.Effect == EffectSeparate && !r.counting && r.opt.Backend != BackendDirect {
			run.EffectNote = "counted in a run of its own, with the effect observer (counts_only), so that its cost is not in this run's time"
		}
		return
	}
	c, _, err := r.obs.Final()
	if err != nil {
		run.EffectNote = fmt.Sprintf("read the effect counters: %v", err)
		return
	}
	run.Counts = c
	if how, err := r.obs.Faults(); how == "" && r.t.hasFaults() {
		run.Warnings = append(run.Warnings, fmt.Sprintf("the effect counters see no faults (%v): prefetched pages only faults demanded count as wasted", err))
	}
}

// observe loads the effect observer before a policy run of a page-cache
// backend, and unloads it before a baseline run. The observer hooks every
// system call's entry and exit on the machine, which costs a cached 4 KiB
// pread about 1.5 µs here (2.9 µs without it, 4.4 µs with); a baseline,
// which prefetches nothing, has nothing to count, and should cost what the
// recorded program's operations cost, which ran without it.
func (r *Replayer) observe(spec string) {
	if spec == Baseline || !r.counting && r.opt.Effect != EffectInline {
		r.stopObserver()
		switch r.opt.Effect {
		case EffectOff:
			r.obsErr = "no counts by effect: --effect off"
		case EffectSeparate:
			r.obsErr = "" // counted in a run of its own (countRuns)
		}
		return
	}
	if r.obs == nil {
		r.startObserver()
	}
}

// countRuns makes, with Effect separate on a page-cache backend, one more
// run of each policy spec with the effect observer, for its counts by
// effect only (Run.CountsOnly).
func (r *Replayer) countRuns(ctx context.Context, rep *Report) error {
	if r.opt.Effect != EffectSeparate || r.opt.Backend == BackendDirect {
		return nil
	}
	r.counting = true
	defer func() { r.counting = false }()
	for _, spec := range r.opt.Runs {
		if spec == Baseline {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		run, err := r.runOnce(ctx, spec, r.opt.Repeat)
		if err != nil {
			return fmt.Errorf("replay run %q (counts by effect): %w", spec, err)
		}
		run.CountsOnly = true
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}

// startObserver loads the eBPF effect observer for the page-cache backends
// and watches the replayed files; where it cannot, the runs say why in
// effect_note.
func (r *Replayer) startObserver() {
	r.obs, r.obsErr = nil, ""
	if r.opt.Backend == BackendDirect {
		return
	}
	ob, err := effect.NewObserver(effect.Options{Files: max(len(r.t.files), 1), KernelThreads: r.opt.Backend == BackendKmod})
	if err != nil {
		r.obsErr = fmt.Sprintf("no counts by effect: %v", err)
		return
	}
	for _, f := range r.t.used() {
		dev, ino, err := statID(r.paths[f.idx])
		if err == nil {
			err = ob.Watch(f.ID, dev, ino)
		}
		if err != nil {
			ob.Close()
			r.obsErr = fmt.Sprintf("no counts by effect: %v", err)
			return
		}
	}
	r.obs = ob
}

func (r *Replayer) stopObserver() {
	if r.obs != nil {
		r.obs.Close()
		r.obs = nil
	}
}

// startDirect starts the direct backend filling the run's user-space cache.
func (r *Replayer) startDirect(st *runState, reg *backend.Registry, files []*openFile) (func(*Run) error, error) {
	ps := r.t.pageSize
	slots := r.opt.CachePages
	if slots <= 0 {
		slots = 65536
	}
	byID := make(map[uint32]uint32, len(r.t.files))
	for _, f := range r.t.files {
		byID[f.ID] = f.idx
	}
	dc, err := newDirectCache(files, byID, ps, directOptions{cache: slots, qd: r.opt.QueueDepth, sqpoll: r.opt.SQPoll, threads: len(r.t.threads)})
	if err != nil {
		reg.Close()
		return nil, err
	}
	// Bound the queued prefetch pages by a quarter of the cache, so that
	// prefetches cannot flush it faster than demand uses it.
	be, err := backend.NewDirect(reg, dc, backend.DirectOptions{
		Options:    backend.Options{PageSize: ps, InFlight: max(slots/4, 1)},
		QueueDepth: r.opt.QueueDepth, SQPoll: r.opt.SQPoll,
	})
	if err != nil {
		dc.finish()
		reg.Close()
		return nil, err
	}
	st.dem, st.be = dc, be
	return func(run *Run) error {
		rep, err := be.Close()
		ds := dc.finish()
		reg.Close()
		run.Counters, run.PagesDropped, run.Via = rep.Stats, rep.PagesDropped, rep.Via+"; demand "+dc.engineInfo
		run.Warnings = append(rep.Warnings, ds.warnings...)
		run.Counts = ds.effect
		run.DemandMisses, run.DemandHits, run.DemandWaits, run.DevicePages = ds.misses, ds.hits, ds.waits, ds.device
		return err
	}, nil
}
