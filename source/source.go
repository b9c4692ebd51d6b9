package source

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/predictio/predictio/formats"
)

// Latency selects how events reach the consumer.
type Latency int

const (
	// Batched wakes the reader once 256 KiB of events are pending (a
	// quarter of the ring if smaller) or every 20 ms, and hands batches of
	// up to 4096 events to the consumer on a goroutine of its own, so a slow
	// consumer (a compressing bundle writer) never stalls the ring reader.
	// For recording: it costs the traced program almost nothing.
	Batched Latency = iota
	// LowLatency has the kernel wake the reader with the first event the
	// reader has not consumed yet, and hands what is pending to the
	// consumer at once, on the reader's goroutine. For live prefetching:
	// a traced program pays a reader wakeup per event whenever the reader
	// keeps up with it (docs/source.md).
	LowLatency
)

// ExecMode says which execs become events (formats kind 12, "exec").
type ExecMode int

const (
	ExecNone    ExecMode = iota // no exec events
	ExecTargets                 // execs of targets (and of files named by AddExecTarget)
	ExecAll                     // execs of every task: the system-wide view of a daemon
)

// KindExec is the access kind of exec events (formats.KindExec):
// sched_process_exec of a task, FileID the file it now runs (the
// interpreter of a script), NPages 0.
const KindExec = formats.KindExec

// Config says what a Source traces. Targets may be empty at Open and added
// later (AddPID, AddCgroup, AddExecTarget, StartCommand).
type Config struct {
	PIDs    []int    // follow these processes and the children they fork from now on
	Cgroups []string // every task in these cgroup v2 directories and below (at most 4 in all)
	All     bool     // every task except this process
	// Command prepares for StartCommand: a cgroup v2 of the source's own,
	// so that a command and all its descendants are followed from their
	// first instruction (CLONE_INTO_CGROUP), or the pid set where no cgroup
	// can be made.
	Command bool
	// NoCgroup follows a command through the pid set even where a cgroup
	// could be made for it.
	NoCgroup bool
	Exec     ExecMode
	// OnExec, when set, is called with each execve's path (made absolute)
	// as soon as the opens ring delivers it: for every exec with
	// ExecAll, before the exec event, whatever the Latency (the opens
	// ring wakes its reader for every record). For a target it may come
	// twice, from its system call and from the exec itself (and for a
	// failed execve, once). It runs on the opens reader: it must not
	// block, nor wait for the consumer.
	OnExec func(pid uint32, ts uint64, path string)

	Include []string // keep only files under these absolute path prefixes
	Exclude []string // drop files under these prefixes (besides /proc, /sys and /dev)
	Comm    []string // keep only tasks with these names (comm, 15 bytes max)
	MinSize uint64   // keep only files of at least this many bytes

	HintSocket string   // receive hints on this Unix datagram socket; "" for none
	HintUIDs   []uint32 // uids besides this process's own (and root) allowed to send hints

	RingBytes int // events ring buffer size, a power of two of at least 4096; 0 for 16 MiB
	Latency   Latency

	// BTFCacheDir caches the kernel types the programs need (see
	// btfcache.go); "" is DefaultBTFCacheDir. NoBTFCache decodes the whole
	// kernel BTF at every start instead.
	BTFCacheDir string
	NoBTFCache  bool

	// Poll is how often a Batched source's readers look at the rings
	// while fewer than the wakeup threshold of events are pending; 0
	// means 20 ms. A short poll (1 ms) bounds how late events reach the
	// consumer at one reader wakeup per Poll whatever the event rate,
	// where LowLatency costs the traced program a wakeup per event when
	// events come sparsely (a cold scan's reads, each waiting on the
	// device). At least 100 µs.
	Poll time.Duration

	bench  *benchSource // benchmark-only event source
	object string       // benchmark hook: load the programs from this ELF file instead of bpf's
}

