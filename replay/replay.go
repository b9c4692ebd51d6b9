package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
)

// Backend names (package backend).
const (
	BackendKernel = backend.NameKernel
	BackendKmod   = backend.NameKmod // the predictio kernel module (package kmod)
	BackendDirect = backend.NameDirect
	BackendNone   = backend.NameNone
)

// Baseline is the run name of a replay without a policy.
const Baseline = "baseline"

// Timing modes.
const (
	TimingRecorded = "recorded"
	TimingASAP     = "asap"
)

// Options configure a replay. The zero value replays each file at its
// recorded path, through the kernel backend, with recorded timing.
type Options struct {
	// Root remaps recorded paths to the same paths under Root.
	Root string
	// AllowChanged replays files whose size or mtime differ from the
	// recording, as long as they are long enough.
	AllowChanged bool
	// Backend is "kernel" (default), "kmod", "direct" or "none".
	Backend string
	// Timing is "recorded" (default) or "asap".
	Timing string
	// Speed divides recorded think times; 0 means 1.
	Speed float64
	// Untraced takes the recorder's own cost out of the recorded think
	// times (format 1.2 bundles; docs/replay.md, "Untraced timing"): each
	// thread's rows move earlier by what the recorder's programs measured
	// in the thread (tracer_ns) and what tracing added to its system calls
	// (tracer_calls × the manifest's syscall_cost_ns), so that replay, its
	// recorded wall and the predicted column describe the program as it
	// runs untraced.
	Untraced bool
	// Runs are the run specs, replayed in turn Repeat times (A B A B ...):
	// "baseline" (no policy) or policy specs ("oracle", "tree:window=8");
	// specs joined with "+" run together in one dispatcher.
	Runs []string
	// Repeat is the number of rounds; 0 means 1.
	Repeat int
	// Markov is a trained model for the markov policy.
	Markov *policies.MarkovModel

	// Warm skips eviction: runs start with whatever is cached and are
	// reported warm. Without Warm, kernel and none runs evict the files
	// and verify they are cold first.
	Warm bool
	// DropCaches also writes /proc/sys/vm/drop_caches before a cold run
	// (root only).
	DropCaches bool
	// WarmMetadata leaves dentries and inodes cached before cold runs of a
	// bundle with metadata operations (by default they are dropped with
	// drop_caches 2 where allowed).
	WarmMetadata bool
	// MaxResidue is the share of the demanded pages that may stay cached
	// after eviction (mapped or locked by other processes, dirty) before
	// a cold run is refused; 0 means DefaultMaxResidue (5%). Every run
	// starts with the first run's residue.
	MaxResidue float64
	// Effect says how the page-cache backends' policy runs count
	// prefetched pages by effect with the eBPF effect observer, whose
	// hooks on every system call slow the run (docs/replay.md):
	// EffectSeparate (the default, "") times every round without it and
	// counts in one more run of each policy spec with it, left out of the
	// timing; EffectInline counts in the timed runs; EffectOff does not
	// count.
	Effect string
	// InFlight bounds the kernel backend's queued pages; 0 means 8192.
	InFlight int
	// Readahead makes the kernel backend use readahead(2) instead of
	// posix_fadvise(WILLNEED).
	Readahead bool

	// CachePages is the direct backend's user-space cache in pages; 0
	// means 65536 (256 MiB with 4 KiB pages).
	CachePages int
	// QueueDepth bounds the direct backend's prefetch reads in flight; 0
	// means 64.
	QueueDepth int
	// SQPoll makes the direct backend's engine use an SQPOLL ring.
	SQPoll bool

	// Progress, when set, receives a progress bar.
	Progress io.Writer

	// skipEvict is a test hook: evict verifies but drops nothing.
	skipEvict bool
	// onHint is a test hook called as each hint is dispatched.
	onHint func(*runState, *formats.Hint)
	// beforeRun is a test hook called before each run's eviction.
	beforeRun func(spec string, round int)
	// duringRun is a test hook called once every worker is ready, as the
	// replay clock starts.
	duringRun func(spec string)
}

