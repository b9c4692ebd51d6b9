// Package record writes what the eBPF event source (package source) sees
// of running programs, plus the hints instrumented programs send, into a
// trace bundle.
//
// Run is four stages, each a function below: open the source (attach the
// programs, prepare the targets), create the bundle, run the target (start
// the command, or wait for the processes, the duration or ctx) while the
// source streams batches into the bundle, and finalize (stop the source,
// write the files table and the manifest). It needs what source.Open
// needs: CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and CAP_SYS_ADMIN to
// mount tracefs or to run a command in its own cgroup.
package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/source"
)

// Config says what to record and where.
type Config struct {
	Output string // bundle directory (must not exist or be empty)

	// Exactly one target: Command, PIDs, Cgroup or All.
	Command []string // run this command and record it and its descendants
	PIDs    []int    // record these processes and the children they fork from now on
	Cgroup  string   // record every process in this cgroup v2 directory and below
	All     bool     // record the whole system (except the recorder)

	Duration time.Duration // stop after this long; 0: until the target ends or ctx is done

	Include []string // record only files under these path prefixes
	Exclude []string // never record files under these path prefixes (added to /proc, /sys, /dev)
	Comm    []string // record only tasks with these command names (15 bytes max)
	MinSize uint64   // record only files of at least this many bytes

	HintSocket string   // Unix datagram socket path to receive hints on; "" for none
	HintUIDs   []uint32 // uids besides the recorder's own (and root) allowed to send hints

	RingBytes int // events ring buffer size; 0 for 16 MiB

	// Adapters are the structure adapters (adapters.ParseList) run on the
	// recorded accesses; the events they derive go into the hints table
	// (source adapter:NAME). nil means every adapter; empty, none.
	Adapters []string

	ToolVersion string // written to the manifest's tool_version

	// Stdin, Stdout, Stderr of the command; nil means the recorder's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// Progress receives a progress line every second; nil for none.
	Progress io.Writer
	// Force, when closed, ends a stopping recording at once: batches not yet
	// written are discarded and the bundle is finalized with what was written.
	Force <-chan struct{}
	// Signal is sent to a command still running when the recording ends
	// (ctx done or Duration passed); default SIGTERM. The recorder waits up
	// to 2 s for it to exit.
	Signal syscall.Signal
	// NoSignal leaves such a command running.
	NoSignal bool

	onStart  func()                                        // test hook: called once tracing runs
	noCgroup bool                                          // test hook: follow a command by pid
	create   func(string, *fileRows) (bundleWriter, error) // test hook; nil: formats.Create
	btfCache string                                        // test hook: BTF cache directory
	killAt   func(point string)                            // test hook: "first-batch", "finalize"
}

// bundleWriter is the part of *formats.Writer the recorder uses.
type bundleWriter interface {
	Append(*formats.Access) error
	AppendHint(*formats.Hint) error
	Flush() error
	Manifest() *formats.Manifest
	Close() error
	Abort() error
}

// HintRejects counts hints the recorder skipped, by reason.
type HintRejects = source.HintRejects

// HintDrops counts the hints senders reported dropping, by cause.
type HintDrops = source.HintDrops

// Summary reports a finished recording.
type Summary struct {
	Bundle         string
	Events         uint64 // accesses written
	Dropped        uint64 // events lost because the ring buffer was full
	Discarded      uint64 // events read but not written after Force
	Filtered       uint64 // events dropped by filters in the kernel or in user space
	KernelFiltered uint64 // the part of Filtered dropped in the kernel
	OpenDropped    uint64 // open events lost (paths may stay unresolved)
	Hints          uint64
	HintRejects    HintRejects
	HintDrops      HintDrops // hints the senders dropped instead of blocking (their drop reports)
	Files          int
	Unresolved     int // files without a path
	Elapsed        time.Duration
	Sources        []string       // attached tracepoints
	Missing        []string       // access tracepoints this kernel lacks
	AdapterHints   uint64         // hints the adapters derived (in hints.arrow besides Hints)
	Adapters       adapters.Stats // the adapters' counters
	ReaderCPU      time.Duration  // CPU time of the ring reader's thread
	WriterCPU      time.Duration  // CPU time of the decoder and bundle writer's thread
	CommandError   error          // the command's exit error, if any
	ExitCode       int            // the command's exit status (0 when not a command)
}

