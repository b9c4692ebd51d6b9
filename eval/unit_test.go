package eval

import (
	"context"
	"os"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/predictio/predictio/internal/harness"
)

func presetForTest(name string) (harness.Preset, error) { return harness.PresetByName(name) }

func TestParseBench(t *testing.T) {
	out := []byte("goos: linux\nBenchmarkTransport/offered=2M-2  \t       1\t3001234567 ns/op\t   1999000 events/s\t  0.05 drop%\t  103.3 consumer-ns/event\n" +
		"BenchmarkDispatch \t 3000000\t 160.2 ns/op\t 6.2 Mevents/s\t 30 B/op\t 0 allocs/op\nPASS\n")
	r := parseBench(out)
	tr := r["BenchmarkTransport/offered=2M"]
	if tr["events_per_s"] != 1999000 || tr["drop_pct"] != 0.05 || tr["consumer_ns_per_event"] != 103.3 || tr["ns_per_op"] != 3001234567 {
		t.Fatalf("transport metrics %v", tr)
	}
	if d := r["BenchmarkDispatch"]; d["Mevents_per_s"] != 6.2 || d["allocs_per_op"] != 0 {
		t.Fatalf("dispatch metrics %v", d)
	}
	if anchor("BenchmarkLatency/mode=low/load=paced") != "^BenchmarkLatency$/^mode=low$/^load=paced$" {
		t.Fatal(anchor("BenchmarkLatency/mode=low/load=paced"))
	}
}

// TestRAPattern: runs of r consecutive pages in distinct slots far enough
// apart that no readahead window reaches the next run.
func TestRAPattern(t *testing.T) {
	sz := raParams{fileBytes: 256 << 20, reads: 1024}
	for _, r := range []int{1, 8, 64} {
		p := raPattern(sz, r)
		if len(p) != sz.reads {
			t.Fatalf("r=%d: %d reads", r, len(p))
		}
		starts := map[uint64]bool{}
		for i := 0; i < len(p); i += r {
			for j := 1; j < r; j++ {
				if p[i+j] != p[i]+uint64(j) {
					t.Fatalf("r=%d: run at %d is not consecutive: %v", r, i, p[i:i+r])
				}
			}
			slot := uint64(max(4*r, 64))
			if p[i]%slot != 0 || starts[p[i]] {
				t.Fatalf("r=%d: run start %d repeats or is off its slot", r, p[i])
			}
			starts[p[i]] = true
		}
	}
	seq := raPattern(sz, seqRun)
	for i, pg := range seq {
		if pg != uint64(i) {
			t.Fatalf("seq read %d is page %d", i, pg)
		}
	}
}

func TestPointStatus(t *testing.T) {
	ok := &ModeResult{Mode: "baseline", Status: StatusOK}
	nr := &ModeResult{Mode: "noop", Status: StatusNotRun, Reason: "needs x"}
	if s, _ := pointStatus([]*ModeResult{ok, nr}); s != StatusPartial {
		t.Errorf("ok + not run = %s", s)
	}
	if s, r := pointStatus([]*ModeResult{nr}); s != StatusNotRun || r != "noop: not run: needs x" {
		t.Errorf("not run alone = %s %q", s, r)
	}
	if s := suiteStatus([]*Point{{Status: StatusPartial, Modes: []*ModeResult{ok, nr}}}); s != StatusPartial {
		t.Errorf("suite of a partial point = %s", s)
	}
}