// Effect modes, Options.Effect.
const (
	EffectSeparate = "separate"
	EffectInline   = "inline"
	EffectOff      = "off"
)

// Run is the result of one replay run.
type Run struct {
	Policy  string `json:"policy"`
	Round   int    `json:"round"`
	Backend string `json:"backend"`
	// CountsOnly marks the run made, with the effect observer, only for
	// the counts by effect (Options.Effect separate): its times are left
	// out of the summary.
	CountsOnly bool `json:"counts_only,omitempty"`
	// Cold is true when the run started with every file verified uncached
	// (kernel and none backends), or with an empty user-space cache
	// (direct).
	Cold     bool    `json:"cold"`
	WallNS   int64   `json:"wall_ns"`
	StallNS  int64   `json:"stall_ns"`
	Accesses int     `json:"accesses"`
	Pages    uint64  `json:"pages"`
	P50US    float64 `json:"p50_us"`
	P99US    float64 `json:"p99_us"`
	MaxUS    float64 `json:"max_us"`

	// Counts are the prefetched pages by effect (package effect): used in
	// time, late, wasted. The page-cache backends observe the kernel's
	// page cache with eBPF; the direct backend's cache counts them
	// itself. EffectNote says why they are missing, when they are.
	effect.Counts
	EffectNote string `json:"effect_note,omitempty"`
	// DemandMisses counts demand pages read from the device (direct),
	// DemandHits those found in the cache, DemandWaits those found being
	// read by another worker's demand (a prefetch found in flight counts
	// as pages_late).
	DemandMisses uint64 `json:"demand_misses,omitempty"`
	DemandHits   uint64 `json:"demand_hits,omitempty"`
	DemandWaits  uint64 `json:"demand_waits,omitempty"`
	// DevicePages counts pages the direct backend read with O_DIRECT,
	// demand and prefetch.
	DevicePages uint64 `json:"device_pages,omitempty"`
	// PagesDropped counts pages of requests the backend dropped because a
	// bound was hit (Counters.Dropped counts the requests).
	PagesDropped uint64 `json:"pages_dropped"`
	// DeviceReadBytes is the process's storage reads during the run
	// (read_bytes of /proc/self/io): demand, kernel readahead and
	// prefetch together.
	DeviceReadBytes uint64 `json:"device_read_bytes"`

	// BackendBusyNS is the time the kernel or kmod backend spent on
	// requests, BackendAcquireNS the part opening files and re-checking
	// their paths, BackendAcquires how many times, and BackendOpenNS the
	// part of it opening files, BackendOpens of them (backend.Report); the
	// predicted column's model reports its own as backend_busy_ns and
	// backend_open_ns.
	BackendBusyNS    uint64 `json:"backend_busy_ns,omitempty"`
	BackendAcquireNS uint64 `json:"backend_acquire_ns,omitempty"`
	BackendAcquires  uint64 `json:"backend_acquires,omitempty"`
	BackendOpenNS    uint64 `json:"backend_open_ns,omitempty"`
	BackendOpens     uint64 `json:"backend_opens,omitempty"`
	// BackendAdviseNS is the kernel backend's time from submitting its
	// io_uring FADVISEs to reaping them, over BackendAdvised of them.
	BackendAdviseNS uint64 `json:"backend_advise_ns,omitempty"`
	BackendAdvised  uint64 `json:"backend_advised,omitempty"`
	// BackendPipelineNS is the time from each FADVISE's request to its
	// completion, summed over BackendAdvised (backend.Report.PipelineNS):
	// what the predicted column's advise delay stands for.
	BackendPipelineNS uint64 `json:"backend_pipeline_ns,omitempty"`
	// Via says how the backend executed prefetches.
	Via      string                `json:"prefetch_via,omitempty"`
	Counters policies.BackendStats `json:"counters"`
	Events   uint64                `json:"events_dispatched"`
	Hints    int                   `json:"hints_delivered"`
	Warnings []string              `json:"warnings,omitempty"`
	// Residue is what stayed cached after eviction, when anything did.
	Residue *Residue `json:"residue,omitempty"`
	// Metadata counts the metadata operations, for bundles that have them.
	Metadata *Metadata `json:"metadata,omitempty"`
	// Fidelity compares, per kind of operation, the recorded service and
	// think times with the run's.
	Fidelity []KindFidelity `json:"fidelity,omitempty"`

	lat []int64 // per-access latency, ns, sorted
}

