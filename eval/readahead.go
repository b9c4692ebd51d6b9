package eval

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/bench"
	"github.com/predictio/predictio/formats"
	"github.com/predictio/predictio/internal/blockdev"
	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/policies"
	"github.com/predictio/predictio/simulate"
)

func init() { Register(readaheadSuite{}) }

// readaheadSuite is the paper's figure 2: a controlled microbenchmark of
// Linux readahead's dependence on local sequentiality. Each trial issues
// a fixed number of page-sized reads; for run length r it reads r
// consecutive pages, then jumps to a distant region; seq reads one
// contiguous stream. Before each read it asks mincore(2) whether the page
// is already resident: timely readahead coverage.
type readaheadSuite struct{}

const seqRun = 0 // run length of the fully sequential stream

func (readaheadSuite) Info() Info {
	return Info{
		Name: "readahead", Figures: "2",
		Measures: "Linux readahead's coverage (the share of page reads whose page was resident before the read, by mincore) and P95 demand-read latency against run length, live on this device and in predictio simulate's readahead model",
		Needs:    "root (drop_caches), Linux 6.5 for cachestat; a disk-backed work directory; nothing to install",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			if quick {
				return 20 * time.Second
			}
			if dev.Name == "hdd" {
				return 25 * time.Minute
			}
			return time.Minute // 11 s measured on 2026-12-01
		},
		Paper: []PaperFigure{{Figure: "2", Caption: "coverage and P95 demand latency against run length, 4,096 page reads per trial",
			Values: []string{"coverage improves with longer runs", "jumping patterns keep a high P95 demand-read latency: each jump starts a cold region",
				"fully sequential access: near-complete coverage and microsecond-scale P95 latency", "the text publishes no numbers for this figure"}}},
		Plots: readaheadPlots,
		Compare: func(s *SuiteResult) []Comparison {
			return []Comparison{
				{"readahead coverage, fully sequential, live", "near-complete", metricText(s, "live/run=seq", "readahead", "coverage", 1, "")},
				{"readahead P95 read latency, fully sequential, live", "microsecond-scale", metricText(s, "live/run=seq", "readahead", "p95_us", 1, "µs")},
				{"readahead coverage, single-page jumps (run 1), live", "low", metricText(s, "live/run=1", "readahead", "coverage", 1, "")},
				{"readahead P95 read latency, run 1, live", "high (a device read)", metricText(s, "live/run=1", "readahead", "p95_us", 1, "µs")},
			}
		},
	}
}

// raParams are one size of the suite.
type raParams struct {
	fileBytes int64
	reads     int
	runs      []int
}

func raSize(quick bool) raParams {
	if quick {
		return raParams{fileBytes: 256 << 20, reads: 1024, runs: []int{1, 8, 64, seqRun}}
	}
	return raParams{fileBytes: 1 << 30, reads: 4096, runs: []int{1, 2, 4, 8, 16, 32, 64, 128, 256, seqRun}}
}

func runName(r int) string {
	if r == seqRun {
		return "seq"
	}
	return strconv.Itoa(r)
}

func (readaheadSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	sz := raSize(c.Quick)
	file := c.workPath("readahead.dat")
	c.Log("eval: readahead: preparing %s (%d MiB)", file, sz.fileBytes>>20)
	if err := bench.PrepareScratch(file, sz.fileBytes, io.Discard); err != nil {
		return nil, err
	}
	ra := fileRA(file)
	plan := &Plan{Notes: []string{fmt.Sprintf("%d page reads per trial over a %d MiB file; the device's read_ahead_kb is %d and max_sectors_kb %d. "+
		"A jump lands on a random slot of max(4r, 64) pages, so no readahead window reaches the next run.", sz.reads, sz.fileBytes>>20, ra.ReadAheadKB, ra.MaxSectorsKB)}}
	est := 400 * time.Millisecond
	if c.Device.Name == "hdd" {
		est = 15 * time.Second
	}
	for _, r := range sz.runs {
		pages := raPattern(sz, r)
		plan.Points = append(plan.Points, &PointSpec{
			ID: "live/run=" + runName(r), Params: map[string]string{"run": runName(r), "where": "live"},
			Files: []string{file}, Est: est,
			Modes: []ModeSpec{{Name: "readahead", Run: func(ctx context.Context, _ *RunInfo) (*Sample, error) {
				return raLive(file, pages)
			}}},
		})
	}
	dev, note := simDevice(c)
	plan.Notes = append(plan.Notes, note)
	for _, r := range sz.runs {
		pages := raPattern(sz, r)
		modes := []ModeSpec{{Name: "readahead", Run: raSimRun(pages, sz, ra, dev, nil, simulate.BaselineName)}}
		for _, spec := range c.Policies {
			modes = append(modes, ModeSpec{Name: spec, Run: raSimRun(pages, sz, ra, dev, []string{spec}, policies.SpecName(spec))})
		}
		plan.Points = append(plan.Points, &PointSpec{
			ID: "simulate/run=" + runName(r), Params: map[string]string{"run": runName(r), "where": "simulate"},
			Cold: "not applicable: simulated (the model starts with an empty cache)", Rounds: 1, Est: 50 * time.Millisecond, Modes: modes,
		})
	}
	return plan, nil
}

