// Package live is predictio's live runtime: the loop that takes the event
// source's batches (package source) through an optional structure stage
// (the adapters) to the policies' dispatcher, and their requests to a
// prefetch backend (package backend) while the program runs. `predictio
// run` (Run) and the daemon (package daemon) share it; with -o, record's
// bundle writer stage sees the same batches.
//
//	source ──batches──▶ Loop.Consume ──events──▶ [Stage] ──▶ Dispatcher ──requests──▶ Loop.submit
//	                                                                                   │ Meta: metadata workers (open, readdir) then
//	                                                                                   ▼
//	                                                                             backend.Submit
//
// The loop registers each file with the backend's Registry the first time
// a request names it (by device, inode and path: the backend re-checks
// them before every prefetch), and names the files of launch profiles
// itself (LaunchFile): a profile's file is prefetched only if it is
// unchanged since it was learned and the process the launch is for may
// read it.
package live

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// Stage sits between the source and the dispatcher: it sees every event
// and dispatches it, and the events it derives, to d. *adapters.Stage is
// one.
type Stage interface {
	Dispatch(d *policies.Dispatcher, ev *policies.Event, emit policies.Emit)
}

// Config configures a Loop.
type Config struct {
	// Policies are the policy specs run together (policies.Build); none
	// is allowed (the loop then only observes: the noop run).
	Policies []string
	// Markov is the markov policy's model; Launch the launch policy's
	// profiles.
	Markov *policies.MarkovModel
	Launch *policies.LaunchModel
	// Backend is the prefetch backend: kernel (default), kmod or none.
	Backend string
	// BackendOptions bound the backend's queue and in-flight pages; zero
	// fields get live defaults (65536 ranges, 262144 pages).
	BackendOptions backend.Options
	// MaxPages bounds the pages of one request; 0 means the policies'
	// default (256).
	MaxPages uint32
	// MetaWorkers open files and read directories for requests with
	// Meta, in parallel; 0 means 8. MetaQueue bounds the files waiting
	// for them; 0 means 16384 (more are dropped and counted).
	MetaWorkers, MetaQueue int
	// Access checks that the process a launch is for may read a file (and
	// list a directory) before they are prefetched on its behalf; nil
	// checks nothing beyond this process's own permissions (run, whose
	// command runs as its caller).
	Access *source.AccessChecker
	// Stage is the structure stage in front of the dispatcher; nil for
	// none.
	Stage Stage
	// Tap, when set, sees every event of the source before it is
	// dispatched (the daemon's and run's launch recorders); not the
	// ProcessExec events of Exec.
	Tap func(ev *policies.Event)
	// Effect, when set, counts what the prefetched pages were worth: the
	// loop watches every file it registers, and makes every process its
	// events come from a demand process (ForgetPID undoes that).
	Effect *effect.Observer
	// Warn receives warnings (a policy's, a refused file's); nil drops
	// them.
	Warn func(msg string)
}

// profileBase is the first file id the loop gives profile files; the
// source's ids are below it.
const profileBase = 1 << 30

// Loop runs policies on live events. Consume (the source's consumer) and
// Exec are called from one goroutine at a time; Stats may be called from
// any.
type Loop struct {
	cfg  Config
	src  *source.Source // nil: no tracing (fail open)
	reg  *backend.Registry
	be   backend.Backend
	disp *policies.Dispatcher
	pols []*counted
	meta *launchWorkers
	job  launchJob // the profile file whose requests are being emitted
	ev   policies.Event
	xev  policies.Event // Exec's
	emit policies.Emit

	pmu      sync.Mutex
	prof     map[uint32]*profFile
	profByID map[profKey]uint32
	nextProf uint32
	creds    credCache
	invalid  []policies.LaunchFile // profile files found changed, for the learner

	regFailed    map[uint32]struct{} // source ids whose file has no path yet (retried per batch)
	stats        counters
	unregistered atomic.Uint64

	// Effect accounting: who first named each watched file, and the
	// demand processes.
	cur      *counted // the policy whose request is being submitted
	program  string   // the program of the Exec being dispatched
	execReqs int      // requests submitted during the Exec being dispatched
	emu      sync.Mutex
	owners   map[uint32]owner
	demand   map[uint32]struct{}
	lastPID  uint32
	watchErr atomic.Uint64
}

