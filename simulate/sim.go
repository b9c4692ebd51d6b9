// Package simulate scores prefetch policies offline: it replays a bundle's
// events through the Linux readahead baseline, the chosen policies, a page
// cache and a device model shared by the recorded program's threads, each
// on its own clock, and reports coverage, accuracy, the effect of every
// prefetched page (used in time, late, wasted), I/O amplification, stall
// and the predicted wall time (docs/simulate.md).
package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
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
	// Calibrated says Device was measured (a device profile); reports
	// carry it as predicted_calibrated.
	Calibrated bool
	// ReadaheadParams says where the readahead model's parameters came
	// from (MachineReadahead.Summary), for reports.
	ReadaheadParams string
	// NoReadahead turns the Linux readahead baseline off in every lane.
	NoReadahead bool
	// ReadaheadSpec configures the baseline; "" means "readahead".
	ReadaheadSpec string
	// Policies are the policy specs to score, one lane each, on top of
	// the baseline.
	Policies []string
	// Oracle adds a lane with OracleSpec ("" means "oracle"), the upper
	// bound, unless Policies already hold that spec. Run streams the
	// oracle's future from its source when Env.Future is nil; New and Step
	// need Env.Future set.
	Oracle     bool
	OracleSpec string
	// Env is what policies may know; Resident is set per lane to that
	// lane's page cache.
	Env policies.Env
	// Build constructs a policy from a spec; nil means policies.Build.
	Build func(spec string, env policies.Env) (policies.Policy, error)
	// Speed divides recorded think times, as replay --speed does; 0
	// means 1.
	Speed float64
	// NoThink drops think time, as replay --timing asap does: each thread
	// starts at once and issues its next access when the previous one
	// completes.
	NoThink bool
	// InFlight bounds the pages the backend model (Device.Host) holds
	// queued, as replay --inflight does; 0 means 8192.
	InFlight int
	// Dirs, with the host model, models the directory blocks that path
	// lookups read (NewDirs); nil leaves them out.
	Dirs *Dirs
	// PerKind has every lane report its modelled times per kind of
	// operation (Stats.Kinds), to set beside replay's per-kind times.
	PerKind bool
	// BlockFiles are the files that are block devices: their cache_add
	// rows are a filesystem's metadata reads, submitted to the device
	// model (meta.go). nil: none.
	BlockFiles map[uint32]bool
	// FileRates scales each file's device time by how the recording's
	// cold operations on it ran (FitFileRates); nil: the device's rates
	// for every file. Reports carry it.
	FileRates *FileRates
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
	return int(min(max(n, 1), MaxCachePages))
}