// Stats are a Source's counters so far.
type Stats struct {
	Events         uint64 // accesses delivered to the consumer
	Dropped        uint64 // events lost because the ring buffer was full
	Discarded      uint64 // events read but not delivered (after Discard or a consumer error)
	Filtered       uint64 // events dropped by filters in the kernel or in user space
	KernelFiltered uint64 // the part of Filtered dropped in the kernel
	OpenDropped    uint64 // open events lost (paths may stay unresolved)
	Hints          uint64 // hints delivered
	HintRejects    HintRejects
	HintDrops      HintDrops     // hints the senders dropped, from their drop reports
	Files          int           // file ids assigned
	ReaderCPU      time.Duration // CPU time of the ring reader's thread (after Stop)
	DecoderCPU     time.Duration // CPU time of the decoder's thread (after Stop; Batched only)
	HintCPU        time.Duration // CPU time of the hint server's thread (after Stop)
}

// Source is one attached set of programs and its readers.
type Source struct {
	cfg    Config
	coll   *ebpf.Collection
	loaded *loadPlan
	links  []attached
	files  *fileTable

	events    *ring
	opens     *ring
	opensMark atomic.Uint64 // all open events submitted before this monotonic time are processed
	flushAt   atomic.Uint64 // when flushOpens last asked the opens reader to catch up
	paused    atomic.Bool   // Pause: the access programs are detached
	movedMu   sync.Mutex
	moved     chan struct{} // closed when opensMark moves (markOpens)
	rpmu      sync.Mutex
	rowPaths  map[uint64]rowPath // paths of metadata rows, by op
	execs     execPaths

	startup []Phase  // Open's stages
	sources []string // attached, as the manifest lists them
	missing []string // access kinds this kernel lacks
	notes   []string
	btf     btfSource

	tmu      sync.Mutex // guards the target state below
	closed   bool       // Close has begun: no more target changes
	flags    uint32     // target_flags
	cgSlots  [maxCgroups]int
	cgPaths  [maxCgroups]string
	ownCg    string // the cgroup made for StartCommand; "" when following by pid
	ownCgFD  int
	execKeys int    // entries in exec_targets
	gen      uint32 // target_gen

	dmu      sync.Mutex // serializes deliveries
	consumer Consumer
	batch    Batch // the batch being delivered (reused)
	err      atomic.Pointer[error]
	failed   chan struct{}
	discard  atomic.Bool
	stopping atomic.Bool

	delivered atomic.Uint64
	discarded atomic.Uint64
	filtered  atomic.Uint64 // user-space filtered
	readCPU   atomic.Uint64
	decodeCPU atomic.Uint64

	hints  *hintServer
	tick   chan struct{} // closed to stop pollTicks (Batched)
	pauses chan struct{} // Pause, Resume and SetPoll tell pollTicks
	poll   atomic.Int64  // the Batched poll (Config.Poll, SetPoll), ns; 0: defaultPoll
	wg     sync.WaitGroup
	state  int // 0 opened, 1 started, 2 stopped, 3 closed
}

// Target flag bits (record.bpf.c).
const (
	targetAll     = 1
	targetPIDs    = 2
	targetCgroups = 4
	maxCgroups    = 4
)

// ErrStopped is returned by calls that need a running Source.
var ErrStopped = errors.New("source stopped")

func (c *Config) validate() error {
	for _, p := range c.PIDs {
		if p <= 0 {
			return fmt.Errorf("check pid %d: not a process id", p)
		}
	}
	if len(c.Cgroups) > maxCgroups || (c.Command && len(c.Cgroups) == maxCgroups) {
		return fmt.Errorf("check cgroups: at most %d in all (a command takes one)", maxCgroups)
	}
	for _, c := range c.Comm {
		if len(c) == 0 || len(c) > 15 {
			return fmt.Errorf("check comm %q: must be 1 to 15 bytes (the kernel's task name length)", c)
		}
	}
	for _, p := range append(append([]string{}, c.Include...), c.Exclude...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("check path prefix %q: must be absolute", p)
		}
	}
	if c.RingBytes != 0 && (c.RingBytes < 4096 || c.RingBytes&(c.RingBytes-1) != 0) {
		return fmt.Errorf("check ring size %d: must be a power of two of at least 4096", c.RingBytes)
	}
	if c.Latency != Batched && c.Latency != LowLatency {
		return fmt.Errorf("check latency mode %d: not Batched or LowLatency", c.Latency)
	}
	return nil
}

