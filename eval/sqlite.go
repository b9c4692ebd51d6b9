package eval

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/internal/workload/sqlitedb"
)

func init() { Register(sqliteSuite{}) }

// sqliteSuite is the paper's figure 11: range scans of the unmodified
// sqlite3 CLI (mmap off, a 2 MiB page cache) on databases filled in
// random key order. Left panel: a rowid table scanned by id; right panel:
// a YCSB-style WITHOUT ROWID table of 1 KiB values scanned by key.
// Baseline runs sqlite3 alone; Noop, Physical and Tree run it under
// predictio run, whose SQLite adapter derives the B-tree events.
type sqliteSuite struct{}

func (sqliteSuite) Info() Info {
	return Info{
		Name: "sqlite", Figures: "11",
		Measures: "range scans of the unmodified sqlite3 CLI (PRAGMA mmap_size=0, cache_size=-2048), cold: left, a rowid table of 1 KiB rows in random id order scanned by id (2^16 to 2^21 rows); right, a YCSB-style WITHOUT ROWID table (400 K rows of 1 KiB in random key order, 1.9 GB) scanned by key (2^10 to 2^16 rows); Baseline, Noop, Physical and Tree",
		Needs:    "sqlite3 (scripts/setup.sh); predictio run (issue 12) with the SQLite adapter for Noop, Physical and Tree; root",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			switch {
			case quick:
				return 40 * time.Second
			case dev.Name == "hdd":
				return 5 * time.Hour // 2^16 rows take minutes per run at 343 IOPS
			}
			return 35 * time.Minute // 29m55s measured on 2026-12-01, building the databases included
		},
		Paper: []PaperFigure{
			{Figure: "11 (left)", Caption: "fragmented kv(id, payload), scans of 2^16-2^21 records",
				Values: []string{"Noop stays near Baseline", "Tree achieves lower latency", "Physical near or slightly above Baseline", "no numbers in the text"}},
			{Figure: "11 (right)", Caption: "YCSB-style, 1 M records of 1 KiB in random key order, scans of 2^10-2^16 records",
				Values: []string{"Tree reduces latency by 38.3-66.6%", "2.99x at the smallest scan (2^10)", "Physical near or slightly above Baseline, Noop near Baseline"},
				Plot: &Figure{Name: "paper-fig11", Title: "Paper figure 11, right (end points from its text)", XLabel: "scan length (rows)", YLabel: "latency / Baseline", LogX: true, RefY: 1,
					Series: []Series{{Name: "Tree (2.99x at 2^10, -38.3% at 2^16)", X: []float64{1024, 65536}, Y: []float64{1 / 2.99, 1 - 0.383}}}}},
		},
		Compare: func(s *SuiteResult) []Comparison {
			small, large := pointWith(s, "ycsb/", true), pointWith(s, "ycsb/", false)
			return []Comparison{
				{"SQLite YCSB scan, Tree / Baseline at the smallest scan (" + small + ")", "0.33 (2.99x at 2^10 rows)", ratioText(s, small, "tree", "baseline", "wall_s")},
				{"SQLite YCSB scan, Tree / Baseline at the largest scan (" + large + ")", "0.62 (-38.3% at 2^16)", ratioText(s, large, "tree", "baseline", "wall_s")},
				{"SQLite YCSB scan, Physical / Baseline (" + small + ")", "near or slightly above 1", ratioText(s, small, "physical", "baseline", "wall_s")},
				{"SQLite YCSB scan, Noop / Baseline (" + small + ")", "near 1", ratioText(s, small, "noop", "baseline", "wall_s")},
			}
		},
		Plots: func(s *SuiteResult) []*Figure {

			modes := []string{"baseline", "noop", "physical", "tree"}
			return []*Figure{
				normalizedLines(s, "panel", "kv", "sqlite-kv", "SQLite rowid table scanned by id (figure 11, left)", "scan length (rows)", "rows", modes),
				normalizedLines(s, "panel", "ycsb", "sqlite-ycsb", "SQLite YCSB-style table scanned by key (figure 11, right)", "scan length (rows)", "rows", modes),
			}
		},
	}
}

type sqlitePanel struct {
	id     string
	layout sqlitedb.Layout
	by     sqlitedb.Scan
	rows   int
	scans  []int
	start  func(rows, n int) int
}

func sqlitePanels(quick bool) []sqlitePanel {
	kv := sqlitePanel{id: "kv", layout: sqlitedb.Rowid, by: sqlitedb.ByRowid, rows: 1 << 21,
		scans: []int{1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 21}, start: func(int, int) int { return 0 }}
	ycsb := sqlitePanel{id: "ycsb", layout: sqlitedb.WithoutRowid, by: sqlitedb.ByKey, rows: sqlitedb.DefaultRowsWithoutRowid,
		scans: []int{1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16}, start: func(rows, _ int) int { return rows / 4 }}
	if quick {
		kv.rows, kv.scans = 1<<14, []int{1 << 12, 1 << 14}
		ycsb.rows, ycsb.scans = 1<<13, []int{1 << 8, 1 << 10}
	}
	return []sqlitePanel{kv, ycsb}
}

