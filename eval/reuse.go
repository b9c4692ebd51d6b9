package eval

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/internal/workload/lmdbenv"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
)

func init() { Register(reuseSuite{}) }

// reuseSuite is the paper's figure 13: the same tree policy on two
// independently built B-tree engines, SQLite and LMDB, each through its
// own adapter, each normalized to its own Baseline.
type reuseSuite struct{}

func (reuseSuite) Info() Info {
	return Info{
		Name: "reuse", Figures: "13",
		Measures: "the same tree policy on SQLite and LMDB: cold range scans of 2^14 keys of >= 1 GB stores filled in random key order (SQLite: the sqlite suite's YCSB table; LMDB: 900 K entries of 1 KiB, read with and without MDB_NORDAHEAD), each normalized to its own Baseline",
		Needs:    "sqlite3, lmdb-utils (mdb_load), liblmdb-dev and a C compiler (scripts/setup.sh); predictio run (issue 12) with the SQLite and LMDB adapters for Noop and Tree",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			switch {
			case quick:
				return 30 * time.Second
			case dev.Name == "hdd":
				return 2 * time.Hour
			}
			return 4 * time.Minute // 1m50s measured on 2026-12-01, building the LMDB environment included
		},
		Paper: []PaperFigure{{Figure: "13", Caption: "policy reuse: one tree-aware policy on SQLite and LMDB",
			Values: []string{"SQLite -34.3%", "LMDB -32.0%"},
			Plot: &Figure{Name: "paper-fig13", Title: "Paper figure 13 (values from its text)", YLabel: "latency / Baseline", RefY: 1,
				Categories: []string{"SQLite", "LMDB"}, Series: []Series{{Name: "PredictIO", Y: []float64{1 - 0.343, 1 - 0.320}}}}}},
		Compare: func(s *SuiteResult) []Comparison {
			return []Comparison{
				{"Tree policy on SQLite, Tree / Baseline", "0.66 (-34.3%)", ratioText(s, "sqlite", "tree", "baseline", "wall_s")},
				{"Tree policy on LMDB (MDB_NORDAHEAD), Tree / Baseline", "0.68 (-32.0%)", ratioText(s, "lmdb-nordahead", "tree", "baseline", "wall_s")},
			}
		},
		Plots: func(s *SuiteResult) []*Figure {

			return []*Figure{normalizedBars(s, "reuse-normalized", "One tree policy on SQLite and LMDB (figure 13)", "wall time / Baseline", "wall_s", "baseline",
				[]string{"baseline", "noop", "tree"})}
		},
	}
}

var reuseModes = []liveMode{
	{name: "baseline", alone: true},
	{name: "noop", policies: []string{"tree"}, backend: "none"},
	{name: "tree", policies: []string{"tree"}},
}

func (reuseSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	var missing []string
	for _, p := range []struct{ bin, pkg string }{{"sqlite3", "sqlite3"}, {"mdb_load", "lmdb-utils"}, {"cc", "gcc"}} {
		if _, err := exec.LookPath(p.bin); err != nil {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) > 0 {
		return &Plan{NotRun: "needs " + strings.Join(missing, ", ") + ": apt-get install " + strings.Join(missing, " ") + " (scripts/setup.sh does)"}, nil
	}
	scan, sqlRows, lmdbEntries := 1<<14, sqlitedb.DefaultRowsWithoutRowid, lmdbenv.DefaultEntries
	if c.Quick {
		scan, sqlRows, lmdbEntries = 1<<10, 1<<13, 1<<14
	}
	lr := probeRun(ctx, c.Predictio)
	plan := &Plan{Notes: []string{"The SQLite store is the sqlite suite's WITHOUT ROWID YCSB table, scanned by key from a quarter in; the LMDB store is filled in random key order with mdb_load and read by lmdb-scan (internal/workload/lmdbenv) from a quarter in, with MDB_NORDAHEAD (as LMDB users open large databases) and without it (the kernel's mmap read-around streams much of a full dump, less of a range scan)."}}

	pn := sqlitePanel{id: "ycsb", layout: sqlitedb.WithoutRowid, by: sqlitedb.ByKey, rows: sqlRows}
	db := c.workPath(fmt.Sprintf("sqlite-%s-%d.db", pn.layout, pn.rows))
	if err := buildSQLite(ctx, c, db, pn); err != nil {
		return nil, err
	}
	q, err := sqlitedb.ScanSQL(pn.layout, pn.by, sqlRows/4, scan)
	if err != nil {
		return nil, err
	}
	plan.Points = append(plan.Points, &PointSpec{ID: "sqlite", Params: map[string]string{"engine": "sqlite", "keys": strconv.Itoa(scan)},
		Files: []string{db}, Est: sqliteEst(c, scan),
		Modes: liveModeSpecs(lr, c.WorkDir, sqlitedb.ScanArgs("sqlite3", db, q), reuseModes, c.Policies, checkCount(scan))})

	env := c.workPath(fmt.Sprintf("lmdb-%d", lmdbEntries))
	if err := buildLMDB(ctx, c, env, lmdbEntries); err != nil {
		return nil, err
	}
	scanner, err := lmdbenv.BuildScanner(ctx, c.workPath(), "")
	if err != nil {
		return &Plan{NotRun: err.Error()}, nil
	}
	for _, nord := range []bool{true, false} {
		id := map[bool]string{true: "lmdb-nordahead", false: "lmdb"}[nord]
		argv := lmdbenv.ScanArgs(scanner, env, lmdbEntries/4, scan, nord)
		plan.Points = append(plan.Points, &PointSpec{ID: id, Params: map[string]string{"engine": id, "keys": strconv.Itoa(scan)},
			Files: []string{env}, Est: sqliteEst(c, scan),
			Modes: liveModeSpecs(lr, c.WorkDir, argv, reuseModes, c.Policies, checkLMDB(scan))})
	}
	return plan, nil
}

func buildLMDB(ctx context.Context, c *Context, env string, entries int) error {
	data := filepath.Join(env, "data.mdb")
	if keepFile(data) {
		return nil
	}
	os.RemoveAll(env)
	os.Remove(data + ".complete")
	c.Log("eval: reuse: building the LMDB environment %s (%d entries, random order)", env, entries)
	if err := lmdbenv.Build(ctx, lmdbenv.Config{Dir: env, Entries: entries, Seed: 13}); err != nil {
		return err
	}
	return markComplete(data, fmt.Sprintf("lmdbenv entries=%d seed=13", entries))
}

// checkLMDB parses lmdb-scan's "got bytes sum" line and checks got.
func checkLMDB(want int) func([]byte, *Sample) error {
	return func(out []byte, s *Sample) error {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			n, err := strconv.Atoi(f[0])
			if err != nil {
				continue
			}
			if n != want {
				return fmt.Errorf("lmdb-scan read %d entries, want %d", n, want)
			}
			s.Metrics["keys"] = float64(n)
			return nil
		}
		return fmt.Errorf("lmdb-scan printed no count: %s", tail(out, 300))
	}
}
