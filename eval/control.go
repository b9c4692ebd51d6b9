package eval

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

func init() { Register(controlSuite{}) }

// controlSuite is the paper's figures 7-9, the control path: the eBPF
// event path against the offered rate, the hint socket, and dispatch
// against the number of policies. It runs predictio's own benchmarks (the
// ones docs/BENCHMARKS.md quotes), compiled from this source tree.
type controlSuite struct{}

const controlCold = "not applicable: microbenchmark of in-memory control paths (no file I/O is measured)"

func (controlSuite) Info() Info {
	return Info{
		Name: "control", Figures: "7-9",
		Measures: "the control path: eBPF event-path throughput and drops against the offered rate and its delivery latency, hint-socket throughput by message size and by senders, and dispatcher throughput against the number of policies",
		Needs:    "root with CAP_BPF and CAP_PERFMON (the event path); the predictio source tree and the Go toolchain (the benchmarks are built from it)",
		Expected: func(quick bool, _ harness.Preset) time.Duration {
			if quick {
				return 90 * time.Second
			}
			return 6 * time.Minute // 4m57s measured on 2026-12-01
		},
		Paper: []PaperFigure{
			{Figure: "7", Caption: "eBPF event path, noop policy and backend: throughput and latency against the triggered rate",
				Values: []string{"throughput follows the triggered rate up to about 5 M events/s", "latency stays low below that point", "saturation drops events rather than blocking the application"}},
			{Figure: "8", Caption: "application hints over Unix datagram sockets, fixed-size events",
				Values: []string{"about 300-500 K events/s", "4 KiB events saturate near 320 K events/s", "latency low until saturation, then rising sharply"}},
			{Figure: "9", Caption: "runtime dispatch with synthetic events and a noop backend, against the number of policies",
				Values: []string{"no policy producing a request: 15.5-21.1 M events/s", "policies emitting predictions: 6.3-8.8 M events/s", "mean service time below 160 ns per event"},
				Plot: &Figure{Name: "paper-fig9", Title: "Paper figure 9 (ranges from its text)", YLabel: "M events/s",
					Categories: []string{"no requests", "with requests"},
					Series:     []Series{{Name: "paper", Y: []float64{18.3, 7.55}, Lo: []float64{15.5, 6.3}, Hi: []float64{21.1, 8.8}}}}},
		},
		Plots: controlPlots,
		Compare: func(s *SuiteResult) []Comparison {
			return []Comparison{
				{"eBPF event path, delivered at the highest offered rate (max)", "follows the offered rate up to about 5 M events/s", metricText(s, "event-path/max", "predictio", "events_per_s", 1e6, "M events/s")},
				{"eBPF event path, drops at the highest offered rate", "drops under saturation", metricText(s, "event-path/max", "predictio", "drop_pct", 1, "%")},
				{"hint socket, 4 KiB messages, delivered", "saturates near 320 K events/s", metricText(s, "hint-size/bytes=4096", "predictio", "hints_per_s", 1e3, "K hints/s")},
				{"hint socket, 64-byte messages, delivered", "300-500 K events/s", metricText(s, "hint-size/bytes=64", "predictio", "hints_per_s", 1e3, "K hints/s")},
				{"dispatch, 5 policies, no requests (fast exits), one core", "15.5-21.1 M events/s", metricText(s, "dispatch/policies=5/fast-exits", "predictio", "Mevents_per_cpu_s", 1, "M events/cpu-s")},
				{"dispatch, 5 policies emitting requests, one core", "6.3-8.8 M events/s, < 160 ns/event", metricText(s, "dispatch/policies=5/work", "predictio", "Mevents_per_cpu_s", 1, "M events/cpu-s")},
			}
		},
	}
}

func (controlSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	g, err := newGoBench(c.WorkDir)
	if err != nil {
		return &Plan{NotRun: err.Error()}, nil
	}
	c.Log("eval: control: building predictio's benchmarks from %s", g.root)
	plan := &Plan{Notes: []string{"Benchmarks built from " + g.root + " with " + g.goc + "; each round is one run of the benchmark binary."}}
	plan.Points = append(plan.Points, transportPoints(ctx, g, c)...)
	plan.Points = append(plan.Points, latencyPoints(ctx, g, c)...)
	plan.Points = append(plan.Points, hintPoints(ctx, g, c)...)
	plan.Points = append(plan.Points, hintSizePoints(c)...)
	plan.Points = append(plan.Points, dispatchPoints(ctx, g, c)...)
	return plan, nil
}