// raPattern returns the pages read for run length r: reads/r runs of r
// consecutive pages, each in its own random slot of the file, or one
// contiguous stream for seqRun.
func raPattern(sz raParams, r int) []uint64 {
	out := make([]uint64, 0, sz.reads)
	filePages := uint64(sz.fileBytes / 4096)
	if r == seqRun {
		for i := range sz.reads {
			out = append(out, uint64(i))
		}
		return out
	}
	slot := uint64(max(4*r, 64))
	slots := filePages / slot
	rng := rand.New(rand.NewPCG(uint64(r), 0x5eed))
	perm := rng.Perm(int(slots))
	for i := 0; len(out) < sz.reads; i++ {
		first := uint64(perm[i%len(perm)]) * slot
		for j := 0; j < r && len(out) < sz.reads; j++ {
			out = append(out, first+uint64(j))
		}
	}
	return out
}

// raLive reads pages of file with pread, one page each, asking mincore
// before each read whether the page is resident.
func raLive(file string, pages []uint64) (*Sample, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s for mincore: %w", file, err)
	}
	defer unix.Munmap(m)
	buf := make([]byte, 4096)
	vec := make([]byte, 1)
	lat := make([]float64, 0, len(pages))
	var resident int
	t0 := time.Now()
	for _, p := range pages {
		off := int64(p) * 4096
		if err := harness.Mincore(m[off:off+4096], vec); err != nil {
			return nil, fmt.Errorf("mincore %s: %w", file, err)
		}
		resident += int(vec[0] & 1)
		s := time.Now()
		if _, err := unix.Pread(int(f.Fd()), buf, off); err != nil {
			return nil, fmt.Errorf("read %s at %d: %w", file, off, err)
		}
		lat = append(lat, float64(time.Since(s).Nanoseconds())/1e3)
	}
	wall := time.Since(t0)
	slices.Sort(lat)
	return &Sample{Metrics: map[string]float64{
		"coverage": float64(resident) / float64(len(pages)),
		"p95_us":   harness.Quantile(lat, 0.95),
		"p50_us":   harness.Quantile(lat, 0.5),
		"wall_s":   wall.Seconds(),
	}}, nil
}

// raSimRun simulates the pattern with simulate's readahead model (and
// extra policy lanes) and reports the lane's timely coverage (hits that
// were not late, over demanded pages) and the P95 of per-read stalls.
func raSimRun(pages []uint64, sz raParams, ra policies.RAParams, dev simulate.Device, specs []string, lane string) func(context.Context, *RunInfo) (*Sample, error) {
	return func(context.Context, *RunInfo) (*Sample, error) {
		filePages := uint64(sz.fileBytes / 4096)
		cfg := simulate.Config{CacheBytes: sz.fileBytes * 2, Device: dev, Policies: specs,
			Env: policies.Env{
				FilePages: func(uint32) uint64 { return filePages },
				FileRA:    func(uint32) policies.RAParams { return ra },
			}}
		s, err := simulate.New(cfg)
		if err != nil {
			return nil, err
		}
		idx := 0
		rep := s.Report()
		for i := range rep.Policies {
			if rep.Policies[i].Name == lane {
				idx = i
			}
		}
		stalls := make([]float64, 0, len(pages))
		var prev int64
		ev := policies.Event{Kind: policies.EventFileAccess, File: 1}
		for i, p := range pages {
			ev.TS = uint64(i+1) * 1000 // 1 µs of think time between reads
			ev.Access = policies.FileAccess{Kind: formats.KindRead, Page: p, NPages: 1}
			if err := s.Step(&ev); err != nil {
				return nil, err
			}
			st := s.Report().Policies[idx].StallNS
			stalls = append(stalls, float64(st-prev)/1e3)
			prev = st
		}
		st := s.Report().Policies[idx]
		slices.Sort(stalls)
		cov := 0.0
		if st.Demand > 0 {
			cov = float64(st.Hits-min(st.Late, st.Hits)) / float64(st.Demand)
		}
		return &Sample{Metrics: map[string]float64{
			"coverage":     cov,
			"p95_stall_us": harness.Quantile(stalls, 0.95),
			"stall_s":      float64(st.StallNS) / 1e9,
		}}, nil
	}
}

