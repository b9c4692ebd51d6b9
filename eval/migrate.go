package eval

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
)

func init() { Register(migrateSuite{}) }

// migrateSuite is the paper's figure 14: RocksDB's own iterator readahead
// migrated into a predictio policy (policies' rocksdb), on Debian's
// db_bench. Baseline is RocksDB with its native readahead; native-off
// turns it off (max_auto_readahead_size=0) with no predictio, which
// isolates what the native readahead is worth; Noop runs native-off under
// predictio run with the policy and requests discarded; PredictIO runs it
// with the policy's requests on the kernel backend.
type migrateSuite struct{}

func (migrateSuite) Info() Info {
	return Info{
		Name: "migrate", Figures: "14",
		Measures: "RocksDB (db_bench) with its native iterator readahead against the same readahead ported into predictio (the rocksdb policy): a long sequential scan of a >= 1 GB DB, YCSB-E-like short scans and YCSB-C-like point reads, cold",
		Needs:    "db_bench from Debian's rocksdb-tools (scripts/setup.sh installs it); predictio run (issue 12) for the noop and predictio modes; root",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			switch {
			case quick:
				return 40 * time.Second
			case dev.Name == "hdd":
				return 6 * time.Hour
			case dev.Name == "sata-ssd":
				return 40 * time.Minute
			}
			return 12 * time.Minute // 9m49s measured on 2026-12-01, building the DB included
		},
		Paper: []PaperFigure{{Figure: "14", Caption: "RocksDB readahead migration, latency normalized to Baseline (native readahead)",
			Values: []string{"long scan (1 M records of 1 KiB, 32 MiB block cache): Noop 1.96, PredictIO 0.22, \"a roughly 4.6x speedup\"",
				"YCSB-E (95% short scans, 5% inserts; 1 M records, 100 K ops): Noop 1.70, PredictIO 1.66",
				"YCSB-C (Zipfian point reads): Noop and PredictIO close to Baseline (no number given)"},
			Plot: &Figure{Name: "paper-fig14", Title: "Paper figure 14 (values from its text)", YLabel: "latency / Baseline", RefY: 1,
				Categories: []string{"scan", "ycsb-e", "ycsb-c"},
				Series: []Series{{Name: "Noop", Y: []float64{1.96, 1.70, math.NaN()}},
					{Name: "PredictIO", Y: []float64{0.22, 1.66, math.NaN()}}}}}},
		Plots: migratePlots,
		Compare: func(s *SuiteResult) []Comparison {
			return []Comparison{
				{"RocksDB long scan, Noop / Baseline", "1.96", ratioText(s, "scan", "noop", "baseline", "wall_s")},
				{"RocksDB long scan, PredictIO / Baseline", "0.22 (4.6x over Noop)", ratioText(s, "scan", "predictio", "baseline", "wall_s")},
				{"RocksDB long scan, native readahead off / Baseline (no predictio; not in the paper)", "-", ratioText(s, "scan", "native-off", "baseline", "wall_s")},
				{"YCSB-E, Noop / Baseline", "1.70", ratioText(s, "ycsb-e", "noop", "baseline", "wall_s")},
				{"YCSB-E, PredictIO / Baseline", "1.66", ratioText(s, "ycsb-e", "predictio", "baseline", "wall_s")},
				{"YCSB-C, PredictIO / Baseline", "close to 1", ratioText(s, "ycsb-c", "predictio", "baseline", "wall_s")},
			}
		},
	}
}

// rocksSize is one size of the suite.
type rocksSize struct {
	records int
	ops     int // seekrandom and readrandom operations
}

func rocksSizeOf(quick bool) rocksSize {
	if quick {
		return rocksSize{records: 50_000, ops: 2000}
	}
	return rocksSize{records: 1_000_000, ops: 100_000}
}

