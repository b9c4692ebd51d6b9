// Package simulate scores prefetch policies offline: it replays a bundle's
// events in timestamp order through the Linux readahead baseline, the chosen
// policies, a page cache and a device model, and reports coverage, accuracy,
// timeliness, I/O amplification and stall time (docs/simulate.md).
package simulate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/predictio/predictio/policies"
)

// Config is one simulation setup. Every policy lane shares it.
type Config struct {
	// PageSize is the page size in bytes; 0 means 4096.
	PageSize int
	// CacheBytes is the page cache capacity.
	CacheBytes int64
	// CacheModel is LRU or TwoList.
	CacheModel CacheModel
	// Device is the storage model.
	Device Device
	// NoReadahead turns the Linux readahead baseline off in every lane.
	NoReadahead bool
	// ReadaheadSpec configures the baseline; "" means "readahead".
	ReadaheadSpec string
	// Policies are the policy specs to score, one lane each, on top of
	// the baseline.
	Policies []string
	// Oracle adds a lane with OracleSpec ("" means "oracle"), the upper
	// bound. Env.Future must be set for it.
	Oracle     bool
	OracleSpec string
	// Env is what policies may know; Resident is set per lane to that
	// lane's page cache.
	Env policies.Env
	// Build constructs a policy from a spec; nil means policies.Build.
	Build func(spec string, env policies.Env) (policies.Policy, error)
}

func (c *Config) pageSize() int {
	if c.PageSize <= 0 {
		return 4096
	}
	return c.PageSize
}

// CapacityPages is the cache capacity in pages.
func (c *Config) CapacityPages() int {
	n := c.CacheBytes / int64(c.pageSize())
	if n < 1 {
		n = 1
	}
	return int(n)
}

// Stats are the results of one lane: the baseline, a policy or the oracle.
// Counts are in pages.
type Stats struct {
	Name string `json:"name"`
	Spec string `json:"spec"` // the lane's policy; the readahead spec (or "none") for the baseline

	Accesses   uint64 `json:"demand_accesses"` // demand access events
	Demand     uint64 `json:"demand"`          // pages demanded
	Hits       uint64 `json:"hits"`            // demanded pages found cached or in flight
	Misses     uint64 `json:"misses"`          // demanded pages not in the cache
	Prefetched uint64 `json:"prefetched"`      // pages read by prefetch (not demand) I/O
	Used       uint64 `json:"used"`            // prefetched pages demanded later
	Wasted     uint64 `json:"wasted"`          // prefetched pages evicted unused
	Unused     uint64 `json:"unused"`          // prefetched pages still unused at the end
	Late       uint64 `json:"late"`            // used pages still in flight when demanded
	PagesRead  uint64 `json:"pages_read"`      // all pages read from the device
	Requests   uint64 `json:"requests"`        // device requests

	Coverage        float64 `json:"coverage"`         // (baseline misses - misses) / baseline misses
	Accuracy        float64 `json:"accuracy"`         // used / prefetched
	IOAmplification float64 `json:"io_amplification"` // pages read / pages demanded
	StallNS         int64   `json:"stall_ns"`         // time demand accesses waited for the device
	RuntimeNS       int64   `json:"runtime_ns"`       // trace span plus stall
	Speedup         float64 `json:"speedup"`          // baseline runtime / runtime
}

// Report is the outcome of a simulation.
type Report struct {
	Events       uint64  `json:"events"`
	EventsPerSec float64 `json:"events_per_sec"`
	ElapsedNS    int64   `json:"elapsed_ns"`
	CacheBytes   int64   `json:"cache_bytes"`
	CacheModel   string  `json:"cache_model"`
	Device       Device  `json:"device"`
	Readahead    bool    `json:"readahead"`
	PageSize     int     `json:"page_size"`
	// Policies holds the baseline first, then one entry per policy, then
	// the oracle.
	Policies []Stats `json:"policies"`
}