// Stats are the results of one lane: the baseline, a policy or the oracle.
// Counts are in pages; times are simulated nanoseconds.
type Stats struct {
	Name string `json:"name"`
	Spec string `json:"spec"` // the lane's policy; the readahead spec (or "none") for the baseline

	Accesses   uint64 `json:"demand_accesses"` // demand access events
	Demand     uint64 `json:"demand"`          // pages demanded
	Hits       uint64 `json:"hits"`            // demanded pages found cached or in flight
	Misses     uint64 `json:"misses"`          // demanded pages not in the cache
	Prefetched uint64 `json:"prefetched"`      // pages read by prefetch (not demand) I/O
	// Every prefetched page ends in exactly one of these three.
	Used          uint64 `json:"pages_used_in_time"`   // first demanded after its read completed
	Late          uint64 `json:"pages_late"`           // first demanded while its read was in flight: the demand waited for the rest
	Wasted        uint64 `json:"pages_wasted"`         // never demanded: evicted unused, or unused at the end
	WastedEvicted uint64 `json:"pages_wasted_evicted"` // of Wasted, those evicted before the end
	PagesRead     uint64 `json:"pages_read"`           // all pages read from the device
	Requests      uint64 `json:"requests"`             // device requests

	Coverage        float64 `json:"coverage"`         // (baseline misses - misses) / baseline misses
	Accuracy        float64 `json:"accuracy"`         // (used in time + late) / prefetched
	IOAmplification float64 `json:"io_amplification"` // pages read / pages demanded
	StallNS         int64   `json:"stall_ns"`         // time demand accesses waited for the device, summed over threads
	ThinkNS         int64   `json:"think_ns"`         // think time, summed over threads
	// With a host model (Device.Host): the time threads spent copying
	// cached pages, the time their CPU work was stretched by sharing the
	// CPUs with the backend, the time they spent waking it, and the pages
	// the backend's queue bounds dropped; BackendBusyNS is the time the
	// modelled backend spent on requests and BackendOpenNS the part of it
	// opening files (replay's backend_busy_ns and backend_acquire_ns are
	// the measured ones).
	CachedReadNS  int64  `json:"cached_read_ns,omitempty"`
	ContentionNS  int64  `json:"contention_ns,omitempty"`
	SubmitNS      int64  `json:"submit_ns,omitempty"` // submissions that woke the backend
	PagesDropped  uint64 `json:"pages_dropped,omitempty"`
	BackendBusyNS int64  `json:"backend_busy_ns,omitempty"`
	BackendOpenNS int64  `json:"backend_open_ns,omitempty"`
	// BackendDirReads counts the directory blocks the modelled backend
	// read from the device to open files (Config.Dirs), inside
	// BackendOpenNS.
	BackendDirReads uint64 `json:"backend_dir_reads,omitempty"`
	// Advised counts the FADVISEs the modelled backend issued (Host: one
	// per uncached run of a request's range; replay's backend_advised),
	// AdviseDelayNS the modelled delays between issuing each and the
	// kernel's running it, and PipelineNS the modelled times from each
	// one's request to the kernel's running it (the backend's queue,
	// wake-up and work, and the delay; replay's backend_pipeline_ns is the
	// measured one), both summed over Advised.
	Advised       uint64 `json:"backend_advised,omitempty"`
	AdviseDelayNS int64  `json:"advise_delay_ns,omitempty"`
	PipelineNS    int64  `json:"backend_pipeline_ns,omitempty"`
	// ServiceNS is the recorded service of metadata rows (JSON:
	// recorded_service_ns); Kinds the modelled times per kind of
	// operation (Config.PerKind).
	ServiceNS int64       `json:"recorded_service_ns"`
	Kinds     []KindTimes `json:"kinds,omitempty"`
	// MetaPagesRead and MetaRequests are the metadata blocks read from
	// the device for the program's lookups (Config.BlockFiles), and in
	// how many requests; they are not in PagesRead.
	MetaPagesRead uint64 `json:"metadata_pages_read,omitempty"`
	MetaRequests  uint64 `json:"metadata_requests,omitempty"`
	// MetaSyncRequests are those of MetaRequests that a metadata
	// operation of the program waited for (its recorded span held them),
	// served in its modelled time rather than its recorded one.
	MetaSyncRequests uint64 `json:"metadata_sync_requests,omitempty"`
	// WallNS is the simulated makespan: from the start of the first
	// operation the program issued (formats.AccessKind.Issued: not an
	// exec or a kernel row) to the end of the last thread's last
	// operation, think plus service time, each counted once. It spans
	// what replay's wall and the manifest's recorded wall span.
	WallNS  int64   `json:"wall_ns"`
	Speedup float64 `json:"speedup"` // baseline wall_ns / wall_ns
	// The prediction, under the names replay's report uses: the same as
	// WallNS and Speedup.
	PredictedWallNS  int64   `json:"predicted_wall_ns"`
	PredictedSpeedup float64 `json:"predicted_speedup"`
}

// Think time sources, Report.ThinkTime.
const (
	// ThinkServiceTimes: think time runs from an operation's recorded
	// completion (end_ns) to the thread's next start.
	ThinkServiceTimes = "service_times"
	// ThinkGaps: think time is the gap between a thread's recorded
	// accesses, service included.
	ThinkGaps = "gaps"
	// ThinkMixed: some rows had service times, some not.
	ThinkMixed = "mixed"
	// ThinkNone: no think time (Config.NoThink).
	ThinkNone = "none"
)

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
	Threads      int     `json:"threads"`
	// ThinkTime says where think time came from: service_times, gaps,
	// mixed or none; Notes say what that means for the results.
	ThinkTime string   `json:"think_time"`
	Notes     []string `json:"notes,omitempty"`
	// Untraced says the recorder's own cost was taken out of the think
	// times (Input.UntracedEvents, --untraced), UntracedNS how much,
	// summed over the threads.
	Untraced   bool   `json:"untraced,omitempty"`
	UntracedNS uint64 `json:"untraced_ns,omitempty"`
	// FileRates are the per-file scales of the device's time
	// (Config.FileRates), or nil.
	FileRates *FileRates `json:"file_rates,omitempty"`
	// PredictedCalibrated is true when the device model was measured
	// (Config.Calibrated).
	PredictedCalibrated bool `json:"predicted_calibrated"`
	// ReadaheadParams says where the readahead parameters came from.
	ReadaheadParams string `json:"readahead_params,omitempty"`
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
	// Rows with and without service times, for Report.ThinkTime.
	timed, untimed uint64
	// stream is set by Run: lanes whose policies use a future they were
	// given feed it from the batches ahead.
	stream bool
	rows   uint64 // access rows seen, for errors
}

