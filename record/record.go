// Package record captures page-level file accesses of running programs with
// eBPF, plus the hints instrumented programs send, into a trace bundle.
//
// Run attaches the programs of package bpf to the filemap and readahead
// tracepoints (Linux 6.11+ for the read/fault/map kinds, 6.14+ for
// readahead; older kernels with kprobes get kprobe fallbacks on the
// functions those tracepoints sit in, see docs/record.md),
// follows the target processes, streams the ring buffer into a
// formats.Writer and resolves every file to a path at the end. It needs
// CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and CAP_SYS_ADMIN to mount
// tracefs or to run a command in its own cgroup.
package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bpf"
	"github.com/predictio/predictio/formats"
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

	bench    *benchSource                       // benchmark-only event source (tests)
	onStart  func(*recorder)                    // test hook: called once attached
	noCgroup bool                               // test hook: follow a command by pid
	create   func(string) (bundleWriter, error) // test hook; nil: formats.Create
}

// bundleWriter is the part of *formats.Writer the recorder uses.
type bundleWriter interface {
	sink
	Manifest() *formats.Manifest
	Close() error
	Abort() error
}

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
	Files          int
	Unresolved     int // files without a path
	Elapsed        time.Duration
	Sources        []string      // attached tracepoints
	Missing        []string      // access tracepoints this kernel lacks
	ReaderCPU      time.Duration // CPU time of the ring reader goroutine's thread
	WriterCPU      time.Duration // CPU time of the bundle writer goroutine's thread
	CommandError   error         // the command's exit error, if any
	ExitCode       int           // the command's exit status (0 when not a command)
}

