package eval

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/internal/workload/llamacpp"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
)

func init() { Register(devicesSuite{}) }

// devicesSuite is the paper's figures 15-17: one representative
// configuration of the launch, sqlite and llm suites on each device
// preset, every point under its own cgroup throttle, each against the
// same device's Baseline.
type devicesSuite struct{}

func (devicesSuite) Info() Info {
	return Info{
		Name: "devices", Figures: "15-17",
		Measures: "one configuration of launch (python3), sqlite (a 2^14-row YCSB scan by key) and llm (the no-mmap load of the Q8_0 model), each with predictio run and with the daemon running, on the device presets this, sata-ssd and hdd (cgroup read throttling), each against its own device's Baseline",
		Needs:    "cgroup v1 blkio throttling or cgroup v2 io.max; what the launch, sqlite and llm suites need",
		Expected: func(quick bool, _ harness.Preset) time.Duration {
			if quick {
				return time.Minute
			}
			return 70 * time.Minute // 57m54s measured, 2026-12-02, the workloads built
		},
		Paper: []PaperFigure{
			{Figure: "15", Caption: "Blender launch on NVMe, SATA SSD and HDD", Values: []string{"startup latency -8.7% to -10.1% on every device"}},
			{Figure: "16", Caption: "SQLite range scan on NVMe, SATA SSD and HDD", Values: []string{"2.64x on NVMe", "still beneficial on SATA SSD and HDD, the gain shrinking as the device slows"}},
			{Figure: "17", Caption: "LLM load on NVMe, SATA SSD and HDD", Values: []string{"about -10% to -11% on both SSDs", "little benefit on HDD (sequential-bandwidth bound)"}},
		},
		Compare: func(s *SuiteResult) []Comparison {
			var out []Comparison
			for _, d := range []string{"this", "sata-ssd", "hdd"} {
				out = append(out,
					Comparison{"launch (python3) on " + d + ", daemon / Baseline", "Blender: -8.7% to -10.1% on every device", ratioText(s, "launch-python3/"+d, "daemon", "baseline", "wall_s")},
					Comparison{"launch (python3) on " + d + ", predictio run / Baseline", "-", ratioText(s, "launch-python3/"+d, "predictio", "baseline", "wall_s")},
					Comparison{"SQLite scan on " + d + ", predictio run / Baseline", sqlitePaper[d], ratioText(s, "sqlite-2^14/"+d, "predictio", "baseline", "wall_s")},
					Comparison{"SQLite scan on " + d + ", daemon / Baseline", sqlitePaper[d], ratioText(s, "sqlite-2^14/"+d, "daemon", "baseline", "wall_s")},
					Comparison{"LLM load on " + d + ", predictio run / Baseline", llmPaper[d], ratioText(s, "llm-no-mmap/"+d, "predictio", "baseline", "wall_s")},
					Comparison{"LLM load on " + d + ", daemon / Baseline", llmPaper[d], ratioText(s, "llm-no-mmap/"+d, "daemon", "baseline", "wall_s")})
			}
			return out
		},
		Plots: func(s *SuiteResult) []*Figure {

			return []*Figure{normalizedBars(s, "devices-normalized", "Across devices, normalized to each device's baseline (figures 15-17)", "wall time / Baseline", "wall_s", "baseline",
				[]string{"baseline", "noop", "predictio", "daemon"})}
		},
	}
}

// The paper's figures 16 and 17 by device preset.
var (
	sqlitePaper = map[string]string{"this": "0.38 (2.64x on NVMe)", "sata-ssd": "beneficial, less than on NVMe", "hdd": "beneficial, least"}
	llmPaper    = map[string]string{"this": "about 0.89-0.90", "sata-ssd": "about 0.89-0.90", "hdd": "little benefit"}
)

func (devicesSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	presets := []string{"this", "sata-ssd", "hdd"}
	if c.Quick {
		presets = []string{"this", "sata-ssd"}
	}
	plan := &Plan{Notes: []string{"Each point runs under its own preset's throttle; its Baseline is on the same preset. " +
		"The parts are the launch suite's python3 point, the sqlite suite's YCSB scan of 2^14 rows (quick: 2^10 of a small table) and the llm suite's no-mmap load of the Q8_0 model (quick: the small model)."}}
	parts, notes, err := devicesParts(ctx, c)
	if err != nil {
		return nil, err
	}
	plan.Notes = append(plan.Notes, notes...)
	for _, d := range presets {
		for _, p := range parts {
			q := *p
			q.ID, q.Device = p.ID+"/"+d, d
			q.Params = map[string]string{"workload": p.ID, "device": d}
			if d == "hdd" {
				q.Est *= 20
			}
			plan.Points = append(plan.Points, &q)
		}
	}
	return plan, nil
}