func TestRunCounters(t *testing.T) {
	f := t.TempDir() + "/run.json"
	os.WriteFile(f, []byte(`{"exit_code":0,"traced":false,"untraced":"no CAP_BPF","startup_ns":1200000,"events":42,"backend":{"PagesSubmitted":7,"pages_late":2}}`), 0o644)
	s := &Sample{Metrics: map[string]float64{}}
	runCounters(f, s)
	if s.Metrics["run_startup_ns"] != 1.2e6 || s.Metrics["run_events"] != 42 || s.Metrics["run_backend_pages_submitted"] != 7 || s.Metrics["run_backend_pages_late"] != 2 {
		t.Fatalf("metrics %v", s.Metrics)
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "no CAP_BPF") {
		t.Fatalf("notes %v", s.Notes)
	}
	lr := &liveRuntime{bin: "/bin/predictio", noProfile: true, json: true}
	argv, why := lr.command([]string{"rocksdb"}, "none", []string{"db_bench", "--x"})
	if why != "" || strings.Join(argv, " ") != "/bin/predictio run --no-profile --policy rocksdb --backend none -- db_bench --x" {
		t.Fatalf("command %q %q", argv, why)
	}
	if _, why := (&liveRuntime{missing: needsRun}).command(nil, "", []string{"x"}); why != needsRun {
		t.Fatalf("missing run: %q", why)
	}
}

func TestRatioText(t *testing.T) {
	sum := func(v ...float64) harness.Summary { return harness.Summarize(v) }
	s := &SuiteResult{Points: []*Point{{ID: "scan", Modes: []*ModeResult{
		{Mode: "baseline", Status: StatusOK, Metrics: map[string]harness.Summary{"wall_s": sum(2, 2.2, 1.8)}},
		{Mode: "predictio", Status: StatusOK, Metrics: map[string]harness.Summary{"wall_s": sum(0.5, 0.6, 0.4)}},
		{Mode: "noop", Status: StatusNotRun, Reason: "needs predictio run"},
	}}}}
	if got := ratioText(s, "scan", "predictio", "baseline", "wall_s"); got != "0.25 of baseline (4.00x faster, 75.0% less time)" {
		t.Errorf("ratio %q", got)
	}
	if got := geomeanText(s, "predictio", "baseline"); got != "0.250 over 1 programs (75.0% less time)" {
		t.Errorf("geomean %q", got)
	}
	if got := geomeanText(s, "baseline", "predictio"); got != "4.000 over 1 programs (300.0% more time)" {
		t.Errorf("geomean of a slower mode %q", got)
	}
	if got := ratioText(s, "scan", "noop", "baseline", "wall_s"); !strings.HasPrefix(got, "not measured: noop not_run: needs predictio run") {
		t.Errorf("a mode that did not run: %q", got)
	}
	if got := ratioText(s, "", "noop", "baseline", "wall_s"); !strings.Contains(got, "not in this run") {
		t.Errorf("a missing point: %q", got)
	}
	if got := metricText(s, "scan", "baseline", "wall_s", 1, "s"); got != "2 s [1.8-2.2]" {
		t.Errorf("metric %q", got)
	}
}

// TestInterruptedPointIsRedone: a point cut short by the context is not
// ok, so a rerun measures it again.
func TestInterruptedPointIsRedone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	x := &runner{o: Options{}, res: &Results{}, prog: newProgress(nil), ctx: &Context{Rounds: 3, Device: harness.Presets[0]}}
	n := 0
	ps := &PointSpec{ID: "p", Cold: "not applicable", Modes: []ModeSpec{{Name: "m", Run: func(context.Context, *RunInfo) (*Sample, error) {
		n++
		if n == 2 {
			cancel()
		}
		return &Sample{Metrics: map[string]float64{"wall_s": 1}}, nil
	}}}}
	p := x.runPoint(ctx, "s", ps)
	if p.Status == StatusOK || p.Modes[0].Rounds != 2 || !strings.Contains(p.Modes[0].Reason, "interrupted after 2 of 3") {
		t.Fatalf("interrupted point: %s, mode %+v", p.Status, p.Modes[0])
	}
}

func TestInlineHTML(t *testing.T) {
	if got := inlineHTML("needs `predictio run` & **root**"); got != "needs <code>predictio run</code> &amp; <b>root</b>" {
		t.Errorf("inlineHTML = %q", got)
	}
}

