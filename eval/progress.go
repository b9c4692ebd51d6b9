package eval

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

// progress prints one line per run with an ETA, like fio's status line:
// the remaining runs' expected times, scaled by how long the finished runs
// took against their expectation, plus the expected times of the suites
// not planned yet.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	start    time.Time
	pending  map[string]time.Duration // suites not planned yet: expected time
	left     time.Duration            // expected time of the planned runs left
	estDone  time.Duration            // expected time of the runs done
	realDone time.Duration            // their real time
	runs     int                      // runs done or skipped
	total    int                      // runs planned
	suite    string
	points   map[*PointSpec]int
	npoints  int
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, start: time.Now(), pending: map[string]time.Duration{}, points: map[*PointSpec]int{}}
}

func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) planSuites(ss []Suite, quick bool, dev harness.Preset, rounds int) {
	var total time.Duration
	var names []string
	for _, s := range ss {
		info := s.Info()
		d := expected(info, quick, dev, rounds)
		p.pending[info.Name] = d
		total += d
		names = append(names, info.Name)
	}
	p.logf("eval: %d suites (%s), expected %s on device %s", len(ss), strings.Join(names, ", "), fmtDur(total), dev.Name)
}

func (p *progress) startSuite(name string) {
	p.mu.Lock()
	p.suite = name
	delete(p.pending, name)
	p.mu.Unlock()
	p.logf("eval: suite %s", name)
}

func (p *progress) planPoints(suite string, ps []*PointSpec, rounds int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.points = map[*PointSpec]int{}
	p.npoints = len(ps)
	for i, s := range ps {
		p.points[s] = i + 1
		r := rounds
		if s.Rounds > 0 {
			r = s.Rounds
		}
		n := r * len(s.Modes)
		p.total += n
		p.left += time.Duration(n) * s.Est
	}
}

// skip accounts a point that does not run (finished earlier or not
// runnable).
func (p *progress) skip(suite string, ps *PointSpec, rounds int) {
	p.mu.Lock()
	n := rounds * len(ps.Modes)
	p.runs += n
	p.left -= time.Duration(n) * ps.Est
	idx := p.points[ps]
	p.mu.Unlock()
	p.logf("eval: [%s %d/%d] %s: skipped (%s)", suite, idx, p.npoints, ps.ID, skipWhy(ps))
}

func skipWhy(ps *PointSpec) string {
	if ps.NotRun != "" {
		return "not run: " + ps.NotRun
	}
	return "finished in an earlier run"
}

// skipRun accounts one run that was not made (a mode not run or failed).
func (p *progress) skipRun(ps *PointSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	p.left -= ps.Est
}

func (p *progress) ran(suite string, ps *PointSpec, mode string, round, rounds int, el time.Duration, s *Sample, err error) {
	p.mu.Lock()
	p.runs++
	p.left -= ps.Est
	p.estDone += ps.Est
	p.realDone += el
	eta := p.eta()
	done, total, idx := p.runs, p.total, p.points[ps]
	p.mu.Unlock()
	res := fmt.Sprintf("%.3g s", el.Seconds())
	if err != nil {
		res = "failed: " + err.Error()
	} else if s != nil {
		res += " " + headline(s.Metrics)
	}
	p.logf("eval: [%s %d/%d] %s %s round %d/%d: %s | %d/%d runs, elapsed %s, ETA %s",
		suite, idx, p.npoints, ps.ID, mode, round+1, rounds, res, done, total, fmtDur(time.Since(p.start)), eta)
}

// eta must be called with p.mu held.
func (p *progress) eta() string {
	scale := 1.0
	if p.estDone > 0 {
		scale = float64(p.realDone) / float64(p.estDone)
	}
	left := time.Duration(float64(max(p.left, 0)) * scale)
	for _, d := range p.pending {
		left += d
	}
	return fmtDur(left)
}

// headlineKeys are the metrics a progress line shows first.
var headlineKeys = []string{"wall_s", "coverage", "p95_us", "events_per_s", "drop_pct", "hints_per_s", "Mevents_per_s", "p50_us", "p99_us"}

// headline shows up to three metrics of a sample: the known headline
// metrics first, then by name.
func headline(m map[string]float64) string {
	var keys []string
	for _, k := range headlineKeys {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(headlineKeys, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	var parts []string
	for i, k := range keys {
		if i == 3 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()+0.5))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