// owner is who a watched file's effect counts are reported for.
type owner struct {
	policy  *counted
	program string
}

// profFile is a launch profile's file as the loop named it.
type profFile struct {
	f     policies.LaunchFile
	path  string       // the path opened: f.Path, or under /proc/PID/root for another mount namespace
	cred  *source.Cred // the process it was last named for; nil: this process
	kinds uint32       // what the launches did with it (policies.LaunchTouch.Kinds)
}

type profKey struct {
	path     string // as opened
	dev, ino uint64
}

// New builds the loop's policies and backend. src may be nil: the loop
// then runs only what needs no events (a launch prefetch from Exec).
func New(cfg Config, src *source.Source) (*Loop, error) {
	if cfg.Backend == "" {
		cfg.Backend = backend.NameKernel
	}
	o := cfg.BackendOptions
	if o.Queue == 0 {
		o.Queue = 65536
	}
	if o.InFlight == 0 {
		o.InFlight = 262144
	}
	l := &Loop{cfg: cfg, src: src, reg: backend.NewRegistry(), prof: map[uint32]*profFile{},
		profByID: map[profKey]uint32{}, nextProf: profileBase, regFailed: map[uint32]struct{}{},
		owners: map[uint32]owner{}, demand: map[uint32]struct{}{}}
	if err := l.build(cfg.Policies); err != nil {
		return nil, err
	}
	be, err := backend.New(cfg.Backend, l.reg, o)
	if err != nil {
		return nil, err
	}
	l.be = be
	l.meta = newLaunchWorkers(l, cfg.MetaWorkers, cfg.MetaQueue)
	l.emit = l.submit
	return l, nil
}

// build adds the policies of specs and remakes the dispatcher.
func (l *Loop) build(specs []string) error {
	env := l.env()
	for _, spec := range specs {
		p, err := policies.Build(spec, env)
		if err != nil {
			return err
		}
		c := &counted{Policy: p, name: policies.SpecName(spec), spec: spec, loop: l}
		c.out = c.emitOne
		l.pols = append(l.pols, c)
	}
	ps := make([]policies.Policy, len(l.pols))
	for i, c := range l.pols {
		ps[i] = c
	}
	l.disp = policies.NewDispatcher(ps...)
	return nil
}

// AddPolicies builds more policies (with markov as their model when not
// nil) and adds them after the loop's. Call it before the source starts
// delivering: run fires the launch prefetch first and adds markov, whose
// model takes longer to build, once the source is open.
func (l *Loop) AddPolicies(specs []string, markov *policies.MarkovModel) error {
	if markov != nil {
		l.cfg.Markov = markov
	}
	return l.build(specs)
}

// Attach gives the loop its source once it is open, before it starts
// delivering.
func (l *Loop) Attach(src *source.Source) { l.src = src }

// SetStage puts st in front of the dispatcher (before the source starts
// delivering): the adapters, whose Files come from the loop
// (AdapterFiles).
func (l *Loop) SetStage(st Stage) { l.cfg.Stage = st }

// env is what the loop's policies know.
func (l *Loop) env() policies.Env {
	return policies.Env{
		MaxPages:   l.cfg.MaxPages,
		FilePages:  l.filePages,
		FileKey:    l.fileKey,
		Markov:     l.cfg.Markov,
		Launch:     l.cfg.Launch,
		LaunchFile: l.LaunchFile,
		Warn:       l.warn,
	}
}

func (l *Loop) warn(msg string) {
	if l.cfg.Warn != nil {
		l.cfg.Warn(msg)
	}
}

// Registry is the backend's file registry.
func (l *Loop) Registry() *backend.Registry { return l.reg }

