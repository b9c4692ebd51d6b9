package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/harness"
)

// Default rounds per mode: the paper reports medians of three to five
// cold runs.
const (
	DefaultRounds      = 5
	DefaultQuickRounds = 2
)

// Options configures Run.
type Options struct {
	Suites   []string // suite names or "all"; empty means all
	Policies []string // extra policy specs, measured beside each suite's own
	Device   string   // device preset: this, sata-ssd or hdd ("" is this)
	Rounds   int      // rounds per mode; 0 is the default (5, quick 2)
	Quick    bool     // the reduced suites, for CI
	Out      string   // the output directory
	// WorkDir holds the workloads (databases, files); it must be on the
	// disk being measured. Default /var/tmp/predictio-eval.
	WorkDir string
	// Predictio is the predictio binary (for predictio run); default the
	// running executable when it is predictio. Without one, modes that
	// need predictio run are reported as not run.
	Predictio string
	// EvictOnly evicts only each workload's own files before a run
	// (POSIX_FADV_DONTNEED) instead of also writing drop_caches, which
	// the paper's method does; tests sharing a machine set it.
	EvictOnly bool
	// NoDeviceCheck skips measuring the device preset with bench device.
	NoDeviceCheck bool
	// Progress receives progress lines; nil discards them.
	Progress io.Writer
}

// DefaultWorkDir is where workloads are built when Options.WorkDir is "".
const DefaultWorkDir = "/var/tmp/predictio-eval"

// Run runs the selected suites into o.Out: results.json after every point
// (a rerun resumes and skips finished points), then report.md,
// report.html and the plots.
func Run(ctx context.Context, o Options) (*Results, error) {
	sel, err := Select(o.Suites)
	if err != nil {
		return nil, err
	}
	x, err := newRunner(ctx, o)
	if err != nil {
		return nil, err
	}
	defer x.close()
	if x.res.Machine.Commit == "" {
		x.prog.logf("eval: warning: the points will record no commit: %s", noCommit)
	}
	x.prog.planSuites(sel, o.Quick, x.res.Device.Preset, x.ctx.Rounds)
	for _, s := range sel {
		if err := ctx.Err(); err != nil {
			break
		}
		x.runSuite(ctx, s)
		if err := x.res.Save(o.Out); err != nil {
			return x.res, err
		}
	}
	x.res.Finished = time.Now().UTC()
	if err := x.res.Save(o.Out); err != nil {
		return x.res, err
	}
	if err := WriteReport(o.Out, x.res); err != nil {
		return x.res, err
	}
	return x.res, ctx.Err()
}

// runner holds one Run's state.
type runner struct {
	o        Options
	res      *Results
	done     map[string]*Point // finished points of earlier runs, by key
	throttle *harness.Throttle
	// others are the throttles of points with their own preset.
	others map[string]*harness.Throttle
	cur    *harness.Throttle // the throttle of the point being run
	prog   *progress
	ctx    *Context
	// host are the host's costs, measured without a throttle, for the
	// device checks of throttled presets.
	host *formats.HostCosts
}

func newRunner(ctx context.Context, o Options) (*runner, error) {
	if o.Out == "" {
		return nil, errors.New("run eval: no output directory; give -o DIR")
	}
	if o.Device == "" {
		o.Device = "this"
	}
	preset, err := harness.PresetByName(o.Device)
	if err != nil {
		return nil, fmt.Errorf("run eval: %w", err)
	}
	if o.WorkDir == "" {
		o.WorkDir = DefaultWorkDir
	}
	if o.Predictio == "" {
		o.Predictio = selfPredictio()
	}
	for _, d := range []string{o.Out, o.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("run eval: %w", err)
		}
	}
	rounds := o.Rounds
	if rounds <= 0 {
		rounds = defaultRounds(o.Quick)
	}
	x := &runner{o: o, done: map[string]*Point{}, prog: newProgress(o.Progress), others: map[string]*harness.Throttle{}}
	if err := x.resume(preset); err != nil {
		return nil, err
	}
	x.ctx = &Context{WorkDir: o.WorkDir, Quick: o.Quick, Rounds: rounds, Policies: o.Policies, DropCaches: !o.EvictOnly,
		Device: preset, Predictio: o.Predictio, Log: x.prog.logf}
	if err := x.setupDevice(ctx, preset); err != nil {
		return nil, err
	}
	return x, nil
}

// resume loads earlier results from o.Out, refusing a directory measured
// on another device preset or quickness (their points would mix).
func (x *runner) resume(preset harness.Preset) error {
	prev, err := LoadResults(x.o.Out)
	if err != nil {
		return err
	}
	x.res = &Results{Schema: Schema, Started: time.Now().UTC(), Machine: harness.ThisMachine(),
		Quick: x.o.Quick, Rounds: x.o.Rounds, Policies: x.o.Policies}
	x.res.Device.Preset = preset
	if prev == nil {
		return nil
	}
	if prev.Device.Preset.Name != preset.Name || prev.Quick != x.o.Quick {
		return fmt.Errorf("run eval: %s holds results for device %s (quick %v); give another -o for device %s (quick %v), or move it away",
			x.o.Out, prev.Device.Preset.Name, prev.Quick, preset.Name, x.o.Quick)
	}
	x.res.Started = prev.Started
	x.res.Suites = prev.Suites
	x.res.Device.Check = prev.Device.Check
	x.res.Device.Profile = prev.Device.Profile
	x.res.OtherDevices = prev.OtherDevices
	for _, s := range prev.Suites {
		for _, p := range s.Points {
			if p.Status == StatusOK {
				x.done[pointKey(p.Suite, p.ID, p.DevicePreset, p.Quick)] = p
			}
		}
	}
	return nil
}