// fileRA reads the readahead parameters of the device holding path.
func fileRA(path string) policies.RAParams {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return policies.RAParams{}
	}
	maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
	ra, _ := blockdev.Uint("/sys", maj, min, "bdi/read_ahead_kb")
	io, _ := blockdev.Uint("/sys", maj, min, "queue/max_sectors_kb")
	return policies.RAParams{ReadAheadKB: uint32(ra), MaxSectorsKB: uint32(io)}
}

// simDevice is simulate's device for the preset: the bench device
// measurement of this run where there is one, else simulate's preset of
// the device class (uncalibrated).
func simDevice(c *Context) (simulate.Device, string) {
	if c.Profile != nil {
		if d, err := simulate.DeviceFromProfile(c.Profile); err == nil {
			return d, fmt.Sprintf("simulate's device: this run's bench device measurement under preset %s (%.0f µs QD1, %.0f MiB/s sequential).",
				c.Device.Name, float64(d.LatencyNS)/1e3, d.BytesPerSec/(1<<20))
		}
	}
	name := map[string]string{"this": "nvme", "sata-ssd": "sata-ssd", "hdd": "hdd"}[c.Device.Name]
	d := simulate.Presets[name]
	return d, fmt.Sprintf("simulate's device: its %s preset, uncalibrated (no bench device measurement in this run).", name)
}

// readaheadPlots draws coverage and P95 latency against run length, live
// and simulated; seq is drawn at 2x the longest run.
func readaheadPlots(s *SuiteResult) []*Figure {
	cov := &Figure{Name: "readahead-coverage", Title: "Readahead coverage against run length (figure 2)",
		XLabel: "run length (pages; rightmost point: seq)", YLabel: "coverage", LogX: true, LegendBottom: true}
	lat := &Figure{Name: "readahead-p95", Title: "P95 demand-read latency against run length (figure 2)",
		XLabel: "run length (pages; rightmost point: seq)", YLabel: "P95 latency (µs)", LogX: true}
	longest := 1.0
	for _, p := range s.Points {
		if v, err := strconv.Atoi(p.Params["run"]); err == nil {
			longest = math.Max(longest, float64(v))
		}
	}
	for _, where := range []string{"live", "simulate"} {
		modes := map[string]bool{}
		var order []string
		for _, p := range s.Points {
			if p.Params["where"] != where {
				continue
			}
			for _, m := range p.Modes {
				if !modes[m.Mode] {
					modes[m.Mode] = true
					order = append(order, m.Mode)
				}
			}
		}
		for _, mode := range order {
			name := where + " " + mode
			latKey := "p95_us"
			if where == "simulate" {
				latKey = "p95_stall_us"
			}
			cov.Series = append(cov.Series, seriesOver(s, where, mode, "coverage", longest))
			ls := seriesOver(s, where, mode, latKey, longest)
			ls.Name = name
			lat.Series = append(lat.Series, ls)
		}
	}
	return []*Figure{cov, lat}
}

// seriesOver collects a metric of a mode over the run lengths of the
// points of one kind (live or simulate).
func seriesOver(s *SuiteResult, where, mode, key string, longest float64) Series {
	sr := Series{Name: where + " " + mode}
	type pt struct{ x, y, lo, hi float64 }
	var pts []pt
	for _, p := range s.Points {
		if p.Params["where"] != where {
			continue
		}
		m := p.Mode(mode)
		if m == nil || m.Status != StatusOK {
			continue
		}
		sum, ok := m.Metrics[key]
		if !ok || sum.N == 0 {
			continue
		}
		x := 2 * longest
		if v, err := strconv.Atoi(p.Params["run"]); err == nil {
			x = float64(v)
		}
		pts = append(pts, pt{x, sum.Median, sum.Min, sum.Max})
	}
	slices.SortFunc(pts, func(a, b pt) int { return int(math.Copysign(1, a.x-b.x)) })
	for _, p := range pts {
		sr.X = append(sr.X, p.x)
		sr.Y = append(sr.Y, p.y)
		sr.Lo = append(sr.Lo, p.lo)
		sr.Hi = append(sr.Hi, p.hi)
	}
	return sr
}
