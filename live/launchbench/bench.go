package launchbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Modes of a launch.
const (
	ModeBaseline   = "baseline"    // the command alone
	ModeRunNoop    = "run-noop"    // predictio run --backend none: tracing, learning and policies on, nothing read ahead
	ModeRun        = "run"         // predictio run with the learned profile
	ModeDaemonNoop = "daemon-noop" // the daemon running, learning, with no policy: it prefetches nothing
	ModeDaemon     = "daemon"      // the daemon running with its profiles
)

// DefaultModes are measured in this order, rotated every round.
var DefaultModes = []string{ModeBaseline, ModeRunNoop, ModeRun, ModeDaemonNoop, ModeDaemon}

// Config configures Run.
type Config struct {
	Bin         string   // the predictio binary
	Work        string   // work directory (inputs, profiles, daemon files)
	Programs    []string // names in Programs; nil means DefaultPrograms
	Modes       []string // nil means DefaultModes
	Rounds      int      // measured rounds; at least 5 for a report
	Learn       int      // launches learned (with run and with the daemon) before measuring; 0 means 3
	Warm        bool     // measure warm launches (no drop_caches) instead of cold ones
	MetricsAddr string   // the daemon's metrics endpoint; "" means 127.0.0.1:9479
	Log         io.Writer
}

// Sample is one measured launch.
type Sample struct {
	Program string        `json:"program"`
	Mode    string        `json:"mode"`
	Round   int           `json:"round"`
	Wall    time.Duration `json:"wall_ns"`
	Exit    int           `json:"exit"`
	// InBlock and MajFlt are the command's (and its waited children's)
	// block reads (512-byte units) and major faults, from wait4.
	InBlock uint64 `json:"inblock_512b"`
	MajFlt  uint64 `json:"major_faults"`
	// Residue is how many pages of the sentinel files were still cached
	// after drop_caches (mapped by other processes); 0 for a clean cold
	// run.
	Residue uint64 `json:"residue_pages"`
	// Metrics are the daemon's /metrics deltas for the program over the
	// launch (daemon modes).
	Metrics *MetricsDelta `json:"metrics,omitempty"`
}

// MetricsDelta is what the daemon's /metrics said about one launch.
type MetricsDelta struct {
	Prefetched float64 `json:"pages_prefetched"`
	UsedInTime float64 `json:"pages_used_in_time"`
	Late       float64 `json:"pages_late"`
	Launches   float64 `json:"launches_prefetched"`
	// Submitted is the pages the daemon's backend read ahead (not cached
	// already), over the whole daemon: the launch is all it serves then.
	Submitted float64 `json:"backend_pages_submitted"`
	// Effect says the daemon counted its pages' effect (its effect
	// setting): without it Prefetched, UsedInTime and Late are absent.
	Effect bool `json:"effect"`
	// DaemonRead is what the daemon process read from storage over the
	// launch (/proc/PID/io read_bytes), in 4 KiB pages: its prefetches,
	// measured outside it.
	DaemonRead float64 `json:"daemon_read_pages"`
}

// Report is a run's samples and their summary.
type Report struct {
	Started  time.Time   `json:"started"`
	Kernel   string      `json:"kernel"`
	Warm     bool        `json:"warm"`
	Rounds   int         `json:"rounds"`
	Learn    int         `json:"learned_launches"`
	Samples  []Sample    `json:"samples"`
	Rows     []Row       `json:"summary"`
	Skipped  []string    `json:"skipped,omitempty"`
	Agree    []Agreement `json:"metrics_agreement,omitempty"`
	Overhead []Overhead  `json:"overhead,omitempty"`
}

// Run measures the launches.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, rep: &Report{Started: time.Now(), Kernel: kernel(), Warm: cfg.Warm, Rounds: cfg.Rounds, Learn: cfg.Learn}}
	if err := b.prepare(); err != nil {
		return nil, err
	}
	if err := b.learn(ctx); err != nil {
		return nil, err
	}
	for r := range cfg.Rounds {
		modes := rotate(cfg.Modes, r)
		for _, m := range modes {
			if err := b.round(ctx, r, m); err != nil {
				return nil, err
			}
		}
	}
	b.rep.Rows = summarize(b.rep.Samples, cfg.Modes)
	b.rep.Agree = agreement(b.rep.Samples)
	return b.rep, nil
}