func (migrateSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	dbBench, err := exec.LookPath("db_bench")
	if err != nil {
		return &Plan{NotRun: "needs db_bench from Debian's rocksdb-tools: apt-get install rocksdb-tools (scripts/setup.sh does)"}, nil
	}
	sz := rocksSizeOf(c.Quick)
	db := c.workPath(fmt.Sprintf("rocksdb-%d", sz.records))
	if err := buildRocksDB(ctx, c, dbBench, db, sz); err != nil {
		return nil, err
	}
	lr := probeRun(ctx, c.Predictio)
	plan := &Plan{Notes: []string{fmt.Sprintf("DB: %d records of 1 KiB (16-byte keys, no compression), filled in random order and compacted, at %s (%s); block cache 32 MiB; 4 KiB blocks; RocksDB defaults otherwise (advise_random_on_open: kernel readahead off on table files).",
		sz.records, db, humanBytes(dirSize(db))),
		"YCSB-E-like is db_bench seekrandom with 50 Next() per Seek (YCSB-E's mean scan length) and no inserts; YCSB-C-like is readrandom, uniform rather than Zipfian: db_bench 7.8 has neither a scan/insert mix nor a Zipfian key chooser.",
		"native-off is RocksDB with max_auto_readahead_size=0 and no predictio: the cost of losing the native readahead, without the runtime."}}
	type wl struct{ id, bench string }
	for _, w := range []wl{{"scan", "readseq"}, {"ycsb-e", "seekrandom"}, {"ycsb-c", "readrandom"}} {
		args := rocksArgs(dbBench, db, sz, w.bench)
		off := append(append([]string{}, args...), "--max_auto_readahead_size=0")
		modes := []ModeSpec{
			{Name: "baseline", Run: rocksRun(nil, c.WorkDir, args)},
			{Name: "native-off", Run: rocksRun(nil, c.WorkDir, off)},
		}
		for _, m := range []struct{ name, backend string }{{"noop", "none"}, {"predictio", ""}} {
			pols := append([]string{"rocksdb"}, c.Policies...)
			argv, why := lr.command(pols, m.backend, off)
			modes = append(modes, ModeSpec{Name: m.name, NotRun: why, Run: rocksRun(lr, c.WorkDir, argv)})
		}
		plan.Points = append(plan.Points, &PointSpec{ID: w.id, Params: map[string]string{"workload": w.id, "db_bench": w.bench},
			Files: []string{db}, Est: rocksEst(c, w.id, sz), Modes: modes})
	}
	return plan, nil
}

func rocksArgs(bin, db string, sz rocksSize, bench string) []string {
	a := []string{bin, "--benchmarks=" + bench, "--db=" + db, "--use_existing_db=1", "--num=" + strconv.Itoa(sz.records),
		"--key_size=16", "--value_size=1024", "--compression_type=none", "--cache_size=33554432",
		"--disable_auto_compactions=1", "--threads=1", "--seed=1"}
	switch bench {
	case "seekrandom":
		a = append(a, "--seek_nexts=50", "--reads="+strconv.Itoa(sz.ops))
	case "readrandom":
		a = append(a, "--reads="+strconv.Itoa(sz.ops))
	}
	return a
}

func rocksEst(c *Context, id string, sz rocksSize) time.Duration {
	per := map[string]time.Duration{"scan": 10 * time.Second, "ycsb-e": 20 * time.Second, "ycsb-c": 15 * time.Second}[id]
	d := per * time.Duration(sz.records) / 1_000_000
	if c.Device.Name == "hdd" {
		d *= 40
	}
	return max(d, 200*time.Millisecond)
}