// devicesParts builds the three representative points (or not-run points
// saying what each lacks).
func devicesParts(ctx context.Context, c *Context) ([]*PointSpec, []string, error) {
	var parts []*PointSpec
	var notes []string
	modes := []ModeSpec{{Name: "baseline"}, {Name: "noop"}, {Name: "predictio"}, {Name: "daemon"}}

	lc := *c
	lc.Quick, lc.Policies = true, nil // python3 is among the quick programs
	lp, err := launchSuite{}.Plan(ctx, &lc)
	if err != nil {
		return nil, nil, err
	}
	launch := &PointSpec{ID: "launch-python3", NotRun: "the launch suite has no python3 point", Modes: modes}
	for _, p := range lp.Points {
		if p.ID == "python3" {
			launch = p
		}
	}
	parts = append(parts, launch)
	notes = append(notes, lp.Notes...)

	sq, err := devicesSQLite(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	parts = append(parts, sq)
	if c.Quick {
		notes = append(notes, "Quick: the llm part runs in the full suite only (one load of even the small model takes about 10 s of CPU here).")
	} else {
		lm, err := devicesLLM(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		parts = append(parts, lm)
	}
	parts[0].ID = "launch-python3"
	return parts, notes, nil
}

func devicesSQLite(ctx context.Context, c *Context) (*PointSpec, error) {
	id := "sqlite-2^14"
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return &PointSpec{ID: id, NotRun: "needs the sqlite3 CLI (apt-get install sqlite3)", Modes: []ModeSpec{{Name: "baseline"}}}, nil
	}
	pn := sqlitePanel{id: "ycsb", layout: sqlitedb.WithoutRowid, by: sqlitedb.ByKey, rows: sqlitedb.DefaultRowsWithoutRowid}
	n := 1 << 14
	if c.Quick {
		pn.rows, n = 1<<13, 1<<10
	}
	db := c.workPath(fmt.Sprintf("sqlite-%s-%d.db", pn.layout, pn.rows))
	if err := buildSQLite(ctx, c, db, pn); err != nil {
		return nil, err
	}
	q, err := sqlitedb.ScanSQL(pn.layout, pn.by, pn.rows/4, n)
	if err != nil {
		return nil, err
	}
	lr := probeRun(ctx, c.Predictio)
	ms := []liveMode{{name: "baseline", alone: true}, {name: "noop", policies: []string{"tree"}, backend: "none"}, {name: "predictio", policies: []string{"tree"}}}
	argv := sqlitedb.ScanArgs("sqlite3", db, q)
	modes := liveModeSpecs(lr, c.WorkDir, argv, ms, nil, checkCount(n))
	// The daemon learns sqlite3 from scans of other keys than the one
	// measured (rows/2, 5/8 and 3/4 on), not from the measured scan.
	var train [][]string
	for i := range 3 {
		tq, err := sqlitedb.ScanSQL(pn.layout, pn.by, pn.rows/2+i*pn.rows/8, n)
		if err != nil {
			return nil, err
		}
		train = append(train, sqlitedb.ScanArgs("sqlite3", db, tq))
	}
	modes = append(modes, daemonMode(ctx, c, daemonWorkload{id: "sqlite3", dir: c.workPath("devices"), argv: argv, train: train, files: []string{db}, parse: checkCount(n)}))
	return &PointSpec{ID: id, Files: []string{db}, Est: sqliteEst(c, n), Modes: modes}, nil
}

func devicesLLM(ctx context.Context, c *Context) (*PointSpec, error) {
	id := "llm-no-mmap"
	dir := llmDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		return &PointSpec{ID: id, NotRun: "needs node-llama-cpp in " + dir + " (scripts/setup.sh)", Modes: []ModeSpec{{Name: "baseline"}}}, nil
	}
	ms := llmModels(c.Quick)
	lm := ms[len(ms)-1]
	path := c.workPath("llm-" + lm.id + ".gguf")
	if err := buildGGUF(c, path, lm.model); err != nil {
		return nil, err
	}
	cmd, err := llamacpp.Command(ctx, dir, path, false)
	if err != nil {
		return &PointSpec{ID: id, NotRun: err.Error(), Modes: []ModeSpec{{Name: "baseline"}}}, nil
	}
	lr := probeRun(ctx, c.Predictio)
	modes := []liveMode{{name: "baseline", alone: true}, {name: "noop", policies: []string{"tensor"}, backend: "none"}, {name: "predictio", policies: []string{"tensor"}}}
	files := []string{path, filepath.Join(dir, "node_modules", "@node-llama-cpp")}
	specs := liveModeSpecs(lr, dir, cmd.Args, modes, nil, parseLoad)
	// A model is loaded again as it was: the daemon learns the same load.
	specs = append(specs, daemonMode(ctx, c, daemonWorkload{id: "llm-" + lm.id, dir: dir, state: c.workPath("devices"), argv: cmd.Args, files: files, parse: parseLoad}))
	return &PointSpec{ID: id, Files: files, Est: llmEst(c, path), Modes: specs}, nil
}