func (c *Config) fill() error {
	if c.Bin == "" {
		return errors.New("bench launch: no predictio binary")
	}
	if c.Work == "" {
		c.Work = "/var/tmp/predictio-bench-launch"
	}
	if c.Programs == nil {
		c.Programs = DefaultPrograms
	}
	if c.Modes == nil {
		c.Modes = DefaultModes
	}
	for _, m := range c.Modes {
		if !slices.Contains(DefaultModes, m) {
			return fmt.Errorf("bench launch: mode %q: want %s", m, strings.Join(DefaultModes, ", "))
		}
	}
	for _, p := range c.Programs {
		if _, ok := Programs[p]; !ok {
			return fmt.Errorf("bench launch: program %q: want %s", p, strings.Join(DefaultPrograms, ", "))
		}
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Learn <= 0 {
		c.Learn = 3
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = "127.0.0.1:9479"
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

func rotate(s []string, r int) []string {
	k := r % len(s)
	return append(append([]string{}, s[k:]...), s[:k]...)
}

// bench is one Run in progress.
type bench struct {
	cfg    Config
	rep    *Report
	progs  []Program
	dirs   map[string]string // program work directories
	keys   map[string]string // program name -> resolved executable (the profiles' key)
	daemon *Daemon
}

// prepare makes the work directory, the programs' inputs and the daemon's
// configurations.
func (b *bench) prepare() error {
	b.dirs, b.keys = map[string]string{}, map[string]string{}
	if err := os.MkdirAll(b.cfg.Work, 0o755); err != nil {
		return fmt.Errorf("bench launch: %w", err)
	}
	for _, name := range b.cfg.Programs {
		p := Programs[name]
		if err := available(p); err != nil {
			b.rep.Skipped = append(b.rep.Skipped, err.Error())
			fmt.Fprintf(b.cfg.Log, "bench launch: skipping %v\n", err)
			continue
		}
		dir := filepath.Join(b.cfg.Work, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("bench launch: %w", err)
		}
		if p.Setup != nil {
			if err := p.Setup(dir); err != nil {
				return fmt.Errorf("bench launch: set up %s: %w", name, err)
			}
		}
		exe, err := Executable(p.Cmd[0])
		if err != nil {
			return fmt.Errorf("bench launch: %w", err)
		}
		for _, sn := range p.Sentinels {
			expand(sn, dir) // resolves {py} now, not after a drop_caches
		}
		b.progs = append(b.progs, p)
		b.dirs[name], b.keys[name] = dir, exe
	}
	if len(b.progs) == 0 {
		return errors.New("bench launch: no program can run here")
	}
	var keys []string
	for _, k := range b.keys {
		keys = append(keys, k)
	}
	for name, noop := range map[string]bool{"daemon.toml": false, "daemon-noop.toml": true} {
		c := DaemonConfig{ProfileDir: filepath.Join(b.cfg.Work, "daemon-profiles"), Socket: filepath.Join(b.cfg.Work, "daemon.sock"),
			Metrics: b.cfg.MetricsAddr, Programs: keys, Launches: b.cfg.Learn, Noop: noop}
		if err := c.Write(filepath.Join(b.cfg.Work, name)); err != nil {
			return fmt.Errorf("bench launch: %w", err)
		}
	}
	return nil
}

// learn gives run and the daemon cfg.Learn cold launches of each program
// to learn from (with their own profile directories, emptied first).
func (b *bench) learn(ctx context.Context) error {
	for _, d := range []string{"run-profiles", "daemon-profiles"} {
		if err := os.RemoveAll(filepath.Join(b.cfg.Work, d)); err != nil {
			return err
		}
	}
	needRun := slices.Contains(b.cfg.Modes, ModeRun) || slices.Contains(b.cfg.Modes, ModeRunNoop)
	needDaemon := slices.Contains(b.cfg.Modes, ModeDaemon) || slices.Contains(b.cfg.Modes, ModeDaemonNoop)
	for i := range b.cfg.Learn {
		if needRun {
			for _, p := range b.progs {
				if _, err := b.launch(ctx, p, ModeRun, -1-i); err != nil {
					return err
				}
			}
		}
	}
	if needDaemon {
		if err := b.startDaemon(ModeDaemon); err != nil {
			return err
		}
		for i := range b.cfg.Learn {
			for _, p := range b.progs {
				if _, err := b.launch(ctx, p, ModeDaemon, -1-i); err != nil {
					b.stopDaemon()
					return err
				}
			}
		}
		b.stopDaemon()
	}
	return nil
}

// round measures every program in mode m.
func (b *bench) round(ctx context.Context, r int, m string) error {
	if m == ModeDaemon || m == ModeDaemonNoop {
		if err := b.startDaemon(m); err != nil {
			return err
		}
		defer b.stopDaemon()
	}
	for _, p := range b.progs {
		s, err := b.launch(ctx, p, m, r)
		if err != nil {
			return err
		}
		b.rep.Samples = append(b.rep.Samples, *s)
		fmt.Fprintf(b.cfg.Log, "round %d %-15s %-11s %8.1f ms  inblock %7d  residue %d\n", r, p.Name, m,
			float64(s.Wall)/1e6, s.InBlock, s.Residue)
	}
	return nil
}

// launch runs program p once in mode m (round < 0: a learning launch) and
// measures it.
func (b *bench) launch(ctx context.Context, p Program, m string, round int) (*Sample, error) {
	dir := b.dirs[p.Name]
	args := make([]string, len(p.Cmd))
	for i, a := range p.Cmd {
		args[i] = expand(a, dir)
	}
	switch m {
	case ModeRun, ModeRunNoop:
		pre := []string{"run", "--profile", filepath.Join(b.cfg.Work, "run-profiles"), "--keep", strconv.Itoa(b.cfg.Learn), "--daemon-socket", ""}
		if m == ModeRunNoop {
			pre = append(pre, "--backend", "none")
		}
		args = append(append(pre, "--"), args...)
		args = append([]string{b.cfg.Bin}, args...)
	}
	s := &Sample{Program: p.Name, Mode: m, Round: round}
	if b.cfg.Warm {
		if _, err := runCmd(ctx, args, dir); err != nil { // warm it up
			return nil, fmt.Errorf("bench launch: warm %s: %w", p.Name, err)
		}
	} else {
		res, err := dropCaches(p, dir)
		if err != nil {
			return nil, err
		}
		s.Residue = res
	}
	var before map[string]float64
	var read0 uint64
	if m == ModeDaemon || m == ModeDaemonNoop {
		before = b.scrape()
		read0 = b.daemon.ReadBytes()
	}
	res, err := runCmd(ctx, args, dir)
	if err != nil {
		return nil, fmt.Errorf("bench launch: %s (%s): %w", p.Name, m, err)
	}
	s.Wall, s.Exit, s.InBlock, s.MajFlt = res.wall, res.exit, res.inblock, res.majflt
	if before != nil {
		// The daemon learns the launch when it ends: let it settle.
		time.Sleep(100 * time.Millisecond)
		s.Metrics = delta(before, b.scrape(), b.keys[p.Name])
		s.Metrics.DaemonRead = float64(b.daemon.ReadBytes()-read0) / 4096
	}
	return s, nil
}

type cmdResult struct {
	wall            time.Duration
	exit            int
	inblock, majflt uint64
}

// runCmd runs args with stdout and stderr discarded and measures it.
func runCmd(ctx context.Context, args []string, dir string) (cmdResult, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return cmdResult{}, err
	}
	r := cmdResult{wall: wall, exit: cmd.ProcessState.ExitCode()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.inblock, r.majflt = uint64(ru.Inblock), uint64(ru.Majflt)
	}
	if r.exit != 0 {
		return r, fmt.Errorf("exit %d: %s", r.exit, strings.TrimSpace(stderr.String()))
	}
	return r, nil
}

// dropCaches empties the page cache (and dentries and inodes) and checks
// that the program's sentinel files are cold, a few tries; it returns the
// sentinels' pages still cached (mapped by other processes: residue).
func dropCaches(p Program, dir string) (uint64, error) {
	var res uint64
	for range 3 {
		unix.Sync()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			return 0, fmt.Errorf("bench launch: drop caches (needs root): %w", err)
		}
		res = 0
		for _, s := range p.Sentinels {
			res += cachedPages(expand(s, dir))
		}
		if res == 0 {
			return 0, nil
		}
	}
	return res, nil
}

// cachedPages is cachestat(2) of a file (Linux 6.5); 0 when unknown.
func cachedPages(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var cs unix.Cachestat_t
	if unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0) != nil {
		return 0
	}
	return cs.Cache
}

