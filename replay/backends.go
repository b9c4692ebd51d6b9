package replay

import (
	"github.com/predictio/predictio/backend"
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
	o := backend.Options{PageSize: ps, InFlight: r.opt.InFlight, Readahead: r.opt.Readahead}
	var track *tracker
	if name != BackendNone {
		track = newTracker(files, ps)
		o.Issued = func(id uint32, first, n uint64) {
			if fi := r.t.byID[id]; fi != nil {
				track.prefetched(fi.idx, first, n)
			}
		}
	}
	be, err := backend.New(name, reg, o)
	if err != nil {
		reg.Close()
		return nil, err
	}
	st.dem, st.be = &pageCacheDemand{files: files, ps: ps, track: track}, be
	return func(run *Run) error {
		rep, err := be.Close()
		reg.Close()
		run.Counters, run.PagesDropped, run.Via, run.Warnings = rep.Stats, rep.PagesDropped, rep.Via, rep.Warnings
		if track != nil {
			run.Prefetched, run.Used = track.counts()
			run.Wasted = run.Prefetched - run.Used
		}
		return err
	}, nil
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
		run.Prefetched, run.Used, run.Wasted = ds.prefetched, ds.used, ds.wasted
		run.DemandMisses, run.DemandHits, run.LatePrefetches, run.DevicePages = ds.misses, ds.hits, ds.late, ds.device
		return err
	}, nil
}