// Latencies returns the run's per-access latencies in nanoseconds, sorted.
func (r *Run) Latencies() []int64 { return r.lat }

// demander executes the demand accesses of one run: through the page
// cache, or through the direct backend's user-space cache.
type demander interface {
	demand(w *worker, o *op) error
}

// Replayer replays one bundle.
type Replayer struct {
	t     *trace
	opt   Options
	paths []string
	fut   *policies.Future

	obs *effect.Observer // during Replay, for the page-cache backends
	// counting is set during countRuns' runs.
	counting bool
	obsErr   string // why obs is nil

	// Metadata operations (metadata.go): per file index, the path it is
	// looked up at, its directory's index (-1: none) and its name there.
	mpath, mbase []string
	mparent      []int32

	demanded      map[uint32]set // per file index, the pages the replay demands
	demandedPages uint64
	residue       *Residue // the first cold run's, during Replay
}

// New loads the bundle in dir and checks its files.
func New(dir string, opt Options) (*Replayer, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	t, err := loadTrace(dir, opt.Untraced)
	if err != nil {
		return nil, err
	}
	if opt.Untraced && t.tracerNS == 0 {
		return nil, fmt.Errorf("replay %s: --untraced: the bundle has no recorder cost to take out (tracer_ns and tracer_calls, format 1.2, written by predictio record since 2026-12-06); replay it without --untraced", dir)
	}
	return newReplayer(t, opt)
}

