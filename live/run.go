package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/backend"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/record"
	"github.com/predictio/predictio/source"
)

// DefaultPolicies are run's policies when none are given: the launch
// profile (every file the last launches touched, from the exec on) and
// markov (within files, trained on the same launches).
var DefaultPolicies = []string{"launch", "markov"}

// DefaultKeep is how many launches a profile keeps by default.
const DefaultKeep = 3

// RunConfig configures Run.
type RunConfig struct {
	// Command is the program and its arguments (found in PATH like
	// exec.Command does).
	Command []string
	// Profile is the profile directory: the command's launch profile is
	// read from it and this run is learned into it. "" for none.
	Profile string
	// Keep is how many launches a profile keeps; 0 means DefaultKeep.
	Keep int
	// MaxProfileBytes bounds a profile file; 0 means 16 MiB.
	MaxProfileBytes int
	// Policies are the policy specs; nil means DefaultPolicies. markov
	// runs only with a model: Markov, else the profile's.
	Policies []string
	// Markov is a trained model (--model); nil: the profile's launches
	// train one.
	Markov *policies.MarkovModel
	// Backend is kernel (default), kmod or none (the noop run: policies
	// run, requests are counted and discarded).
	Backend string
	// Output, when set, also records the run into this bundle.
	Output string
	// Adapters are the structure adapters run in front of the policies
	// (adapters.ParseList: sqlite, lmdb, gguf); nil or empty for none.
	// Their events feed the tree and tensor policies, which must be among
	// Policies to prefetch from them.
	Adapters []string
	// AdapterAhead is how many upcoming B-tree entries the adapters list
	// per event (adapters.Config.Ahead); 0 is the adapters' default. With
	// events that arrive late (a Batched source), the program may have
	// read that many entries before the policy sees where it is.
	AdapterAhead int
	// HintSocket receives application hints for the run; "" for none.
	HintSocket string
	// Latency is the source's delivery mode: source.LowLatency (events
	// reach the policies microseconds after the kernel saw them; each
	// costs the traced program a reader wakeup) or source.Batched.
	Latency source.Latency
	// Poll is the Batched source's poll (source.Config.Poll): events
	// reach the policies at most about Poll late; 0 is the source's
	// default (20 ms).
	Poll time.Duration
	// Refresh says when a full profile (Keep launches) learns again: once
	// its newest launch is older than Refresh; 0 learns every run, a
	// negative Refresh never once full. A run that neither learns nor
	// needs events (Output, Adapters, HintSocket, policies besides the
	// launch policy given in Policies) is not traced at all: it only
	// prefetches, and costs the command nothing but its own start-up.
	Refresh time.Duration
	// Effect counts what the prefetched pages were worth (pages used in
	// time, late, wasted) with the effect package's observer, loaded
	// before the launch prefetch starts (which it then delays by its load
	// time).
	Effect bool

	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Warn gets the one warning of a run that fails open, and other
	// warnings; nil means os.Stderr.
	Warn io.Writer
	// ToolVersion goes into a bundle's manifest.
	ToolVersion string
	// DaemonSocket is the control socket of a running daemon, told that
	// this run owns its command's launch (see docs/daemon.md); "" skips.
	DaemonSocket string
	// Claim, when set, is called with this process's pid before the
	// command starts and returns a release function (the daemon client;
	// tests).
	Claim func(pid int) (release func())

	noCgroup bool   // test hook: follow the command by pid
	btfCache string // test hook
}

