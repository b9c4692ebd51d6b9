package eval

import (
	"fmt"
	"math"
	"strings"
)

// Comparison is one line of the report's "ours against the paper" table:
// a headline figure of the paper and ours measured the same way, or why
// ours is missing.
type Comparison struct {
	What  string
	Paper string
	Ours  string
}

// ratioOf returns mode's median of key over base's median at point id, or
// why there is none.
func ratioOf(s *SuiteResult, id, mode, base, key string) (float64, string) {
	var p *Point
	for _, q := range s.Points {
		if q.ID == id {
			p = q
		}
	}
	if p == nil {
		if id == "" {
			return math.NaN(), "not in this run (a quick run omits it)"
		}
		return math.NaN(), "point " + id + " not in this run"
	}
	b, m := p.Mode(base), p.Mode(mode)
	switch {
	case b == nil || m == nil:
		return math.NaN(), "no such mode"
	case b.Status != StatusOK:
		return math.NaN(), base + " " + b.Status + ": " + b.Reason
	case m.Status != StatusOK:
		return math.NaN(), mode + " " + m.Status + ": " + m.Reason
	}
	bm, mm := b.Metrics[key].Median, m.Metrics[key].Median
	if bm <= 0 {
		return math.NaN(), "baseline median is 0"
	}
	return mm / bm, ""
}

// ratioText formats mode/base as "0.42 of Baseline (2.38x faster)", or
// the reason there is none.
func ratioText(s *SuiteResult, id, mode, base, key string) string {
	r, why := ratioOf(s, id, mode, base, key)
	if why != "" {
		return "not measured: " + shorten(why, 160)
	}
	if r < 1 {
		return fmt.Sprintf("%.2f of %s (%.2fx faster, %.1f%% less time)", r, base, 1/r, 100*(1-r))
	}
	return fmt.Sprintf("%.2f of %s (%.1f%% more time)", r, base, 100*(r-1))
}

// metricText formats a mode's median of key at point id with a unit.
func metricText(s *SuiteResult, id, mode, key string, scale float64, unit string) string {
	for _, p := range s.Points {
		if p.ID != id {
			continue
		}
		m := p.Mode(mode)
		if m == nil || m.Status != StatusOK {
			if m != nil {
				return "not measured: " + shorten(m.Status+": "+m.Reason, 160)
			}
			return "not measured"
		}
		v, ok := m.Metrics[key]
		if !ok || v.N == 0 {
			return "not measured: no " + key
		}
		return strings.Replace(fmt.Sprintf("%.3g %s [%.3g-%.3g]", v.Median/scale, unit, v.Min/scale, v.Max/scale), "  ", " ", 1)
	}
	return "not measured: point " + id + " not in this run"
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n]) + "..."
}

// lastScan returns the ID of the point of panel with the most rows
// (quick runs have smaller ones), for comparisons at the far end.
func pointWith(s *SuiteResult, prefix string, first bool) string {
	id := ""
	for _, p := range s.Points {
		if strings.HasPrefix(p.ID, prefix) {
			if first && id == "" {
				id = p.ID
			}
			if !first {
				id = p.ID
			}
		}
	}
	return id
}

// geomeanText is the geometric mean of mode/base wall time over the
// points where both ran.
func geomeanText(s *SuiteResult, mode, base string) string {
	var sum float64
	var n int
	var why string
	for _, p := range s.Points {
		r, w := ratioOf(s, p.ID, mode, base, "wall_s")
		if w != "" {
			why = w
			continue
		}
		sum += math.Log(r)
		n++
	}
	if n == 0 {
		return "not measured: " + shorten(why, 160)
	}
	g := math.Exp(sum / float64(n))
	if g > 1 {
		return fmt.Sprintf("%.3f over %d programs (%.1f%% more time)", g, n, 100*(g-1))
	}
	return fmt.Sprintf("%.3f over %d programs (%.1f%% less time)", g, n, 100*(1-g))
}
