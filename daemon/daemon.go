// Package daemon is `predictio daemon`: a system-wide service that
// watches every exec on the machine, learns a launch profile per program
// from its recent launches (the files and pages they touched, traced only
// for the launches it learns, filtered in the kernel), prefetches a known
// program's profile the moment it is exec'd, serves hint sockets for the
// tree and tensor policies, and reports what it did on a Prometheus
// endpoint and a control socket. It shares the live runtime (package
// live) with `predictio run`. docs/daemon.md describes it.
package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/predictio/predictio/adapters"
	"github.com/predictio/predictio/effect"
	"github.com/predictio/predictio/live"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/source"
)

// Daemon is one running daemon.
type Daemon struct {
	cfgPath string
	log     *slog.Logger
	level   *slog.LevelVar
	started time.Time

	src   *source.Source
	stage *adapters.Stage // nil: no adapters
	ob    *effect.Observer
	ac    *source.AccessChecker
	loop  *live.Loop
	ctl   net.Listener
	http  *http.Server

	metricsAddr string
	execDrops   atomic.Uint64

	mu       sync.Mutex // guards everything below; held while a batch is consumed
	cfg      Config
	store    *store
	launches map[uint32]*launch // by their first process
	follows  int                // launches in it that are followed (FollowPoll while > 0)
	unused   map[string]int     // followed programs: launches in a row that read little (followByUse)
	members  map[uint32]*launch // every process of a launch
	strays   map[uint32]time.Time
	claims   map[int]int // pids claimed by predictio run (reference counts)
	targets  map[string]bool
	resolved map[string]resolved
	trace    *tracer
	execs    chan execNote
	st       counters
	notes    []string
	closed   bool
}

// counters are the daemon's own counts (the loop, the source and the
// backend keep theirs).
type counters struct {
	execs, ignored, claimed, learned, prefetched, notLearned, invalidated uint64
	relearned, strayRemoved, launchEvents                                 uint64
	warmUntraced                                                          uint64 // followed launches no longer traced: they ran warm
	byProgram                                                             map[string]*programCounts
}

// programCounts are a program's counts, for the metrics.
type programCounts struct {
	Launches, Learned, Prefetched, Events uint64
}

// Options are New's arguments besides the configuration.
type Options struct {
	// ConfigPath is the file SIGHUP reloads; "" for none.
	ConfigPath string
	// Log receives the structured logs; nil means stderr.
	Log io.Writer
	// BTFCacheDir is the source's BTF cache (tests); "" is its default.
	BTFCacheDir string
}