// Backend is the loop's backend.
func (l *Loop) Backend() backend.Backend { return l.be }

// Consume dispatches a batch of the source: accesses as FileAccess
// events, hints as their events. Exec rows become ProcessExec events for
// Tap only: which exec starts a launch (and whose profile it prefetches)
// is the caller's to say, with Exec.
func (l *Loop) Consume(b *source.Batch) error {
	for i := range b.Accesses {
		a := &b.Accesses[i]
		if a.PID != l.lastPID && l.cfg.Effect != nil && a.Kind != formats.KindExec {
			// (An exec row may be any task's: the daemon sees them all.)
			l.addDemand(a.PID)
		}
		l.ev.FromAccess(a)
		if l.cfg.Tap != nil {
			l.cfg.Tap(&l.ev)
		}
		if a.Kind == formats.KindExec {
			continue
		}
		l.dispatch(&l.ev)
	}
	for i := range b.Hints {
		if l.ev.FromHint(&b.Hints[i]) {
			if l.cfg.Tap != nil {
				l.cfg.Tap(&l.ev)
			}
			l.dispatch(&l.ev)
		}
	}
	l.stats.batches.Add(1)
	return nil
}

// Exec dispatches a ProcessExec event: process pid (0: this process, for
// a command not started yet) runs program path, the kernel's file being
// source file id file (0 when unknown).
//
// It reports whether the policies requested anything for it; only then is
// pid made a demand process of the effect observer (whose read hooks cost
// a demand process's every read), before any requested page is read.
func (l *Loop) Exec(pid uint32, path string, file uint32, ts uint64) bool {
	// An event of its own: the daemon calls Exec from Tap, in Consume.
	l.xev = policies.Event{Kind: policies.EventProcessExec, TS: ts, PID: pid, File: file, Exec: policies.ProcessExec{Path: path}}
	l.program = path
	l.execReqs = 0
	l.dispatch(&l.xev)
	l.program = ""
	if l.execReqs == 0 {
		return false
	}
	if pid != 0 && l.cfg.Effect != nil {
		l.addDemand(pid)
	}
	return true
}

func (l *Loop) dispatch(ev *policies.Event) {
	l.stats.events.Add(1)
	if l.cfg.Stage != nil {
		l.cfg.Stage.Dispatch(l.disp, ev, l.emit)
	} else {
		l.disp.Dispatch(ev, l.emit)
	}
	l.meta.flush(&l.job)
}

// submit hands a policy's request to the backend, registering its file
// first; requests for the files of launch profiles go through the launch
// workers, which check them first.
func (l *Loop) submit(req *policies.Request) {
	l.stats.requests.Add(1)
	l.execReqs++
	if req.File >= profileBase {
		if !l.meta.add(&l.job, req) {
			l.unregistered.Add(1)
		}
		return
	}
	if req.Meta {
		return // metadata is warmed for launch profiles' files only
	}
	if l.reg.Lookup(req.File) == nil && !l.register(req.File) {
		l.unregistered.Add(1)
		return
	}
	if len(req.Ranges) > 0 {
		_ = l.be.Submit(req) // a closed backend: the run is over
	}
}

// register adds a source file to the registry under its source id.
func (l *Loop) register(id uint32) bool {
	if id >= profileBase || l.src == nil {
		return false
	}
	if _, failed := l.regFailed[id]; failed {
		return false
	}
	f, ok := l.src.File(id)
	if !ok || f.Ino == 0 || f.Path == "" {
		return false // no path yet: try again at the next request
	}
	// The backend opens with O_NOFOLLOW: register the path without
	// symlinks, checked to name the file the program accessed.
	path, ok := source.Canonical("", f.Path, f.Dev, f.Ino)
	if !ok {
		if len(l.regFailed) < 1<<16 {
			l.regFailed[id] = struct{}{}
		}
		return false
	}
	if _, err := l.reg.Add(backend.FileRef{ID: id, Dev: f.Dev, Ino: f.Ino, Path: path}); err != nil {
		return false
	}
	l.watch(id, f.Dev, f.Ino)
	return true
}