// Open checks privileges, loads and attaches the programs and sets up the
// initial targets. Events are queued in the ring from then on; Start hands
// them to a consumer.
func Open(cfg Config) (*Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, failed: make(chan struct{}), ownCgFD: -1, rowPaths: make(map[uint64]rowPath), gen: 1,
		pauses: make(chan struct{}, 1)}
	s.poll.Store(int64(cfg.Poll))
	for i := range s.cgSlots {
		s.cgSlots[i] = -1
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	cg2 := ""
	if cfg.Command && !cfg.NoCgroup {
		cg2 = cgroup2Mount()
	}
	var plan *loadPlan
	stages := []struct {
		name string
		run  func() error
	}{
		{"privileges", func() error {
			if err := checkPrivileges(tracefsEvents() == "" || cg2 != ""); err != nil {
				return err
			}
			return mountTracefs()
		}},
		{"cgroup", func() error { s.makeCommandCgroup(cg2); return nil }},
		{"probe", func() (err error) { plan, err = s.plan(tracefsEvents()); return err }},
		{"btf", func() error { return s.kernelTypes(plan) }},
		{"load", func() error { return s.load(plan) }},
		{"targets", func() error {
			if err := s.initTargets(); err != nil {
				return err
			}
			s.files = newFileTable(s.filter(), s.coll.Maps["files"], cwd())
			s.files.denyActive = s.coll.Variables["deny_active"]
			return nil
		}},
		{"rings", s.openRings},
		{"attach", func() error { return s.attach(plan) }},
	}
	for _, st := range stages {
		t := time.Now()
		if err := st.run(); err != nil {
			return nil, err
		}
		s.startup = append(s.startup, Phase{Name: st.name, Wall: time.Since(t)})
	}
	ok = true
	return s, nil
}

// Start hands events, hints and new files to c from now on, until Stop.
// c is called from one goroutine at a time.
func (s *Source) Start(c Consumer) error {
	if s.state != 0 {
		return fmt.Errorf("start source: %w", ErrStopped)
	}
	s.state = 1
	s.consumer = c
	if s.cfg.HintSocket != "" {
		h, err := newHintServer(s.cfg.HintSocket, s, s.cfg.HintUIDs)
		if err != nil {
			return err
		}
		s.hints = h
	}
	p := newPipeline(s)
	s.wg.Add(2)
	go func() { defer s.wg.Done(); p.read() }()
	go func() { defer s.wg.Done(); s.readOpens() }()
	if s.cfg.Latency == Batched {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); p.decode() }()
	}
	if s.cfg.Latency == Batched {
		// In wg too: Close must not close the rings under a tick.
		s.tick = make(chan struct{})
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.pollTicks(s.tick) }()
	}
	if s.cfg.bench != nil {
		if err := s.cfg.bench.attach(s); err != nil {
			return err
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.cfg.bench.run() }()
	}
	if s.hints != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.hints.serve() }()
	}
	return nil
}

// Discard stops delivering: events read from now on are counted as
// discarded. Use it to finish at once when the consumer cannot keep up.
func (s *Source) Discard() { s.discard.Store(true) }

// Failed is closed when the consumer has returned an error; Err returns it.
// The source then discards what it reads until Stop.
func (s *Source) Failed() <-chan struct{} { return s.failed }

// Err returns the consumer's first error, or nil.
func (s *Source) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Source) fail(err error) {
	e := err
	if s.err.CompareAndSwap(nil, &e) {
		close(s.failed)
	}
}

// Stop ends tracing: the programs stop emitting at once, both rings are
// drained, and every event read so far is delivered before Stop returns
// (unless Discard was called or the consumer failed). It is idempotent.
func (s *Source) Stop() {
	if s.state != 1 {
		if s.state == 0 {
			s.state = 2
			s.setStopped()
		}
		return
	}
	s.state = 2
	s.setStopped()
	if s.cfg.bench != nil {
		s.cfg.bench.detach()
	}
	s.stopping.Store(true)
	if s.tick != nil {
		close(s.tick)
	}
	s.events.Flush()
	s.opens.Flush()
	if s.hints != nil {
		s.hints.stop()
	}
	s.wg.Wait()
}