var sqliteModes = []liveMode{
	{name: "baseline", alone: true},
	{name: "noop", policies: []string{"tree"}, backend: "none"},
	{name: "physical", policies: []string{"physical"}},
	{name: "tree", policies: []string{"tree"}},
}

func (sqliteSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return &Plan{NotRun: "needs the sqlite3 CLI: apt-get install sqlite3 (scripts/setup.sh does)"}, nil
	}
	lr := probeRun(ctx, c.Predictio)
	plan := &Plan{Notes: []string{"Scans run `sqlite3 -batch DB 'PRAGMA mmap_size=0' 'PRAGMA cache_size=-2048' QUERY`; each query reads the values of n consecutive rows and returns their count, which is checked. " +
		"The kv panel is a rowid table (id INTEGER PRIMARY KEY, ycsb_key, field0) filled in random id order, scanned by id from id 0; the ycsb panel a WITHOUT ROWID table keyed by text, whose 1 KiB values overflow, scanned by key from a quarter in. " +
		"Noop runs the SQLite adapter and the tree policy with requests discarded; Physical prefetches the pages after each accessed page."}}
	for _, pn := range sqlitePanels(c.Quick) {
		db := c.workPath(fmt.Sprintf("sqlite-%s-%d.db", pn.layout, pn.rows))
		if err := buildSQLite(ctx, c, db, pn); err != nil {
			return nil, err
		}
		for _, n := range pn.scans {
			q, err := sqlitedb.ScanSQL(pn.layout, pn.by, pn.start(pn.rows, n), n)
			if err != nil {
				return nil, err
			}
			argv := sqlitedb.ScanArgs("sqlite3", db, q)
			plan.Points = append(plan.Points, &PointSpec{
				ID: fmt.Sprintf("%s/rows=%d", pn.id, n), Params: map[string]string{"panel": pn.id, "rows": strconv.Itoa(n), "layout": string(pn.layout)},
				Files: []string{db}, Est: sqliteEst(c, n),
				Modes: liveModeSpecs(lr, c.WorkDir, argv, sqliteModes, c.Policies, checkCount(min(n, pn.rows-pn.start(pn.rows, n)))),
			})
		}
	}
	return plan, nil
}

func sqliteEst(c *Context, rows int) time.Duration {
	d := time.Duration(rows) * 60 * time.Microsecond
	if c.Device.Name == "hdd" {
		d = time.Duration(rows) * 6 * time.Millisecond
	}
	return max(d, 100*time.Millisecond)
}

func buildSQLite(ctx context.Context, c *Context, db string, pn sqlitePanel) error {
	if keepFile(db) {
		return nil
	}
	startOver(db)
	c.Log("eval: sqlite: building %s (%d rows, layout %s, random order); minutes at full size", db, pn.rows, pn.layout)
	cfg := sqlitedb.Config{Path: db, Layout: pn.layout, Rows: pn.rows, Seed: 11}
	if err := sqlitedb.Build(ctx, cfg); err != nil {
		return err
	}
	return markComplete(db, fmt.Sprintf("sqlitedb %s rows=%d seed=11", pn.layout, pn.rows))
}

// checkCount parses sqlite3's "count|sum" line and checks the count.
func checkCount(want int) func([]byte, *Sample) error {
	return func(out []byte, s *Sample) error {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(strings.TrimSpace(l), "|")
			if len(f) != 2 {
				continue
			}
			n, err := strconv.Atoi(f[0])
			if err != nil {
				continue
			}
			if n != want {
				return fmt.Errorf("scan returned %d rows, want %d", n, want)
			}
			s.Metrics["rows"] = float64(n)
			return nil
		}
		return fmt.Errorf("sqlite3 printed no count: %s", tail(out, 300))
	}
}

// normalizedLines draws metric wall_s of each mode over the baseline's
// median against the numeric param x, for the points whose param key is
// val.
func normalizedLines(s *SuiteResult, key, val, name, title, xlabel, x string, modes []string) *Figure {
	f := &Figure{Name: name, Title: title, XLabel: xlabel, YLabel: "wall time / Baseline", LogX: true, RefY: 1}
	for _, m := range modes {
		sr := Series{Name: m}
		for _, p := range s.Points {
			if p.Params[key] != val {
				continue
			}
			xv, err := strconv.ParseFloat(p.Params[x], 64)
			b, mr := p.Mode("baseline"), p.Mode(m)
			if err != nil || b == nil || mr == nil || b.Status != StatusOK || mr.Status != StatusOK {
				continue
			}
			bm := b.Metrics["wall_s"].Median
			if bm <= 0 {
				continue
			}
			sm := mr.Metrics["wall_s"]
			sr.X = append(sr.X, xv)
			sr.Y = append(sr.Y, sm.Median/bm)
			sr.Lo = append(sr.Lo, sm.Min/bm)
			sr.Hi = append(sr.Hi, sm.Max/bm)
		}
		if len(sr.Y) == 0 {
			sr.Name += " (not run)"
			sr.X, sr.Y = []float64{1}, []float64{math.NaN()}
		}
		f.Series = append(f.Series, sr)
	}
	return f
}