// New starts the daemon's parts: the profile store, the effect observer,
// the event source (exec events of every task; file accesses only of the
// launches it learns), the loop and its backend, the control socket and
// the metrics endpoint. Run then serves until the context ends.
func New(cfg Config, o Options) (*Daemon, error) {
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	w := o.Log
	if w == nil {
		w = os.Stderr
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, hopts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, hopts)
	}
	d := &Daemon{cfgPath: o.ConfigPath, log: slog.New(h), level: level, started: time.Now(), cfg: cfg, execs: make(chan execNote, 4096),
		launches: map[uint32]*launch{}, members: map[uint32]*launch{}, strays: map[uint32]time.Time{},
		claims: map[int]int{}, targets: map[string]bool{}, resolved: map[string]resolved{}, unused: map[string]int{}}
	d.st.byProgram = map[string]*programCounts{}
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	var err error
	if d.store, err = openStore(cfg.ProfileDir, cfg.Limits.MaxProfiles, int(cfg.Limits.MaxProfileBytes), d.log); err != nil {
		return nil, err
	}
	if d.ac, err = source.NewAccessChecker(); err != nil {
		return nil, fmt.Errorf("start the daemon: %w (it prefetches for other users only after checking as them)", err)
	}
	if !cfg.Effect {
		d.notes = append(d.notes, "no counters by effect: effect = false")
	} else if d.ob, err = effect.NewObserver(effect.Options{LazyReads: true, KernelThreads: cfg.Backend == "kmod"}); err != nil {
		d.log.Warn("no counters by effect (pages used in time, late, wasted)", "err", err)
		d.notes = append(d.notes, fmt.Sprintf("no counters by effect: %v", err))
		d.ob = nil
	}
	if err := d.startLoop(); err != nil {
		return nil, err
	}
	// Events in batches (every poll, 20 ms by default, or 256 KiB: nearly
	// free for the traced programs), execs at once through the opens ring
	// (OnExec).
	if d.src, err = source.Open(source.Config{
		Exec: source.ExecAll, Latency: source.Batched, Poll: cfg.Poll.Duration, OnExec: d.hookExec, RingBytes: int(cfg.Limits.RingBytes),
		HintSocket: cfg.HintSocket, HintUIDs: cfg.HintUIDs, Exclude: []string{cfg.ProfileDir}, BTFCacheDir: o.BTFCacheDir,
	}); err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	d.loop.Attach(d.src)
	for _, p := range d.store.model.Profiles() {
		d.target(p)
	}
	// Between launches only the fork, exit and exec programs run.
	d.trace = newTracer(d.src, d.log)
	if err := d.src.Pause(); err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	go d.execWorker()
	if err := d.src.Start(d); err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	// The control socket answers once execs are followed: a status query
	// that succeeds means the next launch is seen.
	if err := d.listen(); err != nil {
		return nil, err
	}
	if err := d.serveMetrics(); err != nil {
		return nil, err
	}
	ok = true
	d.log.Info("started", "profiles", d.store.model.Len(), "profile_dir", cfg.ProfileDir, "socket", cfg.Socket,
		"metrics", cfg.Metrics, "hint_socket", cfg.HintSocket, "backend", cfg.Backend, "policies", cfg.Policies)
	return d, nil
}

// startLoop builds the loop: the configured policies (markov trained on
// every profile's launches), bounded by the limits.
func (d *Daemon) startLoop() error {
	specs := make([]string, 0, len(d.cfg.Policies))
	for _, s := range d.cfg.Policies {
		if policies.SpecName(s) == "launch" && s == "launch" {
			s = fmt.Sprintf("launch:pages=%d,files=%d", d.cfg.Limits.LaunchPages, d.cfg.Limits.LaunchFiles)
		}
		specs = append(specs, s)
	}
	l, err := live.New(live.Config{
		Policies: specs, Launch: d.store.model, Markov: d.markov(), Backend: d.cfg.Backend,
		Access: d.ac, Tap: d.observe, Effect: d.ob,
		Warn: func(m string) { d.log.Debug(m) },
	}, nil)
	if err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	d.loop = l
	as, _ := adapters.ParseList(d.cfg.Adapters) // checked with the config
	if len(as) == 0 {
		return nil
	}
	st, err := adapters.NewStage(adapters.Config{Adapters: as, HeaderFirst: true, ReadCached: true, Warn: func(m string) { d.log.Info(m) }}, l.AdapterFiles())
	if err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	d.stage = st
	l.SetStage(st)
	return nil
}

// markov trains the markov model on every profile's launches (at start
// and on SIGHUP).
func (d *Daemon) markov() *policies.MarkovModel {
	return policies.TrainMarkov(d.store.model.Profiles(), uint32(os.Getpagesize()))
}

// Run serves until ctx is done or SIGTERM/SIGINT arrives, reloading the
// configuration on SIGHUP, then stops.
func (d *Daemon) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	for {
		select {
		case <-ctx.Done():
			return d.Close()
		case <-d.src.Failed():
			err := d.src.Err()
			d.Close()
			return fmt.Errorf("daemon: %w", err)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				d.Reload()
				continue
			}
			d.log.Info("stopping", "signal", s.String())
			return d.Close()
		}
	}
}