// buildRocksDB fills and compacts the DB once; a marker file says it is
// complete, so an interrupted build starts over.
func buildRocksDB(ctx context.Context, c *Context, bin, db string, sz rocksSize) error {
	marker := filepath.Join(db, ".predictio-eval-complete")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.RemoveAll(db); err != nil {
		return fmt.Errorf("build RocksDB: %w", err)
	}
	c.Log("eval: migrate: building a %d-record RocksDB at %s (db_bench fillrandom, compact)", sz.records, db)
	argv := []string{bin, "--benchmarks=fillrandom,compact", "--db=" + db, "--num=" + strconv.Itoa(sz.records),
		"--key_size=16", "--value_size=1024", "--compression_type=none", "--disable_wal=1", "--threads=1", "--seed=1"}
	if _, _, err := timed(ctx, c.WorkDir, argv); err != nil {
		return fmt.Errorf("build RocksDB: %w", err)
	}
	return os.WriteFile(marker, []byte(strings.Join(argv, " ")+"\n"), 0o644)
}

// rocksRun runs one db_bench command and reports its wall time and
// db_bench's own micros/op and ops/sec.
func rocksRun(lr *liveRuntime, dir string, argv []string) func(context.Context, *RunInfo) (*Sample, error) {
	return func(ctx context.Context, _ *RunInfo) (*Sample, error) {
		run, jf := lr.withJSON(argv, dir)
		el, out, err := timed(ctx, dir, run)
		pruneRocksLogs(argv)
		if err != nil {
			return nil, err
		}
		s := &Sample{Metrics: map[string]float64{"wall_s": el.Seconds()}}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, "micros/op") {
				continue
			}
			if v, ok := parseFloatBefore(line, "micros/op"); ok {
				s.Metrics["micros_per_op"] = v
			}
			if v, ok := parseFloatBefore(line, "ops/sec"); ok {
				s.Metrics["ops_per_s"] = v
			}
		}
		if _, ok := s.Metrics["micros_per_op"]; !ok {
			return nil, fmt.Errorf("db_bench printed no micros/op line: %s", tail(out, 400))
		}
		if jf != "" {
			runCounters(jf, s)
		}
		return s, nil
	}
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// migratePlots draws wall time normalized to the baseline's median, one
// bar per mode and workload, the spread normalized the same way.
func migratePlots(s *SuiteResult) []*Figure {
	return []*Figure{normalizedBars(s, "migrate-normalized", "RocksDB readahead migration (figure 14)", "wall time / Baseline", "wall_s", "baseline",
		[]string{"baseline", "native-off", "noop", "predictio"})}
}

// normalizedBars draws metric key of each mode over the baseline mode's
// median, per point (category = point ID).
func normalizedBars(s *SuiteResult, name, title, ylabel, key, base string, modes []string) *Figure {
	f := &Figure{Name: name, Title: title, YLabel: ylabel, RefY: 1}
	series := make([]Series, len(modes))
	for i, m := range modes {
		series[i].Name = m
	}
	for _, p := range s.Points {
		f.Categories = append(f.Categories, p.ID)
		b := p.Mode(base)
		var bm float64
		if b != nil && b.Status == StatusOK {
			bm = b.Metrics[key].Median
		}
		for i, m := range modes {
			y, lo, hi := math.NaN(), math.NaN(), math.NaN()
			if mr := p.Mode(m); mr != nil && mr.Status == StatusOK && bm > 0 {
				sm := mr.Metrics[key]
				y, lo, hi = sm.Median/bm, sm.Min/bm, sm.Max/bm
			}
			series[i].Y = append(series[i].Y, y)
			series[i].Lo = append(series[i].Lo, lo)
			series[i].Hi = append(series[i].Hi, hi)
		}
	}
	for i := range series {
		if allNaN(series[i].Y) {
			series[i].Name += " (not run)"
		}
	}
	f.Series = series
	return f
}

func allNaN(v []float64) bool {
	for _, x := range v {
		if !math.IsNaN(x) {
			return false
		}
	}
	return true
}

// pruneRocksLogs removes the LOG.old.* files each db_bench run leaves in
// the DB directory, so that the workload's files stay the same.
func pruneRocksLogs(argv []string) {
	for _, a := range argv {
		if db, ok := strings.CutPrefix(a, "--db="); ok {
			old, _ := filepath.Glob(filepath.Join(db, "LOG.old.*"))
			for _, f := range old {
				os.Remove(f)
			}
		}
	}
}
