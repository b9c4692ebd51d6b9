package simulate

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Assertion is a CI gate on a report, such as "tree.coverage>=0.8": lane
// name, metric, comparison and bound.
type Assertion struct {
	Expr   string
	Lane   string
	Metric string
	Op     string
	Value  float64
}

var assertRE = regexp.MustCompile(`^\s*(.+)\.([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*([-+0-9.eE]+)\s*$`)

// metrics maps metric names usable in assertions to their value.
var metrics = map[string]func(*Stats) float64{
	"coverage":           func(s *Stats) float64 { return s.Coverage },
	"accuracy":           func(s *Stats) float64 { return s.Accuracy },
	"late":               func(s *Stats) float64 { return float64(s.Late) },
	"pages_late":         func(s *Stats) float64 { return float64(s.Late) },
	"io_amplification":   func(s *Stats) float64 { return s.IOAmplification },
	"stall_ns":           func(s *Stats) float64 { return float64(s.StallNS) },
	"speedup":            func(s *Stats) float64 { return s.Speedup },
	"demand":             func(s *Stats) float64 { return float64(s.Demand) },
	"hits":               func(s *Stats) float64 { return float64(s.Hits) },
	"misses":             func(s *Stats) float64 { return float64(s.Misses) },
	"prefetched":         func(s *Stats) float64 { return float64(s.Prefetched) },
	"used":               func(s *Stats) float64 { return float64(s.Used) },
	"pages_used_in_time": func(s *Stats) float64 { return float64(s.Used) },
	"wasted":             func(s *Stats) float64 { return float64(s.Wasted) },
	"pages_wasted":       func(s *Stats) float64 { return float64(s.Wasted) },
	"wall_ns":            func(s *Stats) float64 { return float64(s.WallNS) },
	"pages_read":         func(s *Stats) float64 { return float64(s.PagesRead) },
	"hit_ratio": func(s *Stats) float64 {
		if s.Demand == 0 {
			return 0
		}
		return float64(s.Hits) / float64(s.Demand)
	},
}

// MetricNames returns the metrics assertions may name, sorted.
func MetricNames() []string {
	n := make([]string, 0, len(metrics))
	for k := range metrics {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// ParseAssertion parses "LANE.METRIC OP NUMBER", OP one of >= <= == != > <.
func ParseAssertion(expr string) (Assertion, error) {
	m := assertRE.FindStringSubmatch(expr)
	if m == nil {
		return Assertion{}, fmt.Errorf("parse assertion %q: want LANE.METRIC OP NUMBER, e.g. tree.coverage>=0.8", expr)
	}
	if _, ok := metrics[m[2]]; !ok {
		return Assertion{}, fmt.Errorf("parse assertion %q: unknown metric %q; valid metrics: %s", expr, m[2], strings.Join(MetricNames(), ", "))
	}
	v, err := strconv.ParseFloat(m[4], 64)
	if err != nil {
		return Assertion{}, fmt.Errorf("parse assertion %q: bad number %q", expr, m[4])
	}
	return Assertion{Expr: strings.TrimSpace(expr), Lane: strings.TrimSpace(m[1]), Metric: m[2], Op: m[3], Value: v}, nil
}

// Check evaluates a against r. It returns the observed value and whether
// the assertion holds; err is set when the lane does not exist.
func (a Assertion) Check(r *Report) (got float64, ok bool, err error) {
	st := r.Lane(a.Lane)
	if st == nil {
		names := make([]string, len(r.Policies))
		for i := range r.Policies {
			names[i] = r.Policies[i].Name
		}
		return 0, false, fmt.Errorf("check assertion %q: no policy named %q in the report; names: %s", a.Expr, a.Lane, strings.Join(names, ", "))
	}
	got = metrics[a.Metric](st)
	switch a.Op {
	case ">=":
		ok = got >= a.Value
	case "<=":
		ok = got <= a.Value
	case ">":
		ok = got > a.Value
	case "<":
		ok = got < a.Value
	case "==":
		ok = got == a.Value
	case "!=":
		ok = got != a.Value
	}
	return got, ok, nil
}
