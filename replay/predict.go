package replay

import (
	"fmt"
	"sort"
	"strings"

	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
)

// multiPolicy runs several policies as one, for "a+b" run specs.
type multiPolicy []policies.Policy

func (m multiPolicy) Accepts(k policies.EventKind) bool {
	for _, p := range m {
		if p.Accepts(k) {
			return true
		}
	}
	return false
}

func (m multiPolicy) Handle(ev *policies.Event, emit policies.Emit) {
	for _, p := range m {
		if p.Accepts(ev.Kind) {
			p.Handle(ev, emit)
		}
	}
}

// Prediction is the device model of the predicted column.
type Prediction struct {
	Device simulate.Device
	// Calibrated is true when Device was measured (a device profile);
	// the report carries it as summary.predicted_calibrated.
	Calibrated bool
	// DevicePath is a file on the modelled device of this machine, whose
	// readahead parameters files off this machine take; "" for none.
	DevicePath string
	// Notes are caveats about the device (uncalibrated, old profile).
	Notes []string
	// FileRates scale each file's device time by the recording
	// (simulate.FitFileRates); nil: the device's rates for every file.
	// They describe the recorded files, so a replay under --root leaves
	// them out.
	FileRates *simulate.FileRates
}

// RecordedPaths reports whether the replay reads the recorded files at
// their recorded paths (no --root).
func (r *Replayer) RecordedPaths() bool { return r.opt.Root == "" }