// filePages is Env.FilePages.
func (l *Loop) filePages(id uint32) uint64 {
	if id >= profileBase {
		l.pmu.Lock()
		defer l.pmu.Unlock()
		if p := l.prof[id]; p != nil {
			return policies.PagesOf(p.f.Size, 0)
		}
		return 0
	}
	if l.src == nil {
		return 0
	}
	if f, ok := l.src.File(id); ok {
		return policies.PagesOf(f.Size, 0)
	}
	return 0
}

// fileKey is Env.FileKey.
func (l *Loop) fileKey(id uint32) (policies.FileKey, bool) {
	if id >= profileBase {
		l.pmu.Lock()
		defer l.pmu.Unlock()
		if p := l.prof[id]; p != nil {
			return p.f.Key(), true
		}
		return policies.FileKey{}, false
	}
	if l.src == nil {
		return policies.FileKey{}, false
	}
	f, ok := l.src.File(id)
	if !ok || f.Path == "" {
		return policies.FileKey{}, false
	}
	return policies.KeyOf(&f), true
}

// Invalid returns (and forgets) the profile files found changed since the
// last call.
func (l *Loop) Invalid() []policies.LaunchFile {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	out := l.invalid
	l.invalid = nil
	return out
}

// Close waits for the metadata workers and the backend to finish what
// they accepted and returns the backend's report.
func (l *Loop) Close() (backend.Report, error) {
	l.meta.close()
	rep, err := l.be.Close()
	l.reg.Close()
	if err != nil {
		return rep, fmt.Errorf("close backend: %w", err)
	}
	return rep, nil
}

// counted wraps a policy with its counters.
type counted struct {
	policies.Policy
	name, spec string
	events     atomic.Uint64
	requests   atomic.Uint64
	pages      atomic.Uint64
	next       policies.Emit // the loop's, during Handle
	out        policies.Emit // c.emitOne, made once
	loop       *Loop
}

func (c *counted) Handle(ev *policies.Event, emit policies.Emit) {
	c.events.Add(1)
	c.next = emit
	if c.loop != nil {
		c.loop.cur = c // the files it names (LaunchFile) are its
	}
	c.Policy.Handle(ev, c.out)
}

func (c *counted) emitOne(r *policies.Request) {
	c.requests.Add(1)
	var n uint64
	for _, rg := range r.Ranges {
		n += uint64(rg.N)
	}
	c.pages.Add(n)
	if c.loop != nil {
		c.loop.cur = c
	}
	c.next(r)
}

type counters struct {
	events, batches, requests atomic.Uint64
}

// PolicyStats are one policy's counters.
type PolicyStats struct {
	Name, Spec string
	Events     uint64 // events handed to it
	Requests   uint64 // requests it emitted
	Pages      uint64 // pages they named
}

// Stats are the loop's counters.
type Stats struct {
	Events       uint64 // events dispatched
	Batches      uint64 // source batches consumed
	Requests     uint64 // requests emitted by all policies
	Unregistered uint64 // requests dropped: their file could not be registered (no path yet)
	Policies     []PolicyStats
	Backend      policies.BackendStats
	Meta         MetaStats
	ProfileFiles ProfileFileStats
}

// Stats returns the counters so far.
func (l *Loop) Stats() Stats {
	st := Stats{
		Events: l.stats.events.Load(), Batches: l.stats.batches.Load(), Requests: l.stats.requests.Load(),
		Unregistered: l.unregistered.Load(), Meta: l.meta.stats(), ProfileFiles: l.creds.stats(),
	}
	st.Backend = l.be.Stats()
	for _, p := range l.pols {
		st.Policies = append(st.Policies, PolicyStats{Name: p.name, Spec: p.spec, Events: p.events.Load(), Requests: p.requests.Load(), Pages: p.pages.Load()})
	}
	return st
}

// selfPID is this process's pid, as ProcessExec events give it for a
// command not started yet.
var selfPID = uint32(os.Getpid())