func (x *runner) close() {
	for _, t := range append([]*harness.Throttle{x.throttle}, values(x.others)...) {
		if t != nil {
			if err := t.Close(); err != nil {
				x.prog.logf("eval: %v", err)
			}
		}
	}
}

func values[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// runSuite plans and measures one suite into x.res.
func (x *runner) runSuite(ctx context.Context, s Suite) {
	info := s.Info()
	sr := &SuiteResult{Name: info.Name, Figures: info.Figures, Measures: info.Measures, Needs: info.Needs}
	sr.ExpectedS = expected(info, x.o.Quick, x.ctx.Device, x.ctx.Rounds).Seconds()
	x.replaceSuite(sr)
	start := time.Now()
	defer func() { sr.ElapsedS = time.Since(start).Seconds() }()
	x.prog.startSuite(info.Name)
	plan, err := s.Plan(ctx, x.ctx)
	if err != nil {
		sr.Status, sr.Reason = StatusFailed, "set up: "+err.Error()
		x.prog.logf("eval: %s: %s", info.Name, sr.Reason)
		return
	}
	sr.Notes = plan.Notes
	if plan.NotRun != "" {
		sr.Status, sr.Reason = StatusNotRun, plan.NotRun
		x.prog.logf("eval: %s: not run: %s", info.Name, plan.NotRun)
		return
	}
	x.prog.planPoints(info.Name, plan.Points, x.ctx.Rounds)
	for _, ps := range plan.Points {
		if ctx.Err() != nil {
			break
		}
		key := pointKey(info.Name, ps.ID, x.presetOf(ps), x.o.Quick)
		if p, ok := x.done[key]; ok && hasModes(p, ps.Modes) {
			sr.Points = append(sr.Points, p)
			x.prog.skip(info.Name, ps, x.rounds(ps))
			continue
		}
		p := x.runPoint(ctx, info.Name, ps)
		sr.Points = append(sr.Points, p)
		if err := x.res.Save(x.o.Out); err != nil {
			x.prog.logf("eval: %v", err)
		}
	}
	sr.Status = suiteStatus(sr.Points)
	if sr.Status != StatusOK {
		sr.Reason = suiteReason(sr.Points)
	}
}

// hasModes reports whether a finished point holds every mode of the plan
// (a build that adds a mode measures the point again).
func hasModes(p *Point, modes []ModeSpec) bool {
	for _, m := range modes {
		if p.Mode(m.Name) == nil {
			return false
		}
	}
	return true
}

// replaceSuite puts sr in place of an earlier result of the same suite
// (whose finished points were already taken into x.done).
func (x *runner) replaceSuite(sr *SuiteResult) {
	for i, s := range x.res.Suites {
		if s.Name == sr.Name {
			x.res.Suites[i] = sr
			return
		}
	}
	x.res.Suites = append(x.res.Suites, sr)
}

func (x *runner) rounds(ps *PointSpec) int {
	if ps.Rounds > 0 {
		return ps.Rounds
	}
	return x.ctx.Rounds
}

func suiteStatus(ps []*Point) string {
	var ok, other int
	for _, p := range ps {
		if p.Status == StatusOK {
			ok++
		} else {
			other++
		}
	}
	switch {
	case len(ps) == 0:
		return StatusNotRun
	case other == 0:
		return StatusOK
	case ok > 0 || anyModeOK(ps):
		return StatusPartial
	}
	for _, p := range ps {
		if p.Status == StatusFailed {
			return StatusFailed
		}
	}
	return StatusNotRun
}

func anyModeOK(ps []*Point) bool {
	for _, p := range ps {
		for _, m := range p.Modes {
			if m.Status == StatusOK {
				return true
			}
		}
	}
	return false
}

// suiteReason lists the distinct reasons of points or modes that did not
// run.
func suiteReason(ps []*Point) string {
	seen := map[string]bool{}
	var out []string
	add := func(r string) {
		if r != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, p := range ps {
		add(p.Reason) // it already names its modes' reasons
	}
	if len(out) > 4 {
		out = append(out[:4], fmt.Sprintf("and %d more", len(out)-4))
	}
	return joinSemi(out)
}

func joinSemi(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += "; "
		}
		out += v
	}
	return out
}

// workPath returns a path under the work directory.
func (c *Context) workPath(elem ...string) string {
	return filepath.Join(append([]string{c.WorkDir}, elem...)...)
}

// presetOf is the device preset point ps runs under.
func (x *runner) presetOf(ps *PointSpec) string {
	if ps.Device != "" {
		return ps.Device
	}
	return x.ctx.Device.Name
}

// selfPredictio returns the running executable unless it is a Go test
// binary (whose "run" is not predictio's), else "".
func selfPredictio() string {
	exe, err := os.Executable()
	if err != nil || strings.HasSuffix(filepath.Base(exe), ".test") {
		return ""
	}
	return exe
}