// fakeSuite plans one point with the given modes, each run counted.
type fakeSuite struct {
	modes []string
	runs  *int
}

func (fakeSuite) Info() Info { return Info{Name: "fake"} }

func (f fakeSuite) Plan(context.Context, *Context) (*Plan, error) {
	ps := &PointSpec{ID: "p", Cold: "not applicable"}
	for _, m := range f.modes {
		ps.Modes = append(ps.Modes, ModeSpec{Name: m, Run: func(context.Context, *RunInfo) (*Sample, error) {
			*f.runs++
			return &Sample{Metrics: map[string]float64{"wall_s": 1}}, nil
		}})
	}
	return &Plan{Points: []*PointSpec{ps}}, nil
}

// TestResumeMeasuresNewModes: a rerun skips a finished point, unless the
// plan has a mode the stored point lacks (a newer build's).
func TestResumeMeasuresNewModes(t *testing.T) {
	var runs int
	x := &runner{o: Options{Out: t.TempDir()}, res: &Results{}, prog: newProgress(nil), done: map[string]*Point{},
		ctx: &Context{Rounds: 2, Device: harness.Presets[0]}}
	x.runSuite(context.Background(), fakeSuite{[]string{"baseline"}, &runs})
	p := x.res.Suite("fake").Points[0]
	if p.Status != StatusOK || runs != 2 {
		t.Fatalf("first run: %s, %d runs", p.Status, runs)
	}
	x.done[pointKey("fake", "p", x.presetOf(&PointSpec{}), false)] = p
	runs = 0
	x.runSuite(context.Background(), fakeSuite{[]string{"baseline"}, &runs})
	if runs != 0 {
		t.Fatalf("a finished point was measured again (%d runs)", runs)
	}
	x.runSuite(context.Background(), fakeSuite{[]string{"baseline", "daemon"}, &runs})
	p = x.res.Suite("fake").Points[0]
	if runs != 4 || p.Mode("daemon") == nil {
		t.Fatalf("a point lacking the plan's daemon mode: %d runs, modes %+v", runs, p.Modes)
	}
}

// TestBarGroupsFit: a bar chart of nine points of four modes (the devices
// suite) keeps each point's bars inside its share of the axis, and slants
// labels that would overlap; before, the bars of one point ran into the
// next and the labels into each other.
func TestBarGroupsFit(t *testing.T) {
	f := &Figure{Series: make([]Series, 4)}
	for _, d := range []string{"this", "sata-ssd", "hdd"} {
		f.Categories = append(f.Categories, "launch-python3/"+d, "sqlite-2^14/"+d, "llm-no-mmap/"+d)
	}
	p := plot.New()
	if err := f.bars(p); err != nil {
		t.Fatal(err)
	}
	if w, share := f.barWidth(), f.share(); 4*w > share || w < minBar {
		t.Errorf("a bar %v, a group %v wide, its share %v", w, 4*w, share)
	}
	if !f.rotated() || p.X.Tick.Label.Rotation == 0 {
		t.Error("nine long labels are not slanted")
	}
	short := &Figure{Categories: []string{"a", "b"}, Series: make([]Series, 2)}
	if short.rotated() || short.width() != 16*vg.Centimeter {
		t.Errorf("two short labels: rotated %v, width %v", short.rotated(), short.width())
	}
}

// TestUnknownCommit: a report of a binary without its commit says how to
// build one with it.
func TestUnknownCommit(t *testing.T) {
	res := &Results{}
	if got := strings.Join(introParas(res), "\n"); !strings.Contains(got, "-buildvcs=true") {
		t.Errorf("intro without a commit:\n%s", got)
	}
	res.Machine.Commit = "0cdc65f"
	if got := strings.Join(introParas(res), "\n"); strings.Contains(got, "-buildvcs") || !strings.Contains(got, "0cdc65f") {
		t.Errorf("intro with a commit:\n%s", got)
	}
}