// benchPoint is a point that runs one benchmark of pkg per round.
func benchPoint(g *goBench, id string, params map[string]string, pkg, pattern, sub string, est time.Duration, flags ...string) *PointSpec {
	return &PointSpec{ID: id, Params: params, Cold: controlCold, Est: est,
		Modes: []ModeSpec{{Name: "predictio", Run: func(ctx context.Context, _ *RunInfo) (*Sample, error) {
			res, err := g.run(ctx, pkg, pattern, flags...)
			if err != nil {
				return nil, err
			}
			m, ok := res[sub]
			if !ok {
				return nil, fmt.Errorf("benchmark %s did not report (got %s)", sub, strings.Join(keys(res), ", "))
			}
			return &Sample{Metrics: m}, nil
		}}}}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// anchor makes a -test.bench pattern that matches one benchmark path
// exactly ("BenchmarkTransport/offered=2M").
func anchor(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func transportPoints(ctx context.Context, g *goBench, c *Context) []*PointSpec {
	rates := []string{"offered=2M", "offered=4M", "offered=5M", "offered=6M", "offered=7M", "offered=8M", "offered=10M", "max"}
	if c.Quick {
		rates = []string{"offered=2M", "max"}
	}
	pkg := g.find(ctx, "BenchmarkTransport", "source", "record")
	var out []*PointSpec
	for _, r := range rates {
		id := "event-path/" + r
		if pkg == "" {
			out = append(out, &PointSpec{ID: id, NotRun: "no BenchmarkTransport in source/ or record/", Modes: []ModeSpec{{Name: "predictio"}}})
			continue
		}
		sub := "BenchmarkTransport/" + r
		out = append(out, benchPoint(g, id, map[string]string{"figure": "7", "rate": r, "package": pkg}, pkg, anchor(sub), sub,
			4*time.Second, "-test.benchtime", "1x"))
	}
	return out
}

func latencyPoints(ctx context.Context, g *goBench, c *Context) []*PointSpec {
	loads := []string{"mode=low/load=sparse", "mode=low/load=paced", "mode=low/load=busy", "mode=low/load=flood",
		"mode=batched/load=paced"}
	if c.Quick {
		loads = []string{"mode=low/load=paced"}
	}
	pkg := g.find(ctx, "BenchmarkLatency", "source")
	var out []*PointSpec
	for _, l := range loads {
		id := "event-latency/" + l
		if pkg == "" {
			out = append(out, &PointSpec{ID: id, NotRun: "needs source.BenchmarkLatency, the live event source's delivery latency (issue 12; not in this build)",
				Modes: []ModeSpec{{Name: "predictio"}}})
			continue
		}
		sub := "BenchmarkLatency/" + l
		out = append(out, benchPoint(g, id, map[string]string{"figure": "7", "load": l, "package": pkg}, pkg, anchor(sub), sub,
			4*time.Second, "-test.benchtime", "1x"))
	}
	return out
}

func hintPoints(ctx context.Context, g *goBench, c *Context) []*PointSpec {
	n := "200000x"
	if c.Quick {
		n = "20000x"
	}
	pkg := g.find(ctx, "BenchmarkHintSocket", "source", "record")
	var out []*PointSpec
	for _, s := range []string{"senders=1", "senders=2"} {
		id := "hint-socket/" + s
		if pkg == "" {
			out = append(out, &PointSpec{ID: id, NotRun: "no BenchmarkHintSocket in source/ or record/", Modes: []ModeSpec{{Name: "predictio"}}})
			continue
		}
		sub := "BenchmarkHintSocket/" + s
		out = append(out, benchPoint(g, id, map[string]string{"figure": "8", "senders": strings.TrimPrefix(s, "senders="),
			"message": "tree_child_enter, path form, 4 children", "package": pkg}, pkg, anchor(sub), sub, 3*time.Second, "-test.benchtime", n))
	}
	return out
}

func dispatchPoints(ctx context.Context, g *goBench, c *Context) []*PointSpec {
	bt := "1s"
	if c.Quick {
		bt = "100ms"
	}
	flags := []string{"-test.cpu", "1", "-test.benchmem", "-test.benchtime", bt}
	var out []*PointSpec
	if g.find(ctx, "BenchmarkDispatch", "policies") == "" {
		return []*PointSpec{{ID: "dispatch", NotRun: "no BenchmarkDispatch in policies/", Modes: []ModeSpec{{Name: "predictio"}}}}
	}
	out = append(out,
		benchPoint(g, "dispatch/policies=5/work", map[string]string{"figure": "9", "policies": "5", "stream": "work"},
			"policies", anchor("BenchmarkDispatch"), "BenchmarkDispatch", 2*time.Second, flags...),
		benchPoint(g, "dispatch/policies=5/fast-exits", map[string]string{"figure": "9", "policies": "5", "stream": "fast-exits"},
			"policies", anchor("BenchmarkDispatchFastExits"), "BenchmarkDispatchFastExits", 2*time.Second, flags...))
	pols := []string{"readahead", "stride", "markov", "tree", "tensor"}
	if c.Quick {
		pols = []string{"markov", "tree"}
	}
	for _, p := range pols {
		sub := "BenchmarkDispatchPolicy/" + p
		out = append(out, benchPoint(g, "dispatch/policies=1/"+p, map[string]string{"figure": "9", "policies": "1", "stream": "work", "policy": p},
			"policies", anchor(sub), sub, 2*time.Second, flags...))
	}
	return out
}

// controlPlots draws figure 7 (delivered against offered events/s),
// figure 8 (hints/s by senders) and figure 9 (dispatch M events/s).
func controlPlots(s *SuiteResult) []*Figure {
	f7 := &Figure{Name: "control-event-path", Title: "eBPF event path: delivered against offered (figure 7)",
		XLabel: "offered events/s (M)", YLabel: "delivered events/s (M)", Diagonal: true, LegendBottom: true}
	del := Series{Name: "delivered (median, min-max)"}
	for _, p := range s.Points {
		if !strings.HasPrefix(p.ID, "event-path/") {
			continue
		}
		m := p.Mode("predictio")
		if m == nil || m.Status != StatusOK {
			continue
		}
		off, ev := m.Metrics["offered_per_s"], m.Metrics["events_per_s"]
		if off.N == 0 || ev.N == 0 {
			continue
		}
		del.X = append(del.X, off.Median/1e6)
		del.Y = append(del.Y, ev.Median/1e6)
		del.Lo = append(del.Lo, ev.Min/1e6)
		del.Hi = append(del.Hi, ev.Max/1e6)
	}
	sortSeries(&del)
	f7.Series = []Series{del}
	f8 := barsOf(s, "hint-size/", "control-hint-size", "Hint socket: delivered hints/s by message size, one sender (figure 8)", "K hints/s", "hints_per_s", 1e3, "bytes")
	f8s := barsOf(s, "hint-socket/", "control-hint-socket", "Hint socket: BenchmarkHintSocket by senders (figure 8)", "K hints/s", "hints_per_s", 1e3, "senders")
	f9 := barsOf(s, "dispatch/", "control-dispatch", "Dispatch throughput, one core (figure 9)", "M events/s", "Mevents_per_s", 1, "")
	return []*Figure{f7, f8, f9, f8s, latencyBars(s)}
}

// barsOf makes a one-series bar chart of metric key over the points whose
// ID starts with prefix; the category is the param cat, or the ID.
func barsOf(s *SuiteResult, prefix, name, title, ylabel, key string, scale float64, cat string) *Figure {
	f := &Figure{Name: name, Title: title, YLabel: ylabel}
	sr := Series{Name: "ours (median, min-max)"}
	for _, p := range s.Points {
		if !strings.HasPrefix(p.ID, prefix) {
			continue
		}
		m := p.Mode("predictio")
		if m == nil || m.Status != StatusOK {
			continue
		}
		v, ok := m.Metrics[key]
		if !ok || v.N == 0 {
			continue
		}
		label := strings.TrimPrefix(p.ID, prefix)
		if cat != "" {
			label = cat + "=" + p.Params[cat]
		}
		f.Categories = append(f.Categories, label)
		sr.Y = append(sr.Y, v.Median/scale)
		sr.Lo = append(sr.Lo, v.Min/scale)
		sr.Hi = append(sr.Hi, v.Max/scale)
	}
	if len(f.Categories) == 0 {
		f.Categories = []string{}
	}
	f.Series = []Series{sr}
	return f
}

func sortSeries(s *Series) {
	for i := 1; i < len(s.X); i++ {
		for j := i; j > 0 && s.X[j] < s.X[j-1]; j-- {
			s.X[j], s.X[j-1] = s.X[j-1], s.X[j]
			s.Y[j], s.Y[j-1] = s.Y[j-1], s.Y[j]
			s.Lo[j], s.Lo[j-1] = s.Lo[j-1], s.Lo[j]
			s.Hi[j], s.Hi[j-1] = s.Hi[j-1], s.Hi[j]
		}
	}
}

// latencyBars draws the event path's delivery latency (p50 and p99) per
// load of BenchmarkLatency (figure 7's latency).
func latencyBars(s *SuiteResult) *Figure {
	f := &Figure{Name: "control-event-latency", Title: "eBPF event path: kernel event to consumer (figure 7)", YLabel: "latency (µs)"}
	p50, p99 := Series{Name: "p50"}, Series{Name: "p99"}
	for _, p := range s.Points {
		if !strings.HasPrefix(p.ID, "event-latency/") {
			continue
		}
		m := p.Mode("predictio")
		if m == nil || m.Status != StatusOK {
			continue
		}
		a, b := m.Metrics["p50_us"], m.Metrics["p99_us"]
		if a.N == 0 || b.N == 0 {
			continue
		}
		f.Categories = append(f.Categories, strings.TrimPrefix(p.ID, "event-latency/"))
		p50.Y, p50.Lo, p50.Hi = append(p50.Y, a.Median), append(p50.Lo, a.Min), append(p50.Hi, a.Max)
		p99.Y, p99.Lo, p99.Hi = append(p99.Y, b.Median), append(p99.Lo, b.Min), append(p99.Hi, b.Max)
	}
	if f.Categories == nil {
		f.Categories = []string{}
	}
	f.Series = []Series{p50, p99}
	return f
}