// String formats the summary printed at the end of a recording.
func (s *Summary) String() string {
	var b strings.Builder
	total := s.Events + s.Dropped
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(s.Dropped) / float64(total)
	}
	fmt.Fprintf(&b, "recorded %s in %s: %d events (%.0f/s), %d dropped (%.3f%%), %d filtered, %d files (%d unresolved), %d hints (%d rejected)\n",
		s.Bundle, s.Elapsed.Round(time.Millisecond), s.Events, float64(s.Events)/max(s.Elapsed.Seconds(), 1e-9),
		s.Dropped, pct, s.Filtered, s.Files, s.Unresolved, s.Hints, s.HintRejects.Total())
	if r := s.HintRejects; r.Total() > 0 {
		fmt.Fprintf(&b, "  hints rejected: %d malformed, %d truncated, %d oversized, %d foreign uid, %d without credentials, %d unreadable file, %d bad file\n",
			r.Malformed, r.Truncated, r.Oversized, r.ForeignUID, r.NoCredentials, r.Unreadable, r.BadFile)
	}
	if d := s.HintDrops; d.Total() > 0 {
		fmt.Fprintf(&b, "  hints dropped by their senders instead of blocking: %d (%d: the recorder's queue was full, it fell behind or was stopped; %d: no recorder listened); hints.arrow lacks them\n",
			d.Total(), d.QueueFull, d.NoServer)
	}
	if a := s.Adapters; a.Recognized > 0 {
		fmt.Fprintf(&b, "  adapters: %d files recognized, %d hints derived (%d tree, %d tensor) from %d accesses\n",
			a.Recognized, s.AdapterHints, a.TreeEvents, a.TensorEvents, a.Accesses)
	}
	fmt.Fprintf(&b, "  sources: %s", strings.Join(s.Sources, ", "))
	if len(s.Missing) > 0 {
		fmt.Fprintf(&b, "; missing on this kernel: %s", strings.Join(s.Missing, ", "))
	}
	b.WriteString("\n")
	if s.Dropped > 0 {
		b.WriteString("  some events were dropped: raise --ring-size or record fewer processes/files\n")
	}
	return b.String()
}

