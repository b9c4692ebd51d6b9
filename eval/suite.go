// Package eval is `predictio eval`: the PredictIO paper's evaluation as
// suites of real workloads, each run cold, alternated over rounds, with
// every point's spread and provenance in results.json and a report with
// plots (docs/eval.md).
package eval

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/harness"
)

// Suite is one part of the evaluation, after one or more of the paper's
// figures.
type Suite interface {
	Info() Info
	// Plan checks what the suite needs, sets up its workloads under
	// c.WorkDir and returns its points. A suite that cannot run returns a
	// plan with NotRun set, never an invented point.
	Plan(ctx context.Context, c *Context) (*Plan, error)
}

// Info describes a suite for --list, the report and results.json.
type Info struct {
	Name     string
	Figures  string // the paper's figures, e.g. "7-9"
	Measures string
	Needs    string
	// Expected is the expected time of the suite on the device preset,
	// setup included.
	Expected func(quick bool, dev harness.Preset) time.Duration
	// Paper is what the paper published for these figures, shown beside
	// ours in the report.
	Paper []PaperFigure
	// Plots draws the suite's figures from its results.
	Plots func(s *SuiteResult) []*Figure
	// Compare gives the suite's headline figures against the paper's.
	Compare func(s *SuiteResult) []Comparison
}

// PaperFigure is one of the paper's published figures, as numbers from
// its text (the paper's images are not shipped).
type PaperFigure struct {
	Figure  string   // "14"
	Caption string   // what it shows
	Values  []string // the published values, as the text states them
	// Plot is the published figure redrawn from those values, where the
	// text gives enough of them (nil otherwise).
	Plot *Figure
}

// Context is what a suite gets from the run.
type Context struct {
	WorkDir  string // workloads live here, on the disk being measured
	Quick    bool
	Rounds   int      // rounds per mode (already defaulted)
	Policies []string // extra policy specs from --policy
	// DropCaches says whether cold runs write drop_caches (not
	// --evict-only); set-up steps that need cold runs (training) follow it.
	DropCaches bool
	Device     harness.Preset
	Predictio  string // the predictio binary, for predictio run and bench
	// Profile is this run's bench device measurement under the preset
	// (nil when none was made), for simulate's device model.
	Profile *formats.DeviceProfile
	Log     func(format string, args ...any)
}

// Plan is a suite's work.
type Plan struct {
	// NotRun, when set, says why the whole suite cannot run (what to
	// install, what predictio lacks).
	NotRun string
	Notes  []string
	Points []*PointSpec
}

// PointSpec is one point to measure.
type PointSpec struct {
	ID     string
	Params map[string]string
	// Files are the workload's files (or directories), evicted and
	// verified cold before every run; nil for a point that is not a cold
	// measurement (Cold says why).
	Files []string
	Cold  string
	// Rounds overrides Context.Rounds when positive.
	Rounds int
	// NotRun, when set, says why the point cannot run; it is reported as
	// such.
	NotRun string
	// Device, when set, is the device preset this point runs under
	// instead of the run's (the devices suite); its throttle is made and
	// measured with bench device on first use.
	Device string
	// Est is the expected time of one run of one mode, for the ETA.
	Est   time.Duration
	Modes []ModeSpec
}

// ModeSpec is one mode of a point.
type ModeSpec struct {
	Name   string
	NotRun string
	// Around, when set, runs before each of the mode's runs, ahead of the
	// eviction, and returns what to do after the run: the daemon mode
	// starts the daemon there, as one already running would be when the
	// caches are dropped.
	Around func(ctx context.Context) (after func(), err error)
	Run    func(ctx context.Context, r *RunInfo) (*Sample, error)
}

// RunInfo is passed to each run.
type RunInfo struct {
	Round int // 0-based
	Mode  string
}

// Sample is what one run measured.
type Sample struct {
	Metrics map[string]float64
	Notes   []string
}

// ErrNotRun, wrapped in a run's error, marks the mode as not run (the
// machine lacks what it needs) rather than failed.
var ErrNotRun = errors.New("not run")

var suites = map[string]Suite{}

// Register adds a suite; suites register themselves in init.
func Register(s Suite) { suites[s.Info().Name] = s }

// suiteOrder is the order of --suite all and --list: the paper's order.
var suiteOrder = []string{"readahead", "control", "launch", "sqlite", "llm", "reuse", "migrate", "devices"}

// Suites returns the registered suites in the paper's order.
func Suites() []Suite {
	var out []Suite
	seen := map[string]bool{}
	for _, n := range suiteOrder {
		if s, ok := suites[n]; ok {
			out = append(out, s)
			seen[n] = true
		}
	}
	var rest []string
	for n := range suites {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	for _, n := range rest {
		out = append(out, suites[n])
	}
	return out
}

// Select resolves --suite values ("all" or names) to suites.
func Select(names []string) ([]Suite, error) {
	if len(names) == 0 {
		names = []string{"all"}
	}
	var out []Suite
	seen := map[string]bool{}
	for _, n := range names {
		for _, n := range strings.Split(n, ",") {
			n = strings.TrimSpace(n)
			if n == "all" {
				for _, s := range Suites() {
					if !seen[s.Info().Name] {
						out = append(out, s)
						seen[s.Info().Name] = true
					}
				}
				continue
			}
			s, ok := suites[n]
			if !ok {
				var all []string
				for _, s := range Suites() {
					all = append(all, s.Info().Name)
				}
				return nil, fmt.Errorf("select suite: unknown suite %q; want all or one of %s", n, strings.Join(all, ", "))
			}
			if !seen[n] {
				out = append(out, s)
				seen[n] = true
			}
		}
	}
	return out, nil
}