// setStopped sets the programs' stopped flag, so they stop emitting before
// the (slower) detach; where that fails, it detaches.
func (s *Source) setStopped() {
	if s.coll == nil {
		return
	}
	if v := s.coll.Variables["stopped"]; v == nil || v.Set(uint32(1)) != nil {
		s.detach()
	}
}

// Close stops (if running), detaches the programs and releases everything.
// Target changes (AddPID, ...) may run concurrently with it and fail with
// ErrStopped; other calls must not.
func (s *Source) Close() error {
	if s.state == 3 {
		return nil
	}
	s.Stop()
	s.state = 3
	s.tmu.Lock()
	s.closed = true
	s.tmu.Unlock()
	s.detach()
	if s.hints != nil {
		s.hints.close()
	}
	if s.events != nil {
		s.events.Close()
	}
	if s.opens != nil {
		s.opens.Close()
	}
	if s.coll != nil {
		s.coll.Close()
	}
	s.closeTargets()
	return nil
}

// detach closes the links concurrently. Raw tracepoint links detach in
// microseconds; the kprobe fallbacks' perf events wait for RCU grace
// periods, which overlap when closed concurrently.
func (s *Source) detach() {
	var wg sync.WaitGroup
	for _, a := range s.links {
		if a.link == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.link.Close() }()
	}
	wg.Wait()
	s.links = nil
}

// Phase is one stage of Open and how long it took.
type Phase struct {
	Name string // privileges, cgroup, probe, btf, load, targets, rings, attach
	Wall time.Duration
}

// Startup returns how long each stage of Open took.
func (s *Source) Startup() []Phase { return s.startup }

// Sources names the attached tracepoints and kprobes, as the manifest's
// recording.event_sources lists them.
func (s *Source) Sources() []string { return s.sources }

// Missing names the access kinds this kernel has no source for, with the
// kernel each needs.
func (s *Source) Missing() []string { return s.missing }

// Notes are remarks for a manifest (how a command is followed, ...).
func (s *Source) Notes() []string { return s.notes }

// Stats returns the counters so far.
func (s *Source) Stats() Stats {
	c := s.counters()
	st := Stats{
		Events: s.delivered.Load(), Dropped: c[cntDrops], Discarded: s.discarded.Load(),
		Filtered: c[cntFiltered] + s.filtered.Load(), KernelFiltered: c[cntFiltered],
		OpenDropped: c[cntOpenDrops], ReaderCPU: time.Duration(s.readCPU.Load()),
		DecoderCPU: time.Duration(s.decodeCPU.Load()),
	}
	if s.files != nil {
		st.Files = s.files.count()
	}
	if s.hints != nil {
		st.Hints = s.hints.accepted.Load()
		st.HintRejects = s.hints.rejects()
		st.HintDrops = s.hints.drops()
		st.HintCPU = time.Duration(s.hints.cpu.Load())
	}
	return st
}

// Files returns a files.arrow row for every file id assigned so far, each
// stat'ed now under its path (size and mtime when the file still exists
// with the same device and inode), and how many have no path.
func (s *Source) Files() (rows []formats.File, unresolved int) { return s.files.files() }

// File returns the current row of file id: the best path known and the
// size, mtime and mode seen when the file was first resolved.
func (s *Source) File(id uint32) (formats.File, bool) { return s.files.row(id) }

// FileNow returns the row of file id with its best path, stat'ed now
// (size, mtime and mode when the file still exists there with the same
// device and inode). A bundle writer's file resolver.
func (s *Source) FileNow(id uint32) (formats.File, bool) { return s.files.rowNow(id) }

// Counter slots (record.h).
const (
	cntDrops     = 0
	cntEvents    = 1
	cntOpenDrops = 2
	cntFiltered  = 3
)

// counters sums the per-CPU counters.
func (s *Source) counters() [4]uint64 {
	var out [4]uint64
	if s.coll == nil {
		return out
	}
	m := s.coll.Maps["counters"]
	var vals []uint64
	for i := range out {
		if m.Lookup(uint32(i), &vals) == nil {
			for _, v := range vals {
				out[i] += v
			}
		}
	}
	return out
}

// MonotonicNow returns CLOCK_MONOTONIC in nanoseconds, the clock of every
// event and hint timestamp.
func MonotonicNow() uint64 { return monoNow() }