func (c *Config) validate() error {
	n := 0
	if len(c.Command) > 0 {
		n++
	}
	if len(c.PIDs) > 0 {
		n++
	}
	if c.Cgroup != "" {
		n++
	}
	if c.All {
		n++
	}
	if n != 1 {
		return errors.New("check target: give exactly one of a command (after --), --pid, --cgroup or --all")
	}
	if c.Output == "" {
		return errors.New("check output: -o BUNDLE is required")
	}
	if len(c.Command) > 0 {
		if _, err := exec.LookPath(c.Command[0]); err != nil {
			return fmt.Errorf("find command: %w", err)
		}
	}
	for _, p := range c.PIDs {
		if p <= 0 {
			return fmt.Errorf("check --pid %d: not a process id", p)
		}
		if err := unix.Kill(p, 0); err != nil && err != unix.EPERM {
			return fmt.Errorf("check --pid %d: %w", p, err)
		}
	}
	for _, c := range c.Comm {
		if len(c) == 0 || len(c) > 15 {
			return fmt.Errorf("check --comm %q: must be 1 to 15 bytes (the kernel's task name length)", c)
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
	return nil
}

// target names the kind of target, as the manifest's recording.target says.
func (c *Config) target() string {
	switch {
	case len(c.PIDs) > 0:
		return "pids"
	case c.Cgroup != "":
		return "cgroup"
	case c.All:
		return "all"
	}
	return "command"
}

// recording is one Run in progress.
type recording struct {
	cfg      Config
	src      *source.Source
	w        bundleWriter
	sink     *bundleSink
	files    *fileRows
	adapt    *adapterStage
	start    time.Time
	cmd      *exec.Cmd
	cmdErr   error
	cmdDone  chan struct{} // closed when the command has exited
	finished bool
}

// Run records until the command exits, the target processes are gone,
// cfg.Duration passes or ctx is done, and finalizes the bundle.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The bundle is created while the programs load (it waits on fsync,
	// they on the verifier), and removed again if they fail to.
	bundle := startBundle(cfg)
	src, err := openSource(&cfg)
	if err != nil {
		bundle.discard()
		return nil, err
	}
	defer src.Close() // at once if finalize has closed it already
	rec, err := bundle.recording(cfg, src)
	if err != nil {
		return nil, err
	}
	defer rec.abortUnlessFinished()
	if err := rec.startAdapters(); err != nil {
		return nil, err
	}
	if err := rec.startTracing(); err != nil {
		return nil, err
	}
	if err := rec.runTarget(ctx); err != nil {
		return nil, err
	}
	return rec.finalize()
}

// openSource is stage 1: the event source, with the recording's targets and
// filters (the bundle directory is always excluded).
func openSource(cfg *Config) (*source.Source, error) {
	sc := source.Config{
		PIDs: cfg.PIDs, All: cfg.All, Command: len(cfg.Command) > 0,
		Include: cfg.Include, Exclude: cfg.Exclude, Comm: cfg.Comm, MinSize: cfg.MinSize,
		HintSocket: cfg.HintSocket, HintUIDs: cfg.HintUIDs, RingBytes: cfg.RingBytes,
		BTFCacheDir: cfg.btfCache, NoCgroup: cfg.noCgroup, Exec: source.ExecTargets,
	}
	if cfg.Cgroup != "" {
		sc.Cgroups = []string{cfg.Cgroup}
	}
	if abs, err := filepath.Abs(cfg.Output); err == nil {
		sc.Exclude = append(append([]string{}, cfg.Exclude...), abs)
	}
	return source.Open(sc)
}

// pendingBundle is a bundle being created (stage 2, which runs alongside
// stage 1).
type pendingBundle struct {
	dir     string
	existed bool // dir existed (empty) before
	done    chan struct{}
	w       bundleWriter
	files   *fileRows
	err     error
}

// startBundle starts creating the bundle writer.
func startBundle(cfg Config) *pendingBundle {
	b := &pendingBundle{dir: cfg.Output, done: make(chan struct{}), files: &fileRows{}}
	_, err := os.Stat(cfg.Output)
	b.existed = err == nil
	create := cfg.create
	if create == nil {
		create = func(dir string, files *fileRows) (bundleWriter, error) {
			return formats.Create(dir, formats.WithFileResolver(files.resolve))
		}
	}
	if cfg.killAt != nil {
		b.files.first = func() { cfg.killAt("first-batch") }
	}
	go func() {
		defer close(b.done)
		b.w, b.err = create(cfg.Output, b.files)
	}()
	return b
}

// fileRows gives the bundle writer the files.arrow row of each file id
// its rows reference, when it writes the batch holding the first of them
// (formats.WithFileResolver): the source's row, stat'ed then. So a file's
// row reaches disk with the first batch that names it, with the path the
// source found by then.
type fileRows struct {
	src   *source.Source // set before the source starts delivering
	mu    sync.Mutex
	rows  []formats.File
	first func() // test hook: called as the first batch is written
	// now is the source's FileNow (a test hook when set).
	now func(uint32) (formats.File, bool)
	// waited is how long resolve has waited for paths, for pathWaitTotal.
	waited time.Duration
}

// How long resolve waits for the path of a file the source has not
// resolved yet (the open that names it may still be on its way, on
// another ring than the row that references it; on a slow machine it can
// come after the batch fills), per file and over a whole recording, so
// that files that never get a path (deleted, anonymous) cost little.
const (
	pathWait      = 100 * time.Millisecond
	pathWaitTotal = time.Second
)

func (f *fileRows) resolve(id uint32) formats.File {
	if f.first != nil {
		f.first()
		f.first = nil
	}
	now := f.now
	if now == nil {
		now = f.src.FileNow
	}
	row, ok := now(id)
	if ok && row.Path == "" && f.waited < pathWaitTotal {
		t0 := time.Now()
		for deadline := t0.Add(min(pathWait, pathWaitTotal-f.waited)); row.Path == "" && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			row, ok = now(id)
		}
		f.waited += time.Since(t0)
	}
	if !ok {
		row = formats.File{ID: id}
	}
	f.mu.Lock()
	f.rows = append(f.rows, row)
	f.mu.Unlock()
	return row
}