func (opt *Options) validate() error {
	if opt.Backend == "" {
		opt.Backend = BackendKernel
	}
	switch opt.Backend {
	case BackendKernel, BackendKmod, BackendDirect, BackendNone:
	default:
		return fmt.Errorf("replay: unknown backend %q; use kernel, kmod, direct or none", opt.Backend)
	}
	if opt.Backend == BackendKmod {
		if err := backend.KmodAvailable(); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	if opt.Timing == "" {
		opt.Timing = TimingRecorded
	}
	if opt.Timing != TimingRecorded && opt.Timing != TimingASAP {
		return fmt.Errorf("replay: unknown timing %q; use recorded or asap", opt.Timing)
	}
	if opt.Speed == 0 {
		opt.Speed = 1
	}
	if opt.Speed < 0 || math.IsNaN(opt.Speed) || math.IsInf(opt.Speed, 0) {
		return fmt.Errorf("replay: speed %v must be a positive number", opt.Speed)
	}
	if opt.Repeat <= 0 {
		opt.Repeat = 1
	}
	if opt.MaxResidue == 0 {
		opt.MaxResidue = DefaultMaxResidue
	}
	if opt.MaxResidue < 0 || opt.MaxResidue > 1 || math.IsNaN(opt.MaxResidue) {
		return fmt.Errorf("replay: max residue %v must be a share of the demanded pages in (0, 1]", opt.MaxResidue)
	}
	if len(opt.Runs) == 0 {
		opt.Runs = []string{Baseline}
	}
	switch opt.Effect {
	case "":
		opt.Effect = EffectSeparate
	case EffectSeparate, EffectInline, EffectOff:
	default:
		return fmt.Errorf("replay: effect %q: use separate, inline or off", opt.Effect)
	}
	return nil
}

func newReplayer(t *trace, opt Options) (*Replayer, error) {
	paths, err := checkFiles(t, opt.Root, opt.AllowChanged)
	if err != nil {
		return nil, err
	}
	if opt.Backend == BackendDirect {
		for _, f := range t.used() {
			if err := checkDirectFS(paths[f.idx]); err != nil {
				return nil, err
			}
		}
	}
	r := &Replayer{t: t, opt: opt, paths: paths}
	r.metaPaths()
	// Build every policy once up front so that a bad spec fails before
	// the first run.
	for _, spec := range opt.Runs {
		if _, err := r.buildPolicies(spec, nil); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Accesses returns the number of demand accesses a run replays.
func (r *Replayer) Accesses() int { return r.t.ops }

// Skipped returns accesses that are not replayed: non-demand kinds, unknown
// file ids, and pages past the recorded end of file.
func (r *Replayer) Skipped() (kinds, unknownFile, pastEOFPages uint64) {
	return r.t.skipped, r.t.unknown, r.t.clipped
}

// SplitRuns splits a comma-separated list of run specs. Commas inside one
// policy's parameters ("baseline,markov:depth=4,threshold=0.2") stay with it:
// an element with "=" but no ":" continues the previous spec.
func SplitRuns(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if len(out) > 0 && strings.Contains(part, "=") && !strings.Contains(part, ":") {
			out[len(out)-1] += "," + part
			continue
		}
		out = append(out, part)
	}
	return out
}

// policyEnv describes the trace's files to policies.
func (r *Replayer) policyEnv() policies.Env {
	ps := r.t.pageSize
	return policies.Env{
		PageSize: ps,
		FilePages: func(id uint32) uint64 {
			if fi := r.t.byID[id]; fi != nil {
				return fi.pages(ps)
			}
			return 0
		},
		FileKey: func(id uint32) (policies.FileKey, bool) {
			fi := r.t.byID[id]
			if fi == nil {
				return policies.FileKey{}, false
			}
			return policies.KeyOf(&fi.File), true
		},
		Markov:     r.opt.Markov,
		LaunchFile: policies.BundleLaunchFiles(r.bundleFiles()),
	}
}

// bundleFiles returns the bundle's file rows.
func (r *Replayer) bundleFiles() []formats.File {
	out := make([]formats.File, len(r.t.files))
	for i, f := range r.t.files {
		out[i] = f.File
	}
	return out
}

// buildPolicies builds the policies of a run spec; baseline has none.
func (r *Replayer) buildPolicies(spec string, files []*openFile) ([]policies.Policy, error) {
	if spec == Baseline || spec == "" {
		return nil, nil
	}
	env := r.policyEnv()
	var out []policies.Policy
	for _, one := range strings.Split(spec, "+") {
		name, _, _ := strings.Cut(one, ":")
		if name == "oracle" {
			if r.fut == nil {
				r.fut = r.t.future()
			}
			env.Future = r.fut
		}
		p, err := policies.Build(one, env)
		if err != nil {
			return nil, fmt.Errorf("replay run %q: %w", spec, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Replay runs every run spec Repeat times, alternating (A B A B ...).
func (r *Replayer) Replay(ctx context.Context) (*Report, error) {
	rep := &Report{Bundle: r.t.dir, Backend: r.opt.Backend, Timing: r.opt.Timing, Speed: r.opt.Speed,
		Accesses: r.t.ops, Pages: r.t.pages, Threads: len(r.t.threads), Hints: len(r.t.hints),
		SkippedKinds: r.t.skipped, UnknownFileRows: r.t.unknown, UnknownFileHints: r.t.hintSkip, PagesPastEOF: r.t.clipped,
		ExecRows: r.t.execs, MetadataOps: r.t.metaOps, ServiceTimes: r.t.serviceTimes}
	defer r.stopObserver()
	// Room for every file's descriptor and those the workers keep
	// (metaFDs each), beside the backends' and the observer's.
	if err := growFDTable(len(r.t.files) + metaFDs*len(r.t.threads) + 256); err != nil {
		return nil, err
	}
	r.residue = nil
	for round := 0; round < r.opt.Repeat; round++ {
		for _, spec := range r.opt.Runs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			run, err := r.runOnce(ctx, spec, round)
			if err != nil {
				return nil, fmt.Errorf("replay run %q (round %d): %w", spec, round+1, err)
			}
			rep.Runs = append(rep.Runs, run)
		}
	}
	if err := r.countRuns(ctx, rep); err != nil {
		return nil, err
	}
	rep.summarize(r.opt.Runs)
	rep.timing(r.t, &r.opt)
	return rep, nil
}