// startDaemon starts the daemon of mode m and waits for its socket.
func (b *bench) startDaemon(m string) error {
	name := "daemon.toml"
	if m == ModeDaemonNoop {
		name = "daemon-noop.toml"
	}
	return b.startDaemonConfig(name)
}

// startDaemonConfig starts the daemon with the configuration file name of
// the work directory and waits for its socket.
func (b *bench) startDaemonConfig(name string) error {
	d, err := StartDaemon(b.cfg.Bin, filepath.Join(b.cfg.Work, name), filepath.Join(b.cfg.Work, "daemon.sock"), filepath.Join(b.cfg.Work, "daemon.log"))
	if err != nil {
		return fmt.Errorf("bench launch: %w", err)
	}
	b.daemon = d
	return nil
}

func (b *bench) stopDaemon() {
	b.daemon.Stop()
	b.daemon = nil
}

// scrape reads the daemon's /metrics samples.
func (b *bench) scrape() map[string]float64 {
	m := map[string]float64{}
	resp, err := http.Get("http://" + b.cfg.MetricsAddr + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// delta is the change of a program's daemon metrics.
func delta(a, b map[string]float64, program string) *MetricsDelta {
	get := func(m map[string]float64, effect string) float64 {
		return m[`predictio_daemon_program_pages_total{effect="`+effect+`",program="`+program+`"}`]
	}
	const submitted = `predictio_daemon_backend_pages_total{state="submitted"}`
	_, effect := b[`predictio_daemon_program_pages_total{effect="prefetched",program="`+program+`"}`]
	return &MetricsDelta{
		Submitted:  b[submitted] - a[submitted],
		Effect:     effect,
		Prefetched: get(b, "prefetched") - get(a, "prefetched"),
		UsedInTime: get(b, "used_in_time") - get(a, "used_in_time"),
		Late:       get(b, "late") - get(a, "late"),
		Launches: b[`predictio_daemon_program_launches_total{action="prefetched",program="`+program+`"}`] -
			a[`predictio_daemon_program_launches_total{action="prefetched",program="`+program+`"}`],
	}
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