// written returns the rows given to the writer so far and how many have no
// path.
func (f *fileRows) written() (rows []formats.File, unresolved int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rows {
		if r.Path == "" {
			unresolved++
		}
	}
	return slices.Clone(f.rows), unresolved
}

// discard removes what the bundle's creation made, after stage 1 failed.
func (b *pendingBundle) discard() {
	<-b.done
	if b.err != nil {
		return
	}
	b.w.Abort()
	if !b.existed {
		os.RemoveAll(b.dir)
		return
	}
	ents, _ := os.ReadDir(b.dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(b.dir, e.Name()))
	}
}

// recording waits for the bundle writer and fills its manifest's recording
// parameters.
func (b *pendingBundle) recording(cfg Config, src *source.Source) (*recording, error) {
	<-b.done
	if b.err != nil {
		return nil, b.err // formats.Create names the action
	}
	w := b.w
	b.files.src = src
	man := w.Manifest()
	man.Host = formats.HostInfo()
	man.ToolVersion = cfg.ToolVersion
	// Reads, opens, stats, getdents64 and mmap are rows of their system
	// calls (entry to exit), faults start at their exception: docs/record.md.
	man.Timing.ServiceTimes = true
	man.Recording = formats.Recording{
		Source: "record", CommandLine: cfg.Command, Target: cfg.target(),
		Include: cfg.Include, Exclude: src.Excludes(), Comm: cfg.Comm, MinSizeBytes: cfg.MinSize,
		EventSources: src.Sources(), HintSocket: cfg.HintSocket,
	}
	return &recording{cfg: cfg, src: src, w: w, sink: &bundleSink{w: w}, files: b.files}, nil
}

// startAdapters puts the adapters of cfg.Adapters (nil: all) in the
// sink, before the source delivers anything.
func (r *recording) startAdapters() error {
	names := r.cfg.Adapters
	if names == nil {
		names = adapters.Names()
	}
	a, err := newAdapterStage(names, r.src, r.w)
	if err != nil || a == nil {
		return err
	}
	r.adapt, r.sink.adapt = a, a
	r.w.Manifest().Recording.Adapters = a.st.Adapters()
	return nil
}

func (r *recording) abortUnlessFinished() {
	if !r.finished {
		r.w.Abort()
	}
}

// startTracing starts the stream from the source into the bundle: from
// here on every event and hint is within the manifest's start and end.
func (r *recording) startTracing() error {
	r.w.Manifest().Start = formats.Timestamp{Wall: time.Now(), MonotonicNS: source.MonotonicNow()}
	r.start = time.Now()
	if err := r.src.Start(r.sink); err != nil {
		return err
	}
	if r.cfg.Force != nil {
		go func() {
			<-r.cfg.Force
			r.src.Discard()
		}()
	}
	return nil
}

