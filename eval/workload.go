package eval

import (
	"context"
	"os"
	"path/filepath"
	"strings"
)

// liveMode is a mode of a workload suite: its policies under predictio run
// (none: the workload alone) and its backend ("none": noop).
type liveMode struct {
	name     string
	policies []string
	backend  string
	alone    bool // the workload without predictio (Baseline)
}

// commandRun runs argv once per round, times it, lets parse add the
// workload's own metrics from its output, and adds predictio run's
// counters when it ran under it.
func commandRun(lr *liveRuntime, dir string, argv []string, parse func(out []byte, s *Sample) error) func(context.Context, *RunInfo) (*Sample, error) {
	return func(ctx context.Context, _ *RunInfo) (*Sample, error) {
		run, jf := lr.withJSON(argv, dir)
		el, out, err := timed(ctx, dir, run)
		if err != nil {
			return nil, err
		}
		s := &Sample{Metrics: map[string]float64{"wall_s": el.Seconds()}}
		if parse != nil {
			if err := parse(out, s); err != nil {
				return nil, err
			}
		}
		if jf != "" {
			runCounters(jf, s)
		}
		return s, nil
	}
}

// liveModeSpecs builds the point's modes: each of ms, then one per extra
// policy spec, each under predictio run unless alone.
func liveModeSpecs(lr *liveRuntime, dir string, argv []string, ms []liveMode, extra []string, parse func([]byte, *Sample) error) []ModeSpec {
	for _, p := range extra {
		ms = append(ms, liveMode{name: p, policies: []string{p}})
	}
	var out []ModeSpec
	for _, m := range ms {
		if m.alone {
			out = append(out, ModeSpec{Name: m.name, Run: commandRun(nil, dir, argv, parse)})
			continue
		}
		run, why := lr.command(m.policies, m.backend, argv)
		out = append(out, ModeSpec{Name: m.name, NotRun: why, Run: commandRun(lr, dir, run, parse)})
	}
	return out
}

// keepFile reports whether a workload file already exists and is
// complete: its marker NAME.complete exists.
func keepFile(path string) bool {
	_, err := os.Stat(path + ".complete")
	if err != nil {
		return false
	}
	_, err = os.Stat(path)
	return err == nil
}

// markComplete writes path's marker, so that the next run reuses it.
func markComplete(path, what string) error {
	return os.WriteFile(path+".complete", []byte(strings.TrimSpace(what)+"\n"), 0o644)
}

// startOver removes a partial workload file and its marker.
func startOver(path string) {
	os.RemoveAll(path)
	os.Remove(path + ".complete")
	os.MkdirAll(filepath.Dir(path), 0o755)
}