// BaselineName is the lane name of the baseline.
const BaselineName = "baseline"

// New builds a simulator for cfg, with one lane for the baseline, one per
// policy and one for the oracle. Events are then fed with Step.
func New(cfg Config) (*Simulator, error) { return newSimulator(cfg, false) }

func newSimulator(cfg Config, stream bool) (*Simulator, error) {
	if cfg.CacheBytes <= 0 {
		return nil, errors.New("configure simulator: cache size must be positive, e.g. --cache 256MiB")
	}
	if err := cfg.Device.validate(); err != nil {
		return nil, fmt.Errorf("configure simulator: %w", err)
	}
	if cfg.Speed < 0 {
		return nil, fmt.Errorf("configure simulator: speed %v must not be negative", cfg.Speed)
	}
	s := &Simulator{cfg: cfg, stream: stream}
	for _, ls := range laneSpecs(&cfg) {
		l, err := s.newLane(ls.name, ls.spec)
		if err != nil {
			return nil, err
		}
		s.lanes = append(s.lanes, l)
	}
	s.lanes[0].display = "none"
	if !cfg.NoReadahead {
		s.lanes[0].display = cmpOr(cfg.ReadaheadSpec, "readahead")
	}
	return s, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type laneSpec struct{ name, spec string }

// laneSpecs names the lanes of cfg: the baseline, one per distinct policy
// spec, and the oracle unless a policy lane already runs the same spec. A
// lane is named by its policy's name, or by its whole spec where several
// lanes run policies of one name.
func laneSpecs(cfg *Config) []laneSpec {
	var specs []string
	seen := map[string]bool{}
	add := func(spec string) {
		if spec = strings.TrimSpace(spec); !seen[spec] {
			seen[spec] = true
			specs = append(specs, spec)
		}
	}
	for _, p := range cfg.Policies {
		add(p)
	}
	if cfg.Oracle {
		add(cmpOr(cfg.OracleSpec, "oracle"))
	}
	names := map[string]int{BaselineName: 1}
	for _, spec := range specs {
		names[policies.SpecName(spec)]++
	}
	out := []laneSpec{{BaselineName, ""}}
	for _, spec := range specs {
		name := policies.SpecName(spec)
		if names[name] > 1 {
			name = spec
		}
		out = append(out, laneSpec{name, spec})
	}
	return out
}

// maxReadPages bounds one demand access: Linux returns at most MAX_RW_COUNT
// (2 GiB less a page) from one read, 524287 pages of 4 KiB. A row beyond it
// is corrupt or hostile, and simulating its pages one by one could run for
// minutes.
const maxReadPages = (1<<31 - 4096) / 4096

// checkAccess validates the fields of an access the simulator relies on.
func checkAccess(ev *policies.Event) error {
	first, n := ev.Access.Page, max(uint64(ev.Access.NPages), 1)
	switch {
	case ev.File > maxFile:
		return fmt.Errorf("field file_id is %d, beyond the supported 2^24", ev.File)
	case first > maxPage || n > maxPage-first:
		return fmt.Errorf("fields first_page %d + npages %d reach beyond the supported 2^40 pages", first, n)
	case n > maxReadPages && policies.IsDemand(ev.Access.Kind):
		return fmt.Errorf("field npages is %d, more than one %s can return (%d pages, Linux MAX_RW_COUNT); the bundle is corrupt",
			n, ev.Access.Kind, maxReadPages)
	}
	return nil
}

// accessError wraps a checkAccess error with the access row and its file.
func (s *Simulator) accessError(row uint64, ev *policies.Event, err error) error {
	file := fmt.Sprintf("file_id %d", ev.File)
	if s.cfg.Env.FileKey != nil {
		if k, ok := s.cfg.Env.FileKey(ev.File); ok && k.Path != "" {
			file += " " + k.Path
		}
	}
	return fmt.Errorf("simulate access row %d (%s, page %d): %w", row, file, ev.Access.Page, err)
}

// begin notes the trace start at the first event.
func (s *Simulator) begin(ts uint64) {
	if !s.started {
		s.started = true
		s.ts0 = ts
		s.start = time.Now()
	}
}

// rel returns ev's trace start and end relative to the first event; end
// is -1 where unknown.
func (s *Simulator) rel(ev *policies.Event) (t, e int64) {
	if ev.TS > s.ts0 {
		t = int64(ev.TS - s.ts0)
	}
	e = -1
	if ev.Kind == policies.EventFileAccess && ev.Access.End >= ev.TS && ev.Access.End != 0 {
		e = int64(ev.Access.End - s.ts0)
	}
	return t, e
}

// count tallies the rows with and without service times.
func (s *Simulator) count(ev *policies.Event) {
	if ev.Kind != policies.EventFileAccess {
		return
	}
	if k := ev.Access.Kind; policies.IsDemand(k) || isMetadata(k) {
		if ev.Access.End != 0 {
			s.timed++
		} else {
			s.untimed++
		}
	}
}

// Step feeds one event to every lane.
func (s *Simulator) Step(ev *policies.Event) error {
	s.begin(ev.TS)
	s.events++
	if ev.Kind == policies.EventFileAccess {
		if err := checkAccess(ev); err != nil {
			return s.accessError(s.rows, ev, err)
		}
		s.rows++
	}
	s.count(ev)
	t, e := s.rel(ev)
	for _, l := range s.lanes {
		l.step(ev, t, e)
	}
	return nil
}

// Report computes the results so far. Coverage and speedup are relative to
// the baseline lane.
func (s *Simulator) Report() *Report {
	r := &Report{
		Events:              s.events,
		CacheBytes:          int64(s.cfg.CapacityPages()) * int64(s.cfg.pageSize()),
		CacheModel:          s.cfg.CacheModel.String(),
		Device:              s.cfg.Device,
		Readahead:           !s.cfg.NoReadahead,
		PageSize:            s.cfg.pageSize(),
		Threads:             len(s.lanes[0].threads.th),
		PredictedCalibrated: s.cfg.Calibrated,
		FileRates:           s.cfg.FileRates,
		ReadaheadParams:     s.cfg.ReadaheadParams,
	}
	r.ThinkTime, r.Notes = s.thinkTime()
	if n := s.cfg.Device.queueNote(s.cfg.Calibrated); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if s.cfg.FileRates != nil {
		r.Notes = append(r.Notes, s.cfg.FileRates.Note())
	}
	if n := s.hostNote(); n != "" {
		r.Notes = append(r.Notes, n)
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
		st.Speedup = 1
		if st.WallNS > 0 {
			st.Speedup = float64(base.WallNS) / float64(st.WallNS)
		}
		st.PredictedWallNS, st.PredictedSpeedup = st.WallNS, st.Speedup
	}
	return r
}

// thinkTime says where think time came from and what it means.
func (s *Simulator) thinkTime() (string, []string) {
	switch {
	case s.cfg.NoThink:
		return ThinkNone, nil
	case s.untimed == 0 && s.timed > 0:
		return ThinkServiceTimes, nil
	case s.timed == 0:
		return ThinkGaps, []string{s.gapsNote()}
	}
	return ThinkMixed, []string{fmt.Sprintf("%d of %d demand and metadata rows lack service times (end_ns: a recording's rows of the kernel's own reads outside a system call, such as exec's, have none); their think time is the gap since the thread's previous row", s.untimed, s.timed+s.untimed)}
}

// gapsNote is the caveat of gap-based think time; for a bundle recorded on
// a real kernel (Env.Kernel), what the kernel's timestamps hold.
func (s *Simulator) gapsNote() string {
	n := "think time is the gap between a thread's accesses, since the bundle has no service times (end_ns, format 1.1): a gap also holds the time the access before it took"
	if k := s.cfg.Env.Kernel; k != "" {
		n += fmt.Sprintf(". Recorded on Linux %s, where a read's row is stamped after its I/O wait (filemap:mm_filemap_get_pages), "+
			"so a read that missed when recorded is charged its wait twice: wall_ns and stall are upper bounds and speedups are diluted; "+
			"record the program again with this predictio for service times", k)
	}
	return n
}

// Run feeds all of src to a new simulator for cfg and returns its report.
// Reading the source and every lane run in goroutines of their own,
// connected by batches of events, so that decoding and simulating use
// several cores.
func Run(cfg Config, src Source) (*Report, error) {
	s, err := newSimulator(cfg, true)
	if err != nil {
		return nil, err
	}
	if err := s.run(src); err != nil {
		return nil, err
	}
	return s.Report(), nil
}

// lane is one policy configuration with its own cache, device, thread
// clocks and policy instances.
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
	speed      float64       // think time divisor; 0: no think time
	threads    threadTable
	now        int64 // simulated time of the event being served
	// first is the simulated start of the first operation replay would
	// re-issue (formats.AccessKind.Issued); wall_ns counts from it.
	first     int64
	haveFirst bool

	// The demand access being served: pages the lane inserts inside it
	// are demand reads, not prefetches.
	curFile        uint32
	curFirst, curN uint64
	inDemand       bool
	demandWait     int64 // latest completion of a demand page read

	// fut is the streamed future this lane's policies read, fed from the
	// batches ahead (Run only); nil when none.
	fut        *policies.Future
	demand     uint64 // demand accesses served, the future's cursor
	futureHeld uint64 // most pages fut held
	ev         policies.Event
	flatRows   uint64 // rows plainRun served, for tests

	// host is the CPU model (Device.Host), nil when none; iss models the
	// kernel backend that executes the policies' requests (a lane with a
	// policy and a host model).
	host  *Host
	iss   *issuer
	paths paths // with iss: the path lookups the backend and the program share
	// With iss: how busy the program's threads (think time, cached reads)
	// and the backend have been lately, for their sharing of the CPUs.
	progLoad, issLoad load
	missNS            int64 // host.MissNS, or 0

	st       Stats
	kinds    *kindTally      // Config.PerKind; nil otherwise
	block    map[uint32]bool // Config.BlockFiles
	meta     metaRun         // metadata blocks being gathered into a request
	metaPend []metaRun       // closed runs waiting for their thread's next operation
}