// runTarget is stage 3: it starts the command (or watches the processes)
// and returns when the recording is over: the target ended, Duration
// passed or ctx is done. A command still running then is signalled.
func (r *recording) runTarget(ctx context.Context) error {
	stopProgress := startProgress(r.cfg.Progress, r.start, r.src)
	defer stopProgress()
	ended, err := r.startTarget(ctx)
	if err != nil {
		return err
	}
	var timer <-chan time.Time
	if r.cfg.Duration > 0 {
		t := time.NewTimer(r.cfg.Duration)
		defer t.Stop()
		timer = t.C
	}
	if r.cfg.onStart != nil {
		r.cfg.onStart()
	}
	select {
	case <-ended:
		return nil
	case <-r.src.Failed():
		// The bundle cannot be written (a full disk, say). Stop tracing
		// at once, and leave the target alone: it runs to its end.
		r.src.Stop()
		select {
		case <-ended:
		case <-timer:
		case <-ctx.Done():
		}
		return nil
	case <-timer:
	case <-ctx.Done():
	}
	if r.cmd != nil && !r.cfg.NoSignal {
		// The recording is over before the command: end it too, so its
		// cgroup can go away, but don't wait long.
		sig := r.cfg.Signal
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		_ = r.cmd.Process.Signal(sig)
		select {
		case <-r.cmdDone:
		case <-time.After(2 * time.Second):
		}
	}
	return nil
}

// startTarget starts the command, or a watcher of the --pid processes, and
// returns a channel closed when the target has ended (nil: never).
func (r *recording) startTarget(ctx context.Context) (<-chan struct{}, error) {
	cfg := r.cfg
	switch {
	case len(cfg.Command) > 0:
		cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = orStd(cfg.Stdin, os.Stdin), orStdW(cfg.Stdout, os.Stdout), orStdW(cfg.Stderr, os.Stderr)
		if err := r.src.StartCommand(cmd); err != nil {
			r.src.Stop()
			return nil, err
		}
		r.cmd, r.cmdDone = cmd, make(chan struct{})
		go func() { r.cmdErr = cmd.Wait(); close(r.cmdDone) }()
		return r.cmdDone, nil
	case len(cfg.PIDs) > 0:
		done := make(chan struct{})
		go watchPIDs(ctx, cfg.PIDs, done)
		return done, nil
	}
	return nil, nil
}