// Rejected is the total of rejected hints.
func (h HintRejects) Total() uint64 {
	return h.Malformed + h.Truncated + h.Oversized + h.ForeignUID + h.NoCredentials + h.Unreadable + h.BadFile
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

// sink is what the recorder writes to; *formats.Writer implements it.
type sink interface {
	AddFile(formats.File) error
	Append(*formats.Access) error
	AppendHint(*formats.Hint) error
	Flush() error
}

const (
	modeAll    = 0
	modePids   = 1
	modeCgroup = 2
)

// monoNow returns CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
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
	if c.bench != nil {
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

// recorder is one running recording.
type recorder struct {
	cfg   Config
	coll  *ebpf.Collection
	links []link.Link
	files *fileTable

	wmu sync.Mutex // guards out
	out sink

	events    *ringbuf.Reader
	opens     *ringbuf.Reader
	opensMark atomic.Uint64 // all open events submitted before this monotonic time are processed

	written   atomic.Uint64
	discarded atomic.Uint64
	filtered  atomic.Uint64 // user-space filtered
	writeErr  atomic.Pointer[error]
	stopping  atomic.Bool
	readCPU   atomic.Uint64 // CPU ns of the ring reader thread
	writeCPU  atomic.Uint64 // CPU ns of the bundle writer thread

	hints *hintServer
}

// Run records until the command exits, the target processes are gone,
// cfg.Duration passes or ctx is done, and finalizes the bundle.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cg2 := ""
	if len(cfg.Command) > 0 && !cfg.noCgroup {
		cg2 = cgroup2Mount()
	}
	needAdmin := tracefsEvents() == "" || cg2 != ""
	if err := checkPrivileges(needAdmin); err != nil {
		return nil, err
	}
	if err := mountTracefs(); err != nil {
		return nil, err
	}
	events := tracefsEvents()

	// A command runs in a cgroup v2 of its own when one can be made;
	// otherwise it is followed through the pid set.
	var cgDir string
	var notes []string
	if cg2 != "" {
		removeStaleCgroups(cg2)
		cgDir = filepath.Join(cg2, fmt.Sprintf("predictio-record-%d-%d", os.Getpid(), time.Now().UnixNano()))
		if err := os.Mkdir(cgDir, 0o755); err != nil {
			notes = append(notes, fmt.Sprintf("record: cannot create cgroup %s (%v); following the command by pid from its start", cgDir, err))
			cg2, cgDir = "", ""
		} else {
			defer removeCgroup(cgDir)
		}
	} else if len(cfg.Command) > 0 {
		notes = append(notes, "record: no cgroup v2 mount; following the command by pid from its start")
	}

	spec, err := bpf.LoadRecord()
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	sum := &Summary{Bundle: cfg.Output}
	attach, missing, err := probeAccessSources(events, kprobeFuncs(events))
	if err != nil {
		return nil, err
	}
	sum.Missing = missing
	for _, s := range accessSources {
		keepTP, keepKP := false, false
		for _, a := range attach {
			if a.name == s.name {
				keepTP, keepKP = !a.viaKprobe, a.viaKprobe
			}
		}
		if !keepTP {
			delete(spec.Programs, s.prog)
		}
		if s.kprobeProg != "" && !keepKP {
			delete(spec.Programs, s.kprobeProg)
		}
	}
	for _, s := range helperSources {
		if tracepointExists(events, s.group, s.name) {
			attach = append(attach, s)
		} else {
			delete(spec.Programs, s.prog)
		}
	}
	mode := uint8(modePids)
	switch {
	case cfg.All, cfg.bench != nil:
		mode = modeAll
	case cfg.Cgroup != "" || cg2 != "":
		mode = modeCgroup
	}
	ring := cfg.RingBytes
	if ring == 0 {
		ring = 16 << 20
	}
	spec.Maps[bpf.RecordMapEvents].MaxEntries = uint32(ring)
	wake := uint64(256 << 10)
	if wake > uint64(ring)/4 {
		wake = uint64(ring) / 4
	}
	vars := map[string]any{
		"target_mode":  mode,
		"comm_filter":  uint8(min(len(cfg.Comm), 1)),
		"self_tgid":    uint32(os.Getpid()),
		"wakeup_bytes": wake,
	}
	if cfg.bench != nil {
		vars["self_tgid"] = uint32(0)
		mode = modePids // no target matches: only the bench source emits
		vars["target_mode"] = mode
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set bpf variable %s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{})
	if err != nil {
		return nil, fmt.Errorf("load bpf programs: %w", err)
	}
	r := &recorder{cfg: cfg, coll: coll}
	defer r.closeBPF()

	for _, c := range cfg.Comm {
		var k [16]byte
		copy(k[:], c)
		if err := coll.Maps[bpf.RecordMapComms].Put(k, uint8(1)); err != nil {
			return nil, fmt.Errorf("set comm filter %q: %w", c, err)
		}
	}
	filt := filter{include: cfg.Include, minSize: cfg.MinSize}
	filt.exclude = append(append([]string{}, defaultExcludes...), cfg.Exclude...)
	if abs, err := filepath.Abs(cfg.Output); err == nil {
		filt.exclude = append(filt.exclude, abs)
	}
	cwd, _ := os.Getwd()
	r.files = newFileTable(filt, coll.Maps[bpf.RecordMapFiles], cwd)
	r.files.denyActive = coll.Variables["deny_active"]

	// Targets.
	var cgFD = -1
	var target string
	switch {
	case len(cfg.PIDs) > 0:
		target = "pids"
		for _, p := range cfg.PIDs {
			if err := coll.Maps[bpf.RecordMapPids].Put(uint32(p), uint8(1)); err != nil {
				return nil, fmt.Errorf("add pid %d: %w", p, err)
			}
		}
	case cfg.Cgroup != "":
		target = "cgroup"
		cgFD, err = unix.Open(cfg.Cgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open cgroup %s: %w", cfg.Cgroup, err)
		}
		defer unix.Close(cgFD)
		if err := coll.Maps[bpf.RecordMapCgroups].Put(uint32(0), uint32(cgFD)); err != nil {
			return nil, fmt.Errorf("use cgroup %s: %w (is it a cgroup v2 directory?)", cfg.Cgroup, err)
		}
	case cfg.All:
		target = "all"
	case cfg.bench != nil:
		target = "bench"
	default:
		target = "command"
		if cgDir != "" {
			cgFD, err = unix.Open(cgDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("open cgroup %s: %w", cgDir, err)
			}
			defer unix.Close(cgFD)
			if err := coll.Maps[bpf.RecordMapCgroups].Put(uint32(0), uint32(cgFD)); err != nil {
				return nil, fmt.Errorf("use cgroup %s: %w", cgDir, err)
			}
		}
	}

	// Output.
	create := cfg.create
	if create == nil {
		create = func(dir string) (bundleWriter, error) {
			return formats.Create(dir, formats.WithFileResolver(r.files.row))
		}
	}
	w, err := create(cfg.Output)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	r.out = w
	finished := false
	defer func() {
		if !finished {
			w.Abort()
		}
	}()

	if r.events, err = ringbuf.NewReader(coll.Maps[bpf.RecordMapEvents]); err != nil {
		return nil, fmt.Errorf("open events ring: %w", err)
	}
	if r.opens, err = ringbuf.NewReader(coll.Maps[bpf.RecordMapOpens]); err != nil {
		return nil, fmt.Errorf("open opens ring: %w", err)
	}

	// Attach.
	for _, s := range attach {
		name := s.prog
		if s.viaKprobe {
			name = s.kprobeProg
		}
		prog := coll.Programs[name]
		if prog == nil {
			continue
		}
		var l link.Link
		if s.viaKprobe {
			l, err = link.Kprobe(s.kprobe, prog, nil)
		} else {
			l, err = link.Tracepoint(s.group, s.name, prog, nil)
		}
		if err != nil {
			if s.kind != 0 {
				return nil, fmt.Errorf("attach %s: %w", s, err)
			}
			continue // optional helper
		}
		r.links = append(r.links, l)
		sum.Sources = append(sum.Sources, s.String())
	}
	if cfg.bench != nil {
		if err := cfg.bench.attach(r); err != nil {
			return nil, err
		}
	}

	man := w.Manifest()
	man.Host = formats.HostInfo()
	man.ToolVersion = cfg.ToolVersion
	man.Recording = formats.Recording{
		Source: "record", CommandLine: cfg.Command, Target: target,
		Include: cfg.Include, Exclude: filt.exclude, Comm: cfg.Comm, MinSizeBytes: cfg.MinSize,
		EventSources: sum.Sources, HintSocket: cfg.HintSocket,
	}
	man.Start = formats.Timestamp{Wall: time.Now(), MonotonicNS: monoNow()}
	start := time.Now()
	// The hint socket opens once recording has started, so every hint
	// arrives within [start, end].
	if cfg.HintSocket != "" {
		if r.hints, err = newHintServer(cfg.HintSocket, r, cfg.HintUIDs); err != nil {
			return nil, err
		}
		defer r.hints.close()
	}

	// Pipeline.
	pipe := newPipeline(r)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); pipe.read() }()
	go func() { defer wg.Done(); pipe.write() }()
	go func() { defer wg.Done(); r.readOpens() }()
	if r.hints != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.hints.serve() }()
	}
	stopProgress := r.startProgress(start)

	// Target lifetime.
	done := make(chan struct{})
	var cmd *exec.Cmd
	var cmdErr error
	if len(cfg.Command) > 0 {
		cmd = exec.Command(cfg.Command[0], cfg.Command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = orStd(cfg.Stdin, os.Stdin), orStdW(cfg.Stdout, os.Stdout), orStdW(cfg.Stderr, os.Stderr)
		if cgFD >= 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgFD}
		}
		if err := startCommand(cmd, cgFD < 0, coll.Maps[bpf.RecordMapPids]); err != nil {
			if cgFD < 0 {
				stopProgress()
				r.stop(pipe, &wg)
				return nil, fmt.Errorf("start %s: %w", cfg.Command[0], err)
			}
			stopProgress()
			r.stop(pipe, &wg)
			return nil, fmt.Errorf("start %s in cgroup %s (CLONE_INTO_CGROUP needs Linux 5.7): %w", cfg.Command[0], cgDir, err)
		}
		go func() { cmdErr = cmd.Wait(); close(done) }()
	} else if len(cfg.PIDs) > 0 {
		go func() {
			for {
				alive := false
				for _, p := range cfg.PIDs {
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
		}()
	} else if cfg.bench != nil {
		go func() { cfg.bench.run(ctx); close(done) }()
	}
	var timer <-chan time.Time
	if cfg.Duration > 0 {
		timer = time.After(cfg.Duration)
	}
	if cfg.onStart != nil {
		cfg.onStart(r)
	}
	ended := false
	select {
	case <-done:
		ended = true
	case <-timer:
	case <-ctx.Done():
	}
	if cmd != nil && !ended && !cfg.NoSignal {
		// The recording is over before the command: end it too, so its
		// cgroup can go away, but don't wait long.
		sig := cfg.Signal
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	stopProgress()
	r.stop(pipe, &wg)
	sum.Elapsed = time.Since(start)
	man.End = formats.Timestamp{Wall: time.Now(), MonotonicNS: monoNow()}

	if cmd != nil {
		select {
		case <-done:
			sum.CommandError = cmdErr
			sum.ExitCode = cmd.ProcessState.ExitCode()
		default:
		}
	}

	// Finalize.
	c := r.counters()
	sum.Dropped = c[cntDrops]
	sum.OpenDropped = c[cntOpenDrops]
	sum.Filtered = c[cntFiltered] + r.filtered.Load()
	sum.KernelFiltered = c[cntFiltered]
	sum.Events = r.written.Load()
	sum.Discarded = r.discarded.Load()
	sum.ReaderCPU = time.Duration(r.readCPU.Load())
	sum.WriterCPU = time.Duration(r.writeCPU.Load())
	if r.hints != nil {
		sum.Hints = r.hints.accepted.Load()
		sum.HintRejects = r.hints.rejects()
	}
	rows, unresolved := r.files.files()
	for _, f := range rows {
		if h, ok := w.(interface{ HasFile(uint32) bool }); ok && h.HasFile(f.ID) {
			continue // written with the first batch that referenced it
		}
		if err := w.AddFile(f); err != nil {
			return nil, fmt.Errorf("write files table: %w", err)
		}
	}
	sum.Files, sum.Unresolved = len(rows), unresolved
	man.Counters = formats.Counters{
		Events: sum.Events, DroppedEvents: sum.Dropped + sum.Discarded, Hints: sum.Hints,
		RejectedHints: sum.HintRejects.Total(), Files: uint64(len(rows)),
	}
	man.Complete = true
	man.Notes = append(man.Notes, notes...)
	man.Filesystems = filesystems(rows)
	if sum.Discarded > 0 {
		man.Notes = append(man.Notes, fmt.Sprintf("record: forced stop discarded %d events read from the ring but not yet written (counted in dropped_events)", sum.Discarded))
	}
	if sum.OpenDropped > 0 {
		man.Notes = append(man.Notes, fmt.Sprintf("record: %d open events dropped; some paths may be unresolved", sum.OpenDropped))
	}
	if sum.Filtered > 0 {
		man.Notes = append(man.Notes, fmt.Sprintf("record: %d events filtered out", sum.Filtered))
	}
	if r := sum.HintRejects; r.Total() > 0 {
		man.Notes = append(man.Notes, fmt.Sprintf("record: hints rejected: malformed %d, truncated %d, oversized %d, foreign_uid %d, no_credentials %d, unreadable %d, bad_file %d",
			r.Malformed, r.Truncated, r.Oversized, r.ForeignUID, r.NoCredentials, r.Unreadable, r.BadFile))
	}
	if len(sum.Missing) > 0 {
		man.Notes = append(man.Notes, "record: tracepoints missing on this kernel: "+strings.Join(sum.Missing, ", "))
	}
	if p := r.writeErr.Load(); p != nil {
		return nil, fmt.Errorf("write accesses: %w", *p)
	}
	finished = true
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("finalize bundle %s: %w", cfg.Output, err)
	}
	return sum, nil
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

func removeCgroup(dir string) {
	for i := 0; i < 20; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Descendants still running keep it busy; leave it for them.
}

// startCommand starts cmd. With byPid, the command is followed through the
// pid set: it starts traced (PTRACE_TRACEME), so it stops right after its
// execve; its pid goes into the set and only then is it let go, so nothing
// it reads after exec is missed.
func startCommand(cmd *exec.Cmd, byPid bool, pids *ebpf.Map) error {
	if !byPid {
		return cmd.Start()
	}
	// ptrace requests must come from the thread that started the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	perr := pids.Put(uint32(pid), uint8(1))
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fmt.Errorf("wait for %s to exec: %w", cmd.Path, err)
	}
	if ws.Stopped() {
		if err := unix.PtraceDetach(pid); err != nil {
			return fmt.Errorf("release %s after exec: %w", cmd.Path, err)
		}
	}
	if perr != nil {
		return fmt.Errorf("follow pid %d: %w", pid, perr)
	}
	return nil
}

// removeStaleCgroups removes the empty cgroups of recorders that were
// killed (their pid is gone); rmdir fails on cgroups still in use.
func removeStaleCgroups(mnt string) {
	dirs, _ := filepath.Glob(filepath.Join(mnt, "predictio-record-*"))
	for _, d := range dirs {
		var pid, ns int64
		if _, err := fmt.Sscanf(filepath.Base(d), "predictio-record-%d-%d", &pid, &ns); err != nil {
			continue
		}
		if unix.Kill(int(pid), 0) == unix.ESRCH {
			_ = os.Remove(d)
		}
	}
}

// stop detaches the programs, drains both rings and waits for the pipeline.
func (r *recorder) stop(p *pipeline, wg *sync.WaitGroup) {
	// Stop emitting now; detaching (closeBPF) waits for RCU grace periods.
	if v := r.coll.Variables["stopped"]; v != nil {
		if err := v.Set(uint32(1)); err != nil {
			r.detach()
		}
	}
	if r.cfg.bench != nil {
		r.cfg.bench.detach()
	}
	r.stopping.Store(true)
	r.events.Flush()
	r.opens.Flush()
	if r.hints != nil {
		r.hints.stop()
	}
	wg.Wait()
}

// setWriteErr records the first error of the bundle writer.
func (r *recorder) setWriteErr(err error) {
	e := err
	r.writeErr.CompareAndSwap(nil, &e)
}

// detach closes the tracepoint links concurrently (each waits for an RCU
// grace period).
func (r *recorder) detach() {
	var wg sync.WaitGroup
	for _, l := range r.links {
		wg.Add(1)
		go func() { defer wg.Done(); l.Close() }()
	}
	wg.Wait()
	r.links = nil
}

func (r *recorder) closeBPF() {
	r.detach()
	if r.events != nil {
		r.events.Close()
	}
	if r.opens != nil {
		r.opens.Close()
	}
	r.coll.Close()
}

// Counter slots (record.h).
const (
	cntDrops     = 0
	cntEvents    = 1
	cntOpenDrops = 2
	cntFiltered  = 3
)

// counters sums the per-CPU counters.
func (r *recorder) counters() [4]uint64 {
	var out [4]uint64
	m := r.coll.Maps[bpf.RecordMapCounters]
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

// readOpens resolves open events to path candidates.
func (r *recorder) readOpens() {
	var rec ringbuf.Record
	final := false
	r.opens.SetDeadline(time.Now().Add(20 * time.Millisecond))
	for {
		t := monoNow()
		err := r.opens.ReadInto(&rec)
		switch {
		case err == nil:
			if len(rec.RawSample) < 280 {
				continue
			}
			b := rec.RawSample
			pid := le32(b[8:])
			dfd := int32(le32(b[16:]))
			flags := le32(b[20:])
			path := cstring(b[24:280])
			r.files.resolveOpen(pid, dfd, path, flags&openExec != 0)
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			r.opensMark.Store(t)
			if !final {
				r.opens.SetDeadline(time.Now().Add(20 * time.Millisecond))
			}
		case errors.Is(err, ringbuf.ErrFlushed):
			r.opensMark.Store(t)
		default:
			r.opensMark.Store(math.MaxUint64)
			return // closed
		}
		if r.stopping.Load() {
			if final {
				r.opensMark.Store(math.MaxUint64)
				return
			}
			// Drain what is left, then stop.
			final = true
			r.opens.SetDeadline(time.Now())
		}
	}
}

// waitOpens waits (briefly) until every open event submitted before ts has
// been processed, so a file's path candidate is known at its first access.
func (r *recorder) waitOpens(ts uint64) {
	if r.opensMark.Load() >= ts {
		return
	}
	r.opens.Flush()
	deadline := time.Now().Add(100 * time.Millisecond)
	for r.opensMark.Load() < ts && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// progress

func (r *recorder) startProgress(start time.Time) (stop func()) {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			tty = true
		}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last uint64
		lastT := start
		n := 0
		for {
			select {
			case <-quit:
				if tty {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case now := <-tick.C:
				n++
				ev := r.written.Load()
				rate := float64(ev-last) / now.Sub(lastT).Seconds()
				last, lastT = ev, now
				if !tty && n%5 != 0 {
					continue
				}
				c := r.counters()
				line := fmt.Sprintf("record: %s events/s, %d events, %d dropped, %d files, %s elapsed",
					humanRate(rate), ev, c[cntDrops], r.files.count(), now.Sub(start).Round(time.Second))
				if tty {
					fmt.Fprint(w, "\r\033[K"+line)
				} else {
					fmt.Fprintln(w, line)
				}
			}
		}
	}()
	return func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		wg.Wait()
	}
}

func humanRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "K"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// openExec flags an open_event that came from execve/execveat.
const openExec = 1