func (s *Simulator) newLane(name, spec string) (*lane, error) {
	l := &lane{name: name, spec: spec, speed: 1}
	switch {
	case s.cfg.NoThink:
		l.speed = 0
	case s.cfg.Speed > 0:
		l.speed = s.cfg.Speed
	}
	l.threads.init()
	if s.cfg.PerKind {
		l.kinds = &kindTally{}
	}
	l.block = s.cfg.BlockFiles
	env := s.cfg.Env
	env.PageSize = s.cfg.pageSize()
	l.cache = newPageCache(s.cfg.CacheModel, s.cfg.CapacityPages(), env.FilePages)
	l.dev = newDeviceState(s.cfg.Device, s.cfg.pageSize())
	l.dev.rates = s.cfg.FileRates
	env.Resident = func(file uint32, page uint64) bool {
		return page <= maxPage && file <= maxFile && l.cache.lookup(file, page) >= 0
	}
	if env.Future == nil && s.stream {
		env.Future = policies.NewStreamFuture()
	}
	l.filePages = env.FilePages
	if h := s.cfg.Device.Host; h != nil {
		l.host, l.missNS = h, h.MissNS
		if spec != "" {
			l.iss = &issuer{host: h, maxPages: uint64(cmp.Or(s.cfg.InFlight, issueQueuePages)), opened: map[uint32]bool{}, rng: rand.New(rand.NewPCG(1, 2))}
			l.paths.warm = map[uint32]int64{}
			l.paths.initDirs(s.cfg.Dirs)
		}
	}
	build := s.cfg.Build
	if build == nil {
		build = policies.Build
	}
	var ps []policies.Policy
	if !s.cfg.NoReadahead {
		ra, err := build(cmpOr(s.cfg.ReadaheadSpec, "readahead"), env)
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
	if env.Future != nil && env.Future.Streaming() && env.Future.Attached() {
		l.fut = env.Future
	}
	l.emit = l.submit
	l.emitAbsent = l.submitAbsent
	return l, nil
}

// threadID is the clock an event runs on: its thread, or its process when
// the thread is unknown (hints of format 1.0 carry only a pid).
func threadID(ev *policies.Event) uint32 {
	if ev.TID != 0 {
		return ev.TID
	}
	return ev.PID
}

// step serves one event at trace time t (ns since the first event), with
// recorded end e (-1 unknown).
func (l *lane) step(ev *policies.Event, t, e int64) {
	switch ev.Kind {
	case policies.EventFileAccess:
		k := ev.Access.Kind
		if l.block != nil {
			if k == formats.KindCacheAdd && l.block[ev.File] {
				l.metaRead(ev, t)
				return
			}
			l.flushMeta()
		}
		switch {
		case policies.IsDemand(k):
			// Map rows are demand too (policies.IsDemand): a mapped page
			// missing from the simulated cache is a miss and is read on
			// demand. The readahead model sees them through MapPages
			// only (mmap_miss bookkeeping), never as a read, since the
			// kernel maps only pages already cached.
			if len(l.metaPend) > 0 {
				l.takeMeta(threadID(ev), t, e, 0, false)
			}
			th := l.threads.get(threadID(ev))
			prev, started := th.clock, th.started
			l.now = l.begin(th, t, e, ev.Access.Op)
			start := l.now
			l.noteFirst(start)
			// A map row's pages were mapped by the fault it belongs to:
			// the program touches them without a copy or a fault.
			if l.serve(ev) == 0 && e >= t && l.host != nil && k != formats.KindMap {
				l.now = l.cachedRead(l.now, max(uint64(ev.Access.NPages), 1))
			}
			if l.iss != nil && l.iss.woken {
				l.now = l.submitWake(l.now)
			}
			th.clock = l.now
			l.demand++
			if l.kinds != nil {
				l.kinds.add(k, started, prev, start, l.now)
			}
		case isMetadata(k):
			tid := threadID(ev)
			th := l.threads.get(tid)
			prev, started := th.clock, th.started
			now := l.begin(th, t, e, ev.Access.Op)
			start := now
			if k.Issued() {
				l.noteFirst(start)
			}
			if e > t {
				svc := e - t
				if l.block != nil {
					if m, ok := l.takeMeta(tid, t, e, now, l.host != nil); ok {
						svc = m
					}
				}
				if l.iss != nil {
					svc = l.lookup(ev.File, k, now, svc)
				}
				now += svc
				l.st.ServiceNS += e - t
			}
			th.clock = now
			if l.kinds != nil {
				l.kinds.add(k, started, prev, start, now)
			}
		}
	case 0:
	default:
		l.now = scale(t, l.speed)
		if th := l.threads.find(threadID(ev)); th != nil {
			l.now = th.at(t, l.speed)
		}
		l.dispatch(ev)
	}
}

// isMetadata reports whether k is one of format 1.1's operations without
// data pages (open, stat, readdir, exec, mmap): their recorded duration is
// service time the device model does not serve.
func isMetadata(k formats.AccessKind) bool {
	switch k {
	case formats.KindOpen, formats.KindStat, formats.KindReaddir, formats.KindExec, formats.KindMmap:
		return true
	}
	return false
}

// begin returns when the operation of a row at trace time t starts on th's
// clock: after the thread's previous operation completed plus its think
// time (from that operation's recorded end, or start where the end is
// unknown), divided by the speed. Later rows of one operation (same op)
// continue it without think time.
func (l *lane) begin(th *thread, t, e int64, op uint64) int64 {
	var now int64
	switch {
	case !th.started:
		th.started = true
		now = scale(t, l.speed)
	case op != 0 && op == th.op:
		now = th.clock
	default:
		think := scale(max(t-th.ref, 0), l.speed)
		l.st.ThinkNS += think
		if l.iss != nil && think > 0 {
			think = l.contend(think, th.clock)
			l.progLoad.add(th.clock, th.clock+think)
		}
		now = th.clock + think
	}
	th.op = op
	th.ref = t
	if e >= t {
		th.ref = e
	}
	return now
}

// noteFirst notes the start of an operation replay would re-issue: the
// first one's is where the wall starts, as replay's does (kernel rows
// such as the metadata blocks read before it are not in its wall).
func (l *lane) noteFirst(start int64) {
	if !l.haveFirst {
		l.first, l.haveFirst = start, true
	}
}

// scale divides a recorded duration by speed; speed 0 drops it.
func scale(d int64, speed float64) int64 {
	switch speed {
	case 1:
		return d
	case 0:
		return 0
	}
	return int64(float64(d) / speed)
}

// serve serves one demand access at l.now, moves l.now to the completion
// of its device waits and returns how many of its pages missed.
func (l *lane) serve(ev *policies.Event) uint64 {
	n := max(uint64(ev.Access.NPages), 1)
	first := ev.Access.Page
	file := ev.File
	l.st.Accesses++
	l.st.Demand += n
	if l.iss != nil {
		l.advance(l.now)
	}
	// Classify before the policies run: a page missing now is a miss even
	// if readahead fetches it synchronously below.
	var missing uint64
	var wait int64
	for p := first; p < first+n; p++ {
		idx := l.cache.lookup(file, p)
		if idx < 0 {
			missing++
			continue
		}
		e := &l.cache.entries[idx]
		l.hit(e)
		wait = max(wait, e.ready)
		l.cache.touch(idx)
	}
	l.st.Misses += missing
	l.curFile, l.curFirst, l.curN, l.inDemand = file, first, n, true
	l.demandWait = 0
	hasPolicies := l.ra != nil || l.disp != nil
	switch k := ev.Access.Kind; {
	case l.ra != nil && n == 1 && (k == formats.KindRead || k == formats.KindImported):
		// The readahead model told what its Resident callback would say.
		before := missing == 1 && first > 0 && l.cache.lookup(file, first-1) >= 0
		l.ra.ReadPage(file, first, missing == 0, before, l.emitAbsent)
		if l.disp != nil {
			l.disp.Dispatch(ev, l.emit)
		}
	case hasPolicies:
		l.dispatch(ev)
	}
	switch {
	case missing == 0:
	case missing == n && !hasPolicies:
		l.read(file, first, n) // nothing was cached, and nothing read since
	default:
		l.readMissing(file, first, n)
	}
	l.inDemand = false
	wait = max(wait, l.demandWait)
	if wait > l.now {
		l.st.StallNS += wait - l.now
		l.now = wait
	}
	return missing
}

// hit counts a demand that found its page cached, and whether a prefetch
// brought it in time (Used) or is still reading it (Late).
func (l *lane) hit(e *entry) {
	l.st.Hits++
	if e.flags&flagPrefetched != 0 {
		e.flags &^= flagPrefetched
		if e.ready > l.now {
			l.st.Late++
		} else {
			l.st.Used++
		}
	}
}

// readRow serves access row i of b, a one-page read, in a lane whose only
// policy is the readahead model: step and serve without an Event.
func (l *lane) readRow(s *Simulator, b *batch, i int) {
	var t int64
	ts := b.ts[i]
	if ts > s.ts0 {
		t = int64(ts - s.ts0)
	}
	e := int64(-1)
	if end := b.end[i]; end >= ts && end != 0 {
		e = int64(end - s.ts0)
	}
	if l.block != nil {
		l.flushMeta()
		if len(l.metaPend) > 0 {
			l.takeMeta(b.threadOf(i), t, e, 0, false)
		}
	}
	th := l.threads.get(b.threadOf(i))
	prev, started := th.clock, th.started
	l.now = l.begin(th, t, e, b.op[i])
	start := l.now
	l.noteFirst(start)
	file, page := b.file[i], b.page[i]
	l.st.Accesses++
	l.st.Demand++
	c := l.cache
	idx := c.lookup(file, page)
	var wait int64
	here := idx >= 0
	if here {
		e := &c.entries[idx]
		l.hit(e)
		wait = e.ready
		c.touch(idx)
	} else {
		l.st.Misses++
	}
	l.curFile, l.curFirst, l.curN, l.inDemand = file, page, 1, true
	l.demandWait = 0
	before := !here && page > 0 && c.lookup(file, page-1) >= 0
	l.ra.ReadPage(file, page, here, before, l.emitAbsent)
	if !here {
		l.readMissing(file, page, 1)
	}
	l.inDemand = false
	wait = max(wait, l.demandWait)
	if wait > l.now {
		l.st.StallNS += wait - l.now
		l.now = wait
	}
	if here && e >= t && l.host != nil {
		l.now = l.cachedRead(l.now, 1)
	}
	th.clock = l.now
	l.demand++
	if l.kinds != nil {
		l.kinds.add(b.kind[i], started, prev, start, l.now)
	}
}

// readMissing demand-reads the pages of [first, first+n) that no policy
// brought in, in contiguous runs.
func (l *lane) readMissing(file uint32, first, n uint64) {
	l.absentRuns(file, first, first+n, func(start, n uint64) { l.read(file, start, n) })
}

// absentRuns calls fn, in order, for each run of consecutive pages of
// [first, last) of file that are not in the cache; fn may insert the run's
// pages.
func (l *lane) absentRuns(file uint32, first, last uint64, fn func(start, n uint64)) {
	var start, n uint64
	for p := first; p < last; p++ {
		if l.cache.lookup(file, p) >= 0 {
			if n > 0 {
				fn(start, n)
				n = 0
			}
			continue
		}
		if n == 0 {
			start = p
		}
		n++
	}
	if n > 0 {
		fn(start, n)
	}
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
	if l.iss != nil {
		l.queue(req, eof)
		return
	}
	for _, r := range req.Ranges {
		first, last := clipRange(r, eof)
		l.absentRuns(req.File, first, last, func(start, n uint64) { l.read(req.File, start, n) })
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
// Pages of the demand access being served are demand reads (the request
// is one the thread waits for: submitSync); the others are prefetches.
func (l *lane) read(file uint32, first, n uint64) {
	// Pages [dlo, dhi) of the run belong to the demand access.
	dlo, dhi := first, first
	if l.inDemand && file == l.curFile {
		dlo, dhi = max(first, l.curFirst), min(first+n, l.curFirst+l.curN)
		if dlo >= dhi {
			dlo, dhi = first, first
		}
	}
	var done int64
	if dlo < dhi {
		done = l.dev.submitSyncFor(l.now, n, file)
		l.demandWait = done + l.missNS
	} else {
		done = l.dev.submitFor(l.now, n, file)
	}
	l.st.PagesRead += n
	l.st.Requests++
	l.st.Prefetched += n - (dhi - dlo)
	for p := first; p < first+n; p++ {
		var flags uint8 = flagPrefetched
		if p >= dlo && p < dhi {
			flags = flagReferenced
		}
		l.cache.insert(file, p, done, flags)
	}
}

func (l *lane) stats() Stats {
	st := l.st
	st.Name = l.name
	st.Spec = l.spec
	if l.display != "" {
		st.Spec = l.display
	}
	st.WastedEvicted = l.cache.wasted
	st.Wasted = l.cache.wasted
	l.cache.forEach(func(e *entry) {
		if e.flags&flagPrefetched != 0 {
			st.Wasted++
		}
	})
	if st.Prefetched > 0 {
		st.Accuracy = float64(st.Used+st.Late) / float64(st.Prefetched)
	}
	if st.Demand > 0 {
		st.IOAmplification = float64(st.PagesRead) / float64(st.Demand)
	}
	for i := range l.threads.th {
		st.WallNS = max(st.WallNS, l.threads.th[i].clock-l.first)
	}
	if l.kinds != nil {
		st.Kinds = l.kinds.list()
	}
	return st
}

// KindTimes are the modelled times of one kind of operation in a lane:
// from each operation's start to its completion (service: device waits,
// cached copies, metadata), and from the thread's previous completion to
// each start (think time, stretched where the CPUs are shared), summed;
// replay's summary.fidelity measures the same two per kind.
type KindTimes struct {
	Kind      string `json:"kind"`
	Ops       int64  `json:"ops"`
	ServiceNS int64  `json:"service_ns"`
	ThinkNS   int64  `json:"think_ns"`
}

// kindTally is a lane's KindTimes by access kind.
type kindTally [16]KindTimes

// add counts one row of kind k that started at start, completed at end,
// after the thread's previous operation completed at prev (started false:
// its first).
func (k *kindTally) add(kind formats.AccessKind, started bool, prev, start, end int64) {
	i := int(kind) & 15
	k[i].Ops++
	k[i].ServiceNS += end - start
	if started {
		k[i].ThinkNS += start - prev
	}
}

// list returns the kinds with operations, in kind order.
func (k *kindTally) list() []KindTimes {
	var out []KindTimes
	for i := range k {
		if k[i].Ops > 0 {
			t := k[i]
			t.Kind = formats.AccessKind(i).String()
			out = append(out, t)
		}
	}
	return out
}

// thread is one recorded thread's clock.
type thread struct {
	clock   int64  // simulated time its last operation completed
	ref     int64  // trace time its think time runs from
	op      uint64 // operation id of its last row
	started bool
}

// at returns the simulated time of an event of th at trace time t that is
// not an operation (a hint): the think time since its last operation.
func (th *thread) at(t int64, speed float64) int64 {
	return th.clock + scale(max(t-th.ref, 0), speed)
}

// threadTable maps thread ids to clocks.
type threadTable struct {
	ids    map[uint32]int32
	th     []thread
	lastID uint32
	last   int32
}

func (t *threadTable) init() {
	t.ids = map[uint32]int32{}
	t.last = -1
}

// find returns the clock of thread id, or nil if it has none yet.
func (t *threadTable) find(id uint32) *thread {
	if t.last >= 0 && t.lastID == id {
		return &t.th[t.last]
	}
	if i, ok := t.ids[id]; ok {
		return &t.th[i]
	}
	return nil
}

// get returns the clock of thread id, adding one if need be. The pointer
// is valid until the next get.
func (t *threadTable) get(id uint32) *thread {
	if t.last >= 0 && t.lastID == id {
		return &t.th[t.last]
	}
	i, ok := t.ids[id]
	if !ok {
		i = int32(len(t.th))
		t.th = append(t.th, thread{})
		t.ids[id] = i
	}
	t.lastID, t.last = id, i
	return &t.th[i]
}