// Consume is the source's consumer: the loop dispatches the batch, and
// observe (its Tap) follows the launches.
func (d *Daemon) Consume(b *source.Batch) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loop.Consume(b)
}

// Reload re-reads the configuration file (SIGHUP): what can change while
// running changes (learn.*, limits.max_profiles, log_level; the profile
// directory is rescanned); the rest needs a restart, which a warning
// says.
func (d *Daemon) Reload() {
	if d.cfgPath == "" {
		d.log.Info("reload: no configuration file; rescanning the profiles")
		d.mu.Lock()
		d.store.reload()
		d.mu.Unlock()
		return
	}
	cfg, err := LoadConfig(d.cfgPath, false)
	if err != nil {
		d.log.Error("reload: keeping the running configuration", "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cfg
	var restart []string
	for _, c := range []struct {
		key  string
		same bool
	}{
		{"profile_dir", old.ProfileDir == cfg.ProfileDir}, {"socket", old.Socket == cfg.Socket},
		{"metrics", old.Metrics == cfg.Metrics}, {"hint_socket", old.HintSocket == cfg.HintSocket},
		{"backend", old.Backend == cfg.Backend}, {"policies", fmt.Sprint(old.Policies) == fmt.Sprint(cfg.Policies)},
		{"log_format", old.LogFormat == cfg.LogFormat}, {"limits.ring_bytes", old.Limits.RingBytes == cfg.Limits.RingBytes},
		{"limits.queue", old.Limits.Queue == cfg.Limits.Queue}, {"limits.in_flight", old.Limits.InFlight == cfg.Limits.InFlight},
		{"limits.launch_pages", old.Limits.LaunchPages == cfg.Limits.LaunchPages},
		{"limits.launch_files", old.Limits.LaunchFiles == cfg.Limits.LaunchFiles},
	} {
		if !c.same {
			restart = append(restart, c.key)
		}
	}
	keep := cfg
	keep.ProfileDir, keep.Socket, keep.Metrics, keep.HintSocket = old.ProfileDir, old.Socket, old.Metrics, old.HintSocket
	keep.Backend, keep.Policies, keep.LogFormat = old.Backend, old.Policies, old.LogFormat
	keep.Limits.RingBytes, keep.Limits.Queue, keep.Limits.InFlight = old.Limits.RingBytes, old.Limits.Queue, old.Limits.InFlight
	keep.Limits.LaunchPages, keep.Limits.LaunchFiles = old.Limits.LaunchPages, old.Limits.LaunchFiles
	d.cfg = keep
	d.store.max = cfg.Limits.MaxProfiles
	d.store.maxBytes = int(cfg.Limits.MaxProfileBytes)
	_ = d.level.UnmarshalText([]byte(cfg.LogLevel))
	d.store.reload()
	for _, p := range d.store.model.Profiles() {
		d.target(p)
	}
	if len(restart) > 0 {
		d.log.Warn("reload: these keys changed and apply only after a restart", "keys", restart)
	}
	d.log.Info("reloaded", "config", d.cfgPath, "profiles", d.store.model.Len())
}

// Close stops the daemon: tracing ends, launches being learned are
// dropped (profiles keep their last save), queued saves are written.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.close()
	d.log.Info("stopped")
	return nil
}

func (d *Daemon) close() {
	if d.http != nil {
		d.http.Close()
	}
	if d.ctl != nil {
		d.ctl.Close()
		os.Remove(d.cfg.Socket)
	}
	if d.trace != nil {
		d.trace.stop()
	}
	if d.src != nil {
		d.src.Close()
		close(d.execs) // the opens reader, which sends on it, has stopped
	}
	if d.loop != nil {
		d.loop.Close()
	}
	if d.stage != nil {
		d.stage.Close()
	}
	if d.ob != nil {
		d.ob.Close()
	}
	if d.ac != nil {
		d.ac.Close()
	}
	if d.store != nil {
		d.store.close()
	}
}