// RunResult reports a finished run.
type RunResult struct {
	// ExitCode is the command's exit status, 128+N when signal N killed
	// it (as shells report it).
	ExitCode int
	// Program is the resolved executable the profile is keyed by.
	Program string
	// ProfileFile is the profile read and written ("" without one).
	ProfileFile string
	// Launches is how many launches the profile held before this run.
	Launches int
	// Learned says this run was added to the profile.
	Learned bool
	// Traced says the event source ran; Untraced says why not.
	Traced   bool
	Untraced error
	// Startup is Run's start to the command's start; Shutdown the
	// command's exit to Run's return.
	Startup, Shutdown time.Duration
	Loop              Stats
	Backend           backend.Report
	Source            source.Stats
	Bundle            *record.Summary
	// Effect is what the prefetches were worth, with RunConfig.Effect.
	Effect Effect
	// Adapters are the adapters' counters, with RunConfig.Adapters.
	Adapters *adapters.Stats
	// Notes are remarks: a profile relearned, files invalidated.
	Notes []string
}

// ErrCommand wraps failures to find or start the command (the shell's
// exit statuses 127 and 126).
var ErrCommand = errors.New("cannot run the command")

// Run runs cfg.Command with the live runtime: its launch profile is
// prefetched from the start, its events go to the policies as they
// happen, and, with a profile directory, the run is learned into it. It
// fails open: if tracing cannot start (privileges, kernel), the command
// runs anyway and one warning says why. It returns when the command has
// exited; ctx cancels nothing but the wait for the command's
// descendants' last events.
func Run(ctx context.Context, cfg RunConfig) (*RunResult, error) {
	t0 := time.Now()
	if len(cfg.Command) == 0 {
		return nil, errors.New("run: no command")
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Warn == nil {
		cfg.Warn = os.Stderr
	}
	r := &runner{cfg: cfg, res: &RunResult{}}
	prog, progFile, err := resolveProgram(cfg.Command[0])
	if err != nil {
		return nil, err
	}
	r.res.Program = prog
	r.prog = progFile
	r.t0, r.trace = t0, os.Getenv("PREDICTIO_RUN_TRACE") != ""
	mark := r.mark
	mark("resolved")
	r.loadProfile()
	mark("profile")
	// The source loads while the launch prefetch starts.
	srcDone := r.openSource()
	r.startBundle()
	r.openObserver()
	rest, err := r.startLoop()
	if err != nil {
		return nil, err
	}
	mark("loop")
	if !r.traced {
		rest = nil // the policies that need events have none
	}
	markov := r.startMarkov(rest)
	sr := <-srcDone
	mark("source open")
	if r.trace && sr.src != nil {
		for _, p := range sr.src.Startup() {
			fmt.Fprintf(os.Stderr, "   %s %v\n", p.Name, p.Wall)
		}
	}
	if err := r.loop.AddPolicies(rest, <-markov); err != nil {
		if sr.src != nil {
			sr.src.Close()
		}
		r.loop.Close()
		return nil, err
	}
	mark("policies")
	r.attachSource(sr)
	mark("attached")
	if err := r.startCommand(); err != nil {
		r.abort()
		return nil, err
	}
	r.res.Startup = time.Since(t0)
	r.wait(ctx)
	end := time.Now()
	mark("exited")
	r.finish()
	mark("finished")
	r.res.Shutdown = time.Since(end)
	return r.res, nil
}

// runner is one Run in progress.
type runner struct {
	cfg      RunConfig
	learning bool // this run is learned
	traced   bool // the source is opened
	res      *RunResult
	prog     policies.LaunchFile
	prof     *policies.LaunchProfile
	src      *source.Source
	pend     *record.PendingStage
	stage    *record.Stage
	sink     *asyncSink
	loop     *Loop
	rec      *policies.LaunchRecorder
	ran      uint32 // source file id of the first exec
	cmd      *exec.Cmd
	start    time.Time
	startNS  uint64
	release  func()
	ob       *effect.Observer
	stage2   *adapters.Stage
	t0       time.Time
	trace    bool // PREDICTIO_RUN_TRACE: mark prints the stages' times
}

// mark prints the time since Run started and what was reached, with
// PREDICTIO_RUN_TRACE set in the environment.
func (r *runner) mark(what string) {
	if r.trace {
		fmt.Fprintf(os.Stderr, "%8.3f ms %s\n", float64(time.Since(r.t0))/1e6, what)
	}
}

// resolveProgram finds the command's executable like exec.Command and
// resolves it to an absolute path without symlinks: the profile's key.
func resolveProgram(name string) (string, policies.LaunchFile, error) {
	p, err := exec.LookPath(name)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return "", policies.LaunchFile{}, fmt.Errorf("find %s: %w: %w", name, ErrCommand, err)
	}
	if p, err = filepath.Abs(p); err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err != nil {
		return "", policies.LaunchFile{}, fmt.Errorf("resolve %s: %w: %w", name, ErrCommand, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "", policies.LaunchFile{}, fmt.Errorf("stat %s: %w: %w", p, ErrCommand, err)
	}
	return p, launchFileOf(p, &st), nil
}

type srcResult struct {
	src *source.Source
	err error
}

// errNotTraced says a run neither learns nor needs events.
var errNotTraced = errors.New("not traced: the profile is fresh and no policy needs live events")

// needsEvents reports whether the run needs the event source besides
// learning: a bundle, adapters, hints, or policies besides the launch
// policy given explicitly.
func (r *runner) needsEvents() bool {
	if r.cfg.Output != "" || len(r.adapters()) > 0 || r.cfg.HintSocket != "" || r.cfg.Effect {
		return true
	}
	for _, p := range r.cfg.Policies {
		if policies.SpecName(p) != "launch" {
			return true
		}
	}
	return false
}

// adapters returns the adapters the run puts in front of its policies:
// RunConfig.Adapters when a policy takes their events (tree, tensor),
// else none, so that the default adapters cost a run without those
// policies nothing (not even tracing).
func (r *runner) adapters() []string {
	for _, p := range r.cfg.Policies {
		switch policies.SpecName(p) {
		case "tree", "tensor":
			return r.cfg.Adapters
		}
	}
	return nil
}

// openSource opens the event source in the background (when the run is
// traced).
func (r *runner) openSource() <-chan srcResult {
	r.traced = r.learning || r.needsEvents()
	if !r.traced {
		ch := make(chan srcResult, 1)
		ch <- srcResult{err: errNotTraced}
		return ch
	}
	sc := source.Config{
		Command: true, Exec: source.ExecTargets, Latency: r.cfg.Latency, Poll: r.cfg.Poll, RingBytes: 8 << 20,
		HintSocket: r.cfg.HintSocket, NoCgroup: r.cfg.noCgroup, BTFCacheDir: r.cfg.btfCache,
	}
	if r.cfg.Output != "" {
		sc.Exclude = append(sc.Exclude, record.StageExclude(record.Config{Output: r.cfg.Output}))
	}
	if r.cfg.Profile != "" {
		if abs, err := filepath.Abs(r.cfg.Profile); err == nil {
			sc.Exclude = append(sc.Exclude, abs)
		}
	}
	ch := make(chan srcResult, 1)
	go func() {
		src, err := source.Open(sc)
		ch <- srcResult{src, err}
	}()
	return ch
}

// startBundle starts creating the -o bundle.
func (r *runner) startBundle() {
	if r.cfg.Output == "" {
		return
	}
	r.pend = record.StartStage(record.Config{
		Output: r.cfg.Output, Command: r.cfg.Command, ToolVersion: r.cfg.ToolVersion, HintSocket: r.cfg.HintSocket,
	})
}

// loadProfile reads the program's profile; a damaged one, or one of an
// executable that changed since, is relearned from scratch.
func (r *runner) loadProfile() {
	dir := r.cfg.Profile
	if dir == "" {
		return
	}
	if err := OpenProfileDir(dir); err != nil {
		r.warn(fmt.Sprintf("%v; running without a profile", err))
		r.cfg.Profile = ""
		return
	}
	r.res.ProfileFile = ProfilePath(dir, r.res.Program)
	p, err := LoadProfile(dir, r.res.Program)
	switch {
	case err != nil:
		r.note(fmt.Sprintf("%v; learning it again", err))
		p = nil
	case p != nil && !p.Program.Same(&r.prog):
		r.note(fmt.Sprintf("%s changed since its profile was learned; learning it again", r.res.Program))
		p = nil
	}
	if p == nil {
		p = &policies.LaunchProfile{Program: r.prog}
	}
	r.prof = p
	r.res.Launches = len(p.Launches)
	r.learning = p.Wants(r.cfg.Keep, r.cfg.Refresh, time.Now())
}

// startLoop builds the loop with the launch policies and fires the launch
// prefetch; it returns the other policies, added once the source is open.
func (r *runner) startLoop() ([]string, error) {
	specs := r.cfg.Policies
	if specs == nil {
		specs = DefaultPolicies
	}
	var launch, rest []string
	for _, s := range specs {
		if policies.SpecName(s) == "launch" {
			launch = append(launch, s)
		} else {
			rest = append(rest, s)
		}
	}
	var model *policies.LaunchModel
	if r.prof != nil {
		model = policies.NewLaunchModel(r.prof)
	}
	if model == nil && len(launch) > 0 && r.cfg.Policies == nil {
		launch = nil // the default launch policy without a profile: nothing to prefetch
	}
	cfg := Config{Policies: launch, Launch: model, Backend: r.cfg.Backend, Tap: r.observe,
		Effect: r.ob, Warn: func(m string) { r.warn(m) }}
	if model == nil {
		cfg.Launch = policies.NewLaunchModel()
	}
	l, err := New(cfg, nil)
	if err != nil {
		return nil, err
	}
	r.loop = l
	r.startNS = source.MonotonicNow()
	l.Exec(0, r.res.Program, 0, r.startNS)
	if r.cfg.Markov == nil && r.prof == nil && r.cfg.Policies == nil {
		rest = slices.DeleteFunc(rest, func(s string) bool { return policies.SpecName(s) == "markov" })
	}
	return rest, nil
}

// startMarkov trains markov on the profile's launches in the background
// (while the source loads), when a markov policy needs that model.
func (r *runner) startMarkov(specs []string) <-chan *policies.MarkovModel {
	ch := make(chan *policies.MarkovModel, 1)
	if r.cfg.Markov != nil || r.prof == nil || !slices.ContainsFunc(specs, func(s string) bool { return policies.SpecName(s) == "markov" }) {
		ch <- r.cfg.Markov
		return ch
	}
	go func() { ch <- r.prof.Markov(uint32(os.Getpagesize())) }()
	return ch
}

// attachSource starts the source (or warns once that the command runs
// untraced) and the bundle writer.
func (r *runner) attachSource(sr srcResult) {
	if errors.Is(sr.err, errNotTraced) {
		return
	}
	if sr.err != nil {
		r.res.Untraced = sr.err
		msg := fmt.Sprintf("tracing unavailable (%v); the command runs without it", sr.err)
		if r.pend != nil {
			r.pend.Discard()
			r.pend = nil
			msg += ", -o " + r.cfg.Output + " is not written"
		}
		if r.prof != nil {
			msg += ", and this run is not learned"
		}
		r.warn(msg)
		return
	}
	r.src = sr.src
	r.loop.Attach(sr.src)
	if as := r.adapters(); len(as) > 0 {
		st, err := adapters.NewStage(adapters.Config{Adapters: as, HeaderFirst: true, ReadCached: true, Ahead: r.cfg.AdapterAhead, Warn: func(m string) { r.note(m) }}, r.loop.AdapterFiles())
		if err != nil {
			r.warn(fmt.Sprintf("%v; running without adapters", err))
		} else {
			r.stage2 = st
			r.loop.SetStage(st)
		}
	}
	var consumer source.Consumer = r.loop
	if r.pend != nil {
		st, err := r.pend.Attach(sr.src)
		if err != nil {
			r.warn(fmt.Sprintf("%v; -o %s is not written", err, r.cfg.Output))
			r.pend.Discard()
		} else {
			r.stage = st
			st.Manifest().Recording.Source = "run"
			r.sink = newAsyncSink(st)
			consumer = tee{r.loop, r.sink}
		}
		r.pend = nil
	}
	if r.prof != nil && r.learning {
		r.rec = policies.NewLaunchRecorder(r.startNS)
	}
	if err := sr.src.Start(consumer); err != nil {
		r.warn(fmt.Sprintf("start tracing: %v; the command runs without it", err))
		sr.src.Close()
		r.src, r.rec = nil, nil
		r.loop.Attach(nil)
	}
	r.res.Traced = r.src != nil
}

// tee hands batches to the loop, then to the bundle writer.
type tee struct{ a, b source.Consumer }

func (t tee) Consume(b *source.Batch) error {
	if err := t.a.Consume(b); err != nil {
		return err
	}
	return t.b.Consume(b)
}

// observe is the loop's Tap: the launch recorder's input.
func (r *runner) observe(ev *policies.Event) {
	if r.rec == nil {
		return
	}
	if ev.Kind == policies.EventProcessExec && r.ran == 0 && ev.File != 0 {
		r.ran = ev.File
	}
	r.rec.Observe(ev)
}

// startCommand starts the command, traced from its first instruction when
// the source runs.
func (r *runner) startCommand() error {
	c := r.cfg.Command
	cmd := exec.Command(c[0], c[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = orReader(r.cfg.Stdin, os.Stdin), orWriter(r.cfg.Stdout, os.Stdout), orWriter(r.cfg.Stderr, os.Stderr)
	if r.cfg.Claim != nil {
		r.release = r.cfg.Claim(os.Getpid())
	} else if r.cfg.DaemonSocket != "" {
		r.release = ClaimLaunches(r.cfg.DaemonSocket, os.Getpid())
	}
	r.start = time.Now()
	var err error
	switch {
	case r.ob != nil:
		err = r.startGated(cmd)
	case r.src != nil:
		err = r.src.StartCommand(cmd)
	default:
		err = cmd.Start()
	}
	if err != nil {
		return fmt.Errorf("start %s: %w: %w", c[0], ErrCommand, err)
	}
	r.cmd = cmd
	return nil
}

// startGated starts cmd stopped right after its execve (PTRACE_TRACEME),
// makes it a demand process of the effect observer and lets it go, so
// that its very first reads count as demand.
func (r *runner) startGated(cmd *exec.Cmd) error {
	if r.src != nil && r.src.CommandCgroup() == "" {
		// The source follows the command by pid: it gates the start
		// itself (StartCommand), and the command is a demand process
		// from its first event on.
		if err := r.src.StartCommand(cmd); err != nil {
			return err
		}
		r.loop.addDemand(uint32(cmd.Process.Pid))
		return nil
	}
	runtime.LockOSThread() // ptrace requests come from the thread that started it
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	var err error
	if r.src != nil {
		err = r.src.StartCommand(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	r.loop.addDemand(uint32(pid))
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return fmt.Errorf("wait for it to exec: %w", err)
	}
	if ws.Stopped() {
		if err := unix.PtraceDetach(pid); err != nil {
			return fmt.Errorf("release it after exec: %w", err)
		}
	}
	return nil
}

// wait waits for the command, forwarding SIGTERM and SIGHUP to it (SIGINT
// and SIGQUIT from a terminal reach it directly: run only outlives them).
func (r *runner) wait(ctx context.Context) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	for {
		select {
		case err := <-done:
			r.res.ExitCode = exitCode(r.cmd, err)
			return
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGHUP {
				_ = r.cmd.Process.Signal(s)
			}
		}
	}
}

// exitCode is the command's status as a shell reports it.
func exitCode(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return 126
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// finish stops tracing, learns the run, finalizes the bundle and closes
// the loop.
func (r *runner) finish() {
	if r.release != nil {
		r.release()
	}
	if r.src != nil {
		r.src.Stop()
		r.res.Source = r.src.Stats()
		r.mark("source stopped")
	}
	r.learn()
	r.mark("learned")
	if r.sink != nil {
		if err := r.sink.close(); err != nil {
			r.warn(fmt.Sprintf("write -o %s: %v", r.cfg.Output, err))
		}
	}
	if r.stage != nil {
		sum, err := r.stage.Finish() // closes the source
		if err != nil {
			r.warn(fmt.Sprintf("finalize -o %s: %v", r.cfg.Output, err))
		}
		r.res.Bundle = sum
	} else if r.src != nil {
		r.src.Close()
	}
	r.mark("source closed")
	r.res.Loop = r.loop.Stats()
	if r.stage2 != nil {
		st := r.stage2.Stats()
		r.res.Adapters = &st
		r.stage2.Close()
	}
	if r.ob != nil {
		e, err := r.loop.Effect(true)
		if err != nil {
			r.note(fmt.Sprintf("effect counts: %v", err))
		}
		r.res.Effect = e
		go r.ob.Close() // detaching waits for RCU: not on the way out
	}
	r.mark("adapters closed")
	r.closeLoop()
}

// openObserver loads the effect observer (RunConfig.Effect); where it
// cannot load, the run goes on without effect counts (a note says why).
func (r *runner) openObserver() {
	if !r.cfg.Effect {
		return
	}
	ob, err := effect.NewObserver(effect.Options{KernelThreads: r.cfg.Backend == backend.NameKmod})
	if err != nil {
		r.note(fmt.Sprintf("no effect counts: %v", err))
		return
	}
	r.ob = ob
}

// closeLoop closes the backend, waiting briefly: prefetches still queued
// when the command has exited are of no use, and the kernel keeps what
// it was handed.
func (r *runner) closeLoop() {
	done := make(chan backend.Report, 1)
	go func() {
		rep, _ := r.loop.Close()
		done <- rep
	}()
	select {
	case rep := <-done:
		r.res.Backend = rep
	case <-time.After(20 * time.Millisecond):
		r.res.Backend = backend.Report{Stats: r.loop.be.Stats(), Via: "(still draining at exit)"}
	}
}

// learn merges this launch into the profile and saves it; a run that is
// not learned saves the profile only to drop files its prefetch found
// changed.
func (r *runner) learn() {
	if r.prof == nil {
		return
	}
	if r.rec == nil {
		// (The launch workers may still be checking: what they find
		// later is found again by the next run.)
		if r.prof.InvalidateFiles(r.loop.Invalid()) {
			r.note("files of the profile changed: the next run learns again")
			if err := SaveProfile(r.cfg.Profile, r.prof, r.cfg.MaxProfileBytes); err != nil {
				r.warn(err.Error())
			}
		}
		return
	}
	wall := uint64(time.Since(r.start))
	l, files := r.rec.Launch(func(id uint32) (policies.LaunchFile, bool) {
		f, ok := r.src.File(id)
		if !ok {
			return policies.LaunchFile{}, false
		}
		return ResolveLearned("", f, r.start)
	}, r.start.UnixNano(), wall)
	if r.ran != 0 && r.prof.Ran.Path == "" {
		if f, ok := r.src.File(r.ran); ok {
			if f.Path == "" {
				// The kernel opens a script's interpreter itself: take
				// it from the #! line when it is the file that ran.
				f.Path = interpreter(r.res.Program)
			}
			if lf, ok := Resolve("", f); ok {
				r.prof.Ran = lf
			}
		}
	}
	if err := r.prof.AddLaunch(l, files, r.cfg.Keep); err != nil {
		r.warn(fmt.Sprintf("learn %s: %v", r.res.Program, err))
		return
	}
	r.prof.InvalidateFiles(r.loop.Invalid())
	if err := SaveProfile(r.cfg.Profile, r.prof, r.cfg.MaxProfileBytes); err != nil {
		r.warn(err.Error())
		return
	}
	r.res.Learned = true
}

// interpreter returns the interpreter a script's #! line names, or "".
func interpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := io.ReadFull(f, b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return ""
	}
	return fields[0]
}

// abort undoes what was started when the command cannot start.
func (r *runner) abort() {
	if r.release != nil {
		r.release()
	}
	if r.stage != nil {
		r.stage.Abort()
	}
	if r.src != nil {
		r.src.Close()
	}
	r.loop.Close()
	if r.ob != nil {
		r.ob.Close()
	}
}

func (r *runner) warn(msg string) {
	fmt.Fprintf(r.cfg.Warn, "predictio run: warning: %s\n", msg)
}

func (r *runner) note(msg string) { r.res.Notes = append(r.res.Notes, msg) }

func orReader(r io.Reader, d *os.File) io.Reader {
	if r == nil {
		return d
	}
	return r
}

func orWriter(w io.Writer, d *os.File) io.Writer {
	if w == nil {
		return d
	}
	return w
}

// String summarizes the run (predictio run --stats).
func (res *RunResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "predictio run: %s exited %d; start-up %s, shutdown %s\n", res.Program, res.ExitCode,
		res.Startup.Round(10*time.Microsecond), res.Shutdown.Round(10*time.Microsecond))
	if res.ProfileFile != "" {
		learned := "not learned"
		if res.Learned {
			learned = "learned"
		}
		fmt.Fprintf(&b, "  profile %s: %d launches before this one, this one %s\n", res.ProfileFile, res.Launches, learned)
	}
	if !res.Traced {
		why := "not needed: the profile is fresh (--refresh) and no policy needs live events"
		if res.Untraced != nil {
			why = res.Untraced.Error()
		}
		fmt.Fprintf(&b, "  untraced: %s\n", why)
	}
	st := res.Loop
	fmt.Fprintf(&b, "  %d events, %d requests (%d dropped: file not known yet)\n", st.Events, st.Requests, st.Unregistered)
	for _, p := range st.Policies {
		fmt.Fprintf(&b, "  %-10s %d events, %d requests, %d pages\n", p.Name, p.Events, p.Requests, p.Pages)
	}
	bs := res.Backend.Stats
	fmt.Fprintf(&b, "  backend: %d pages requested, %d submitted, %d already cached, %d past EOF, %d requests dropped; %s\n",
		bs.PagesRequested, bs.PagesSubmitted, bs.PagesCached, bs.PagesPastEOF, bs.Dropped, res.Backend.Via)
	m := st.Meta
	pf := st.ProfileFiles
	fmt.Fprintf(&b, "  launch files: %d named, %d checked, %d changed, %d denied, %d check errors, %d dropped; %d lookups, %d directories read\n",
		pf.Named, pf.Checked, pf.Changed, pf.Denied, pf.Errors, m.Dropped, m.Files, m.Dirs)
	if a := res.Adapters; a != nil {
		fmt.Fprintf(&b, "  adapters: %d files recognized, %d tree and %d tensor events derived, %d pages read (%d of them possibly I/O), %d read ahead of the program from the page cache\n",
			a.Recognized, a.TreeEvents, a.TensorEvents, a.PagesHit+a.PagesEarlier+a.PagesIO, a.PagesIO, a.PagesCached)
	}
	if e := res.Effect; e.Configured {
		t := e.Total
		fmt.Fprintf(&b, "  effect: %d pages prefetched: %d used in time, %d late, %d wasted (%d evicted unused); %d read by the command itself\n",
			t.Prefetched, t.UsedInTime, t.Late, t.Wasted, t.Evicted, t.DemandRead)
	}
	if res.Traced {
		s := res.Source
		fmt.Fprintf(&b, "  source: %d events, %d dropped, %d files\n", s.Events, s.Dropped, s.Files)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}