// watchPIDs closes done once none of pids is alive.
func watchPIDs(ctx context.Context, pids []int, done chan<- struct{}) {
	for {
		alive := false
		for _, p := range pids {
			if unix.Kill(p, 0) != unix.ESRCH {
				alive = true
			}
		}
		if !alive {
			close(done)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// finalize is stage 4: stop the source (draining what it holds into the
// bundle), flush the last rows (the writer resolves the file rows they
// reference), then write the counters and notes and close the bundle.
func (r *recording) finalize() (*Summary, error) {
	r.src.Stop()
	if r.adapt != nil {
		r.adapt.close() // the source has delivered everything
	}
	man := r.w.Manifest()
	man.End = formats.Timestamp{Wall: time.Now(), MonotonicNS: source.MonotonicNow()}
	sum := r.summary()
	err := r.src.Err()
	if err == nil {
		err = r.w.Flush()
	}
	if err != nil {
		// The writer is left as it was (Abort keeps what it flushed) for
		// trace repair.
		return nil, fmt.Errorf("write bundle %s: %w; the batches written before it are kept: free space, then run predictio trace repair %s", r.cfg.Output, err, r.cfg.Output)
	}
	if r.cfg.killAt != nil {
		r.cfg.killAt("finalize")
	}
	// Releasing the programs, maps and rings (unmapping the 16 MiB ring
	// costs milliseconds) overlaps closing the bundle; the file table,
	// all that is still read, stays.
	// What tracing adds to each system call: measured once per boot,
	// after Close detached the programs (about 80 ms the first time).
	type cost struct {
		ns  float64
		err error
	}
	callNS := make(chan cost, 1)
	go func() {
		r.src.Close()
		ns, err := source.SyscallCost("")
		callNS <- cost{ns, err}
	}()
	rows, unresolved := r.files.written()
	sum.Files, sum.Unresolved = len(rows), unresolved
	man.Counters = formats.Counters{
		Events: sum.Events, DroppedEvents: sum.Dropped + sum.Discarded, Hints: sum.Hints + sum.AdapterHints,
		RejectedHints: sum.HintRejects.Total(), DroppedHints: sum.HintDrops.Total(), Files: uint64(len(rows)),
	}
	man.Complete = true
	man.Notes = append(man.Notes, r.notes(sum)...)
	man.Filesystems = source.Filesystems(rows)
	if c := <-callNS; c.err != nil {
		man.Notes = append(man.Notes, fmt.Sprintf("recording.syscall_cost_ns not measured (replay --untraced takes out only tracer_ns): %v", c.err))
	} else {
		man.Recording.SyscallCostNS = c.ns
	}
	r.finished = true
	if err := r.w.Close(); err != nil {
		return nil, fmt.Errorf("finalize bundle %s: %w", r.cfg.Output, err)
	}
	return sum, nil
}

// summary collects the source's counters and the command's exit status.
func (r *recording) summary() *Summary {
	st := r.src.Stats()
	sum := &Summary{
		Bundle: r.cfg.Output, Events: st.Events, Dropped: st.Dropped, Discarded: st.Discarded,
		Filtered: st.Filtered, KernelFiltered: st.KernelFiltered, OpenDropped: st.OpenDropped,
		Hints: st.Hints, HintRejects: st.HintRejects, HintDrops: st.HintDrops, Elapsed: time.Since(r.start),
		Sources: r.src.Sources(), Missing: r.src.Missing(),
		ReaderCPU: st.ReaderCPU, WriterCPU: st.DecoderCPU,
	}
	sum.Adapters, sum.AdapterHints = r.adapt.stats()
	if r.cmd != nil {
		select {
		case <-r.cmdDone:
			sum.CommandError = r.cmdErr
			sum.ExitCode = r.cmd.ProcessState.ExitCode()
		default:
		}
	}
	return sum
}

// notes are the manifest's remarks about this recording.
func (r *recording) notes(sum *Summary) []string {
	notes := append([]string{}, r.src.Notes()...)
	if sum.Discarded > 0 {
		notes = append(notes, fmt.Sprintf("record: forced stop discarded %d events read from the ring but not yet written (counted in dropped_events)", sum.Discarded))
	}
	if sum.OpenDropped > 0 {
		notes = append(notes, fmt.Sprintf("record: %d open events dropped; some paths may be unresolved", sum.OpenDropped))
	}
	if sum.Filtered > 0 {
		notes = append(notes, fmt.Sprintf("record: %d events filtered out", sum.Filtered))
	}
	if h := sum.HintRejects; h.Total() > 0 {
		notes = append(notes, fmt.Sprintf("record: hints rejected: malformed %d, truncated %d, oversized %d, foreign_uid %d, no_credentials %d, unreadable %d, bad_file %d",
			h.Malformed, h.Truncated, h.Oversized, h.ForeignUID, h.NoCredentials, h.Unreadable, h.BadFile))
	}
	if d := sum.HintDrops; d.Total() > 0 {
		notes = append(notes, fmt.Sprintf("record: senders dropped %d hints instead of blocking (queue_full %d, no_server %d; counters.dropped_hints); hints.arrow lacks them",
			d.Total(), d.QueueFull, d.NoServer))
	}
	if r.adapt != nil {
		a := sum.Adapters
		if a.Recognized > 0 {
			notes = append(notes, fmt.Sprintf("record: adapters recognized %d files and derived %d hints (source adapter:NAME) from %d accesses, reading the files as the accessing process: %d pages the program had just read, %d it read earlier, %d others",
				a.Recognized, sum.AdapterHints, a.Accesses, a.PagesHit, a.PagesEarlier, a.PagesIO))
		}
		for _, w := range r.adapt.warns {
			notes = append(notes, "record: "+w)
		}
	}
	if len(sum.Missing) > 0 {
		notes = append(notes, "record: tracepoints missing on this kernel: "+strings.Join(sum.Missing, ", "))
	}
	return notes
}

func orStd(r io.Reader, d *os.File) io.Reader {
	if r == nil {
		return d
	}
	return r
}

func orStdW(w io.Writer, d *os.File) io.Writer {
	if w == nil {
		return d
	}
	return w
}