// FilePaths returns where the replay reads its files, on this machine.
func (r *Replayer) FilePaths() []string {
	var out []string
	for _, f := range r.t.used() {
		if p := r.paths[f.idx]; p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Predict simulates the replayed accesses and hints with the same run
// specs and fills each summary policy's predicted_wall_ns and
// predicted_speedup, the baseline's included, and summary.predicted_*.
// The page cache is the direct backend's --cache (without kernel
// readahead) or, for the page-cache backends, large enough for every file
// (with the readahead model, on each file's device's read_ahead_kb and
// max_sectors_kb). Every recorded thread runs on its own clock against one
// device; think times are the replay's: recorded (divided by --speed), or
// none with --timing asap.
func (r *Replayer) Predict(rep *Report, pred Prediction) error {
	var specs []string
	for _, s := range r.opt.Runs {
		if s != Baseline {
			specs = append(specs, s)
		}
	}
	ps := r.t.pageSize
	cfg := simulate.Config{PageSize: ps, Device: pred.Device, Calibrated: pred.Calibrated, Policies: specs, Speed: r.opt.Speed, InFlight: r.opt.InFlight, PerKind: true}
	var hostNote string
	if cfg.Device.Host != nil && r.opt.Backend != BackendKernel {
		// The host model's issue costs are the kernel backend's.
		cfg.Device.Host = nil
		hostNote = fmt.Sprintf("the %s backend's CPU costs are not modelled (the device profile's host costs are the kernel backend's)", r.opt.Backend)
	}
	if r.opt.Timing == TimingASAP {
		cfg.NoThink = true
	}
	if r.opt.Backend == BackendDirect {
		if cfg.Device.DirectBytesPerSec > 0 { // O_DIRECT reads, not the page cache's
			cfg.Device.BytesPerSec = cfg.Device.DirectBytesPerSec
		}
		c := r.opt.CachePages
		if c <= 0 {
			c = 65536
		}
		cfg.CacheBytes = int64(c) * int64(ps)
		cfg.NoReadahead = true
	} else {
		var total int64
		for _, f := range r.t.used() {
			total += int64(f.Size)
		}
		cfg.CacheBytes = max(2*total, 64<<20)
	}
	cfg.Env = r.policyEnv()
	if r.RecordedPaths() {
		cfg.FileRates = pred.FileRates
	}
	for _, f := range r.t.files {
		cfg.BlockFiles = simulate.AddBlockFile(cfg.BlockFiles, &f.File)
	}
	paths := map[uint32]string{}
	var dirs []simulate.DirFile
	for _, f := range r.t.used() {
		paths[f.ID] = r.paths[f.idx]
		dirs = append(dirs, simulate.DirFile{ID: f.ID, Path: r.paths[f.idx], Size: f.Size})
	}
	if cfg.Device.Host != nil {
		cfg.Dirs = simulate.NewDirs(dirs, ps)
	}
	ra := simulate.ReadaheadOnThisMachine(paths, pred.DevicePath)
	cfg.Env.FileRA = ra.FileRA
	cfg.Build = func(spec string, env policies.Env) (policies.Policy, error) {
		var m multiPolicy
		for _, one := range strings.Split(spec, "+") {
			if policies.SpecName(one) == "oracle" {
				if r.fut == nil {
					r.fut = r.t.future()
				}
				env.Future = r.fut
			}
			p, err := policies.Build(one, env)
			if err != nil {
				return nil, err
			}
			m = append(m, p)
		}
		if len(m) == 1 {
			return m[0], nil
		}
		return m, nil
	}
	sim, err := simulate.Run(cfg, &simulate.SliceSource{Events: r.events()})
	if err != nil {
		return fmt.Errorf("predict with simulate: %w", err)
	}
	base := sim.Lane(simulate.BaselineName)
	predictKinds(rep.Summary.Fidelity, base)
	for i := range rep.Summary.Policies {
		p := &rep.Summary.Policies[i]
		st := base
		if p.Policy != Baseline {
			st = laneOf(sim, p.Policy)
		}
		if st == nil {
			continue
		}
		p.PredictedWallNS, p.Predicted = float64(st.WallNS), st.Speedup
		p.PredictedBackendBusyNS = float64(st.BackendBusyNS)
		if p.Policy != Baseline {
			rep.Summary.PredictedSpeedup = st.Speedup
		}
	}
	rep.Summary.PredictedCalibrated = pred.Calibrated
	raText := "with the readahead model"
	if cfg.NoReadahead {
		raText = "without readahead"
	}
	cal := "uncalibrated"
	if pred.Calibrated {
		cal = "calibrated"
	}
	d := pred.Device
	desc := fmt.Sprintf("simulate, %s: device %s (%s; latency %.0f µs, %.0f MB/s, QD %d), cache %s %s, think time %s; baseline stall %.1f ms",
		cal, d.Name, d.Source, float64(d.LatencyNS)/1e3, d.BytesPerSec/1e6, d.QueueDepth, simulate.FormatSize(cfg.CacheBytes), raText, sim.ThinkTime, float64(base.StallNS)/1e6)
	notes := append(append([]string{}, pred.Notes...), sim.Notes...)
	if hostNote != "" {
		notes = append(notes, hostNote)
	}
	if !cfg.NoReadahead {
		notes = append(notes, ra.Summary)
	}
	if len(notes) > 0 {
		desc += ". " + strings.Join(notes, ". ")
	}
	rep.Summary.Predictor = desc
	return nil
}

// laneOf returns the lane that simulated run spec spec.
func laneOf(sim *simulate.Report, spec string) *simulate.Stats {
	spec = strings.TrimSpace(spec)
	for i := range sim.Policies {
		if st := &sim.Policies[i]; st.Spec == spec && st.Name != simulate.BaselineName {
			return st
		}
	}
	return nil
}

// events returns the replayed accesses and the hints as policy events in
// timestamp order, hints first on equal timestamps.
func (r *Replayer) events() []policies.Event {
	t := r.t
	evs := make([]policies.Event, 0, t.ops+len(t.hints))
	for _, h := range t.hints {
		var ev policies.Event
		if ev.FromHint(&h) {
			evs = append(evs, ev)
		}
	}
	for i := range t.execRows { // ProcessExec: the launch policy's trigger
		var ev policies.Event
		ev.FromAccess(&t.execRows[i])
		evs = append(evs, ev)
	}
	for i := range t.metaReads { // metadata blocks the program's lookups read
		var ev policies.Event
		ev.FromAccess(&t.metaReads[i])
		evs = append(evs, ev)
	}
	for _, th := range t.threads {
		for _, o := range th.ops {
			// With the operation's completion, mapping and op, so that
			// simulate takes its think time after completion and the
			// exec readahead path where the mapping was executable.
			evs = append(evs, policies.Event{Kind: policies.EventFileAccess, TS: o.ts, PID: th.pid, TID: th.tid, File: t.files[o.file].ID,
				Access: o.access()})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].TS != evs[j].TS {
			return evs[i].TS < evs[j].TS
		}
		return evs[i].Kind != policies.EventFileAccess && evs[j].Kind == policies.EventFileAccess
	})
	return evs
}

// predictKinds sets the predicted times of each kind of fs from the
// baseline lane's (the kinds the model saw; a kind it did not keeps none).
func predictKinds(fs []KindFidelity, base *simulate.Stats) {
	if base == nil {
		return
	}
	by := make(map[string]simulate.KindTimes, len(base.Kinds))
	for _, k := range base.Kinds {
		by[k.Kind] = k
	}
	for i := range fs {
		if k, ok := by[fs[i].Kind]; ok {
			fs[i].PredictedServiceNS, fs[i].PredictedThinkNS = k.ServiceNS, k.ThinkNS
		}
	}
}