// Lane returns the stats named name, or nil.
func (r *Report) Lane(name string) *Stats {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// Simulator runs one Config over a stream of events.
type Simulator struct {
	cfg     Config
	lanes   []*lane
	events  uint64
	started bool
	ts0     uint64
	start   time.Time
}

// BaselineName is the lane name of the baseline.
const BaselineName = "baseline"

// New builds a simulator for cfg, with one lane for the baseline, one per
// policy and one for the oracle.
func New(cfg Config) (*Simulator, error) {
	if cfg.CacheBytes <= 0 {
		return nil, errors.New("configure simulator: cache size must be positive, e.g. --cache 256MiB")
	}
	if err := cfg.Device.validate(); err != nil {
		return nil, fmt.Errorf("configure simulator: %w", err)
	}
	s := &Simulator{cfg: cfg}
	type laneSpec struct{ name, spec string }
	specs := []laneSpec{{BaselineName, ""}}
	baseSpec := "none"
	if !cfg.NoReadahead {
		baseSpec = cfg.ReadaheadSpec
		if baseSpec == "" {
			baseSpec = "readahead"
		}
	}
	seen := map[string]bool{BaselineName: true}
	add := func(spec string) {
		name := policies.SpecName(spec)
		if seen[name] {
			name = strings.TrimSpace(spec)
		}
		seen[name] = true
		specs = append(specs, laneSpec{name, spec})
	}
	for _, p := range cfg.Policies {
		add(p)
	}
	if cfg.Oracle {
		spec := cfg.OracleSpec
		if spec == "" {
			spec = "oracle"
		}
		add(spec)
	}
	for _, ls := range specs {
		l, err := s.newLane(ls.name, ls.spec)
		if err != nil {
			return nil, err
		}
		s.lanes = append(s.lanes, l)
	}
	s.lanes[0].display = baseSpec
	return s, nil
}

// Step feeds one event to every lane.
func (s *Simulator) Step(ev *policies.Event) error {
	if !s.started {
		s.started = true
		s.ts0 = ev.TS
		s.start = time.Now()
	}
	s.events++
	var t int64
	if ev.TS > s.ts0 {
		t = int64(ev.TS - s.ts0)
	}
	for _, l := range s.lanes {
		if err := l.step(ev, t); err != nil {
			return err
		}
	}
	return nil
}

// Report computes the results so far. Coverage and speedup are relative to
// the baseline lane.
func (s *Simulator) Report() *Report {
	r := &Report{
		Events:     s.events,
		CacheBytes: int64(s.cfg.CapacityPages()) * int64(s.cfg.pageSize()),
		CacheModel: s.cfg.CacheModel.String(),
		Device:     s.cfg.Device,
		Readahead:  !s.cfg.NoReadahead,
		PageSize:   s.cfg.pageSize(),
	}
	if s.started {
		r.ElapsedNS = int64(time.Since(s.start))
		if r.ElapsedNS > 0 {
			r.EventsPerSec = float64(s.events) / (float64(r.ElapsedNS) / 1e9)
		}
	}
	for _, l := range s.lanes {
		r.Policies = append(r.Policies, l.stats())
	}
	base := r.Policies[0]
	for i := range r.Policies {
		st := &r.Policies[i]
		if base.Misses > 0 {
			st.Coverage = (float64(base.Misses) - float64(st.Misses)) / float64(base.Misses)
		}
		if st.RuntimeNS > 0 {
			st.Speedup = float64(base.RuntimeNS) / float64(st.RuntimeNS)
		} else {
			st.Speedup = 1
		}
	}
	return r
}

// Run feeds all of src to a new simulator for cfg and returns its report.
func Run(cfg Config, src Source) (*Report, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	for src.Next() {
		if err := s.Step(src.Event()); err != nil {
			return nil, err
		}
	}
	if err := src.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return s.Report(), nil
}

// maxAccessPages bounds one demand access (64 GiB of 4 KiB pages), so that
// a corrupt npages cannot stall the simulation.
const maxAccessPages = 1 << 24

// lane is one policy configuration with its own cache, device and clock.
type lane struct {
	name, spec string
	display    string // spec shown in reports, when it differs from spec
	cache      *pageCache
	dev        *deviceState
	ra         *policies.Readahead  // the baseline model, when called directly
	disp       *policies.Dispatcher // the other policies; nil when none
	filePages  func(uint32) uint64
	emit       policies.Emit
	emitAbsent policies.Emit // submitAbsent, for the readahead model

	now       int64 // simulated time of the current event
	lastTrace int64 // trace time of the previous event
	stall     int64

	// The demand access being served: pages the lane inserts inside it
	// are demand reads, not prefetches.
	curFile        uint32
	curFirst, curN uint64
	inDemand       bool
	demandWait     int64 // latest completion of a demand page read

	st Stats
}

func (s *Simulator) newLane(name, spec string) (*lane, error) {
	l := &lane{name: name, spec: spec}
	l.cache = newPageCache(s.cfg.CacheModel, s.cfg.CapacityPages())
	l.dev = newDeviceState(s.cfg.Device, s.cfg.pageSize())
	env := s.cfg.Env
	env.PageSize = s.cfg.pageSize()
	env.Resident = func(file uint32, page uint64) bool {
		return page <= maxPage && file <= maxFile && l.cache.lookup(pageKey(file, page)) >= 0
	}
	l.filePages = env.FilePages
	build := s.cfg.Build
	if build == nil {
		build = policies.Build
	}
	var ps []policies.Policy
	if !s.cfg.NoReadahead {
		raSpec := s.cfg.ReadaheadSpec
		if raSpec == "" {
			raSpec = "readahead"
		}
		ra, err := build(raSpec, env)
		if err != nil {
			return nil, fmt.Errorf("configure baseline: %w", err)
		}
		if m, ok := ra.(*policies.Readahead); ok && trustReadahead {
			l.ra = m // called directly, before the other policies
		} else {
			ps = append(ps, ra)
		}
	}
	if spec != "" {
		p, err := build(spec, env)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) > 0 {
		l.disp = policies.NewDispatcher(ps...)
	}
	l.emit = l.submit
	l.emitAbsent = l.submitAbsent
	return l, nil
}

// step serves one event at trace time t (ns since the first event).
func (l *lane) step(ev *policies.Event, t int64) error {
	if t < l.lastTrace {
		t = l.lastTrace // out of order: no negative think time
	}
	l.lastTrace = t
	l.now = t + l.stall
	switch ev.Kind {
	case policies.EventFileAccess:
		// Map rows are demand too (policies.IsDemand): a mapped page
		// missing from the simulated cache is a miss and is read on
		// demand. The readahead model sees them through MapPages only
		// (mmap_miss bookkeeping), never as a read, since the kernel
		// maps only pages already cached.
		if policies.IsDemand(ev.Access.Kind) {
			return l.demand(ev)
		}
		return nil
	case 0:
		return nil
	}
	l.dispatch(ev)
	return nil
}

func (l *lane) demand(ev *policies.Event) error {
	n := uint64(ev.Access.NPages)
	if n == 0 {
		n = 1
	}
	first := ev.Access.Page
	if first > maxPage || n > maxPage-first {
		return fmt.Errorf("simulate access: file %d page %d+%d is beyond the supported 2^40 pages", ev.File, first, n)
	}
	if n > maxAccessPages {
		return fmt.Errorf("simulate access: file %d page %d: npages %d exceeds %d; the bundle is corrupt", ev.File, first, n, maxAccessPages)
	}
	if ev.File > maxFile {
		return fmt.Errorf("simulate access: file id %d exceeds the supported 2^24", ev.File)
	}
	file := ev.File
	l.st.Accesses++
	l.st.Demand += n
	// Classify before the policies run: a page missing now is a miss even
	// if readahead fetches it synchronously below.
	var missing uint64
	var wait int64
	for p := first; p < first+n; p++ {
		idx := l.cache.lookup(pageKey(file, p))
		if idx < 0 {
			missing++
			continue
		}
		e := &l.cache.entries[idx]
		l.st.Hits++
		if e.flags&flagPrefetched != 0 {
			e.flags &^= flagPrefetched
			l.st.Used++
			if e.ready > l.now {
				l.st.Late++
			}
		}
		if e.ready > wait {
			wait = e.ready
		}
		l.cache.touch(idx)
	}
	l.st.Misses += missing
	l.curFile, l.curFirst, l.curN, l.inDemand = file, first, n, true
	l.demandWait = 0
	l.dispatch(ev)
	if missing > 0 {
		// Demand-read the pages no policy brought in, in contiguous runs.
		var runStart, runLen uint64
		for p := first; p < first+n; p++ {
			if l.cache.lookup(pageKey(file, p)) < 0 {
				if runLen == 0 {
					runStart = p
				}
				runLen++
				continue
			}
			if runLen > 0 {
				l.read(file, runStart, runLen)
				runLen = 0
			}
		}
		if runLen > 0 {
			l.read(file, runStart, runLen)
		}
	}
	l.inDemand = false
	if l.demandWait > wait {
		wait = l.demandWait
	}
	if wait > l.now {
		l.stall += wait - l.now
		l.now = wait
	}
	return nil
}

// fileEnd returns the number of pages of file, or 0 where unknown.
func (l *lane) fileEnd(file uint32) uint64 {
	if l.filePages == nil {
		return 0
	}
	return l.filePages(file)
}

// clipRange returns the pages [first, last) of r that a request may read:
// up to maxPage and, where known (eof > 0), end of file eof.
func clipRange(r policies.Range, eof uint64) (first, last uint64) {
	first, last = r.First, r.First+uint64(r.N)
	if last < first || last > maxPage+1 {
		last = maxPage + 1
	}
	if eof > 0 && last > eof {
		last = eof
	}
	return first, last
}

// submit executes a policy request like the kernel backend: pages past end
// of file, cached or in flight are skipped; the rest are read in contiguous
// runs and land in the cache when the device completes them.
func (l *lane) submit(req *policies.Request) {
	if req.File > maxFile {
		return
	}
	eof := l.fileEnd(req.File)
	for _, r := range req.Ranges {
		first, last := clipRange(r, eof)
		var runStart, runLen uint64
		for p := first; p < last; p++ {
			if l.cache.lookup(pageKey(req.File, p)) >= 0 {
				if runLen > 0 {
					l.read(req.File, runStart, runLen)
					runLen = 0
				}
				continue
			}
			if runLen == 0 {
				runStart = p
			}
			runLen++
		}
		if runLen > 0 {
			l.read(req.File, runStart, runLen)
		}
	}
}

// trustReadahead makes lanes call the readahead model directly with
// submitAbsent: the model checks residency with the lane's cache
// (Env.Resident) and emits only pages it found absent, so checking them
// again is wasted work. Tests turn it off to compare.
var trustReadahead = true

// dispatch hands ev to the lane's readahead model, then to its other
// policies, in the order a Dispatcher of all of them would.
func (l *lane) dispatch(ev *policies.Event) {
	if l.ra != nil && ev.Kind == policies.EventFileAccess {
		l.ra.Handle(ev, l.emitAbsent)
	}
	if l.disp != nil {
		l.disp.Dispatch(ev, l.emit)
	}
}

// submitAbsent is submit for requests whose pages are all absent from the
// cache: each range, clipped like submit does, is one device request.
func (l *lane) submitAbsent(req *policies.Request) {
	if req.File > maxFile {
		return
	}
	eof := l.fileEnd(req.File)
	for _, r := range req.Ranges {
		first, last := clipRange(r, eof)
		if first < last {
			l.read(req.File, first, last-first)
		}
	}
}

// read issues one device request for n pages from first and inserts them.
// Pages of the demand access being served are demand reads; the others
// are prefetches.
func (l *lane) read(file uint32, first, n uint64) {
	done := l.dev.submit(l.now, n)
	l.st.PagesRead += n
	l.st.Requests++
	// Pages [dlo, dhi) of the run belong to the demand access.
	dlo, dhi := first, first
	if l.inDemand && file == l.curFile {
		dlo, dhi = max(first, l.curFirst), min(first+n, l.curFirst+l.curN)
		if dlo < dhi {
			l.demandWait = done
		} else {
			dlo, dhi = first, first
		}
	}
	l.st.Prefetched += n - (dhi - dlo)
	for p := first; p < first+n; p++ {
		var flags uint8 = flagPrefetched
		if p >= dlo && p < dhi {
			flags = flagReferenced
		}
		l.cache.insert(pageKey(file, p), done, flags)
	}
}

func (l *lane) stats() Stats {
	st := l.st
	st.Wasted = l.cache.wasted
	st.Name = l.name
	st.Spec = l.spec
	if l.display != "" {
		st.Spec = l.display
	}
	st.Unused = 0
	l.cache.forEach(func(e *entry) {
		if e.flags&flagPrefetched != 0 {
			st.Unused++
		}
	})
	if st.Prefetched > 0 {
		st.Accuracy = float64(st.Used) / float64(st.Prefetched)
	}
	if st.Demand > 0 {
		st.IOAmplification = float64(st.PagesRead) / float64(st.Demand)
	}
	st.StallNS = l.stall
	st.RuntimeNS = l.lastTrace + l.stall
	return st
}
