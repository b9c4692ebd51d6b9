package launchbench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Row summarizes one program in one mode.
type Row struct {
	Program string  `json:"program"`
	Mode    string  `json:"mode"`
	N       int     `json:"n"`
	Median  float64 `json:"median_ms"`
	P25     float64 `json:"p25_ms"`
	P75     float64 `json:"p75_ms"`
	Min     float64 `json:"min_ms"`
	Max     float64 `json:"max_ms"`
	// Change is (median - baseline median) / baseline median.
	Change float64 `json:"change_vs_baseline"`
	// InBlock is the median of the command's block reads, in 4 KiB pages.
	InBlock float64 `json:"inblock_pages_median"`
	Residue uint64  `json:"residue_pages_max"`
}

// summarize computes the rows, in program then mode order.
func summarize(ss []Sample, modes []string) []Row {
	var progs []string
	for _, s := range ss {
		if !slices.Contains(progs, s.Program) {
			progs = append(progs, s.Program)
		}
	}
	var rows []Row
	for _, p := range progs {
		var base float64
		for _, m := range modes {
			var wall, inb []float64
			var res uint64
			for _, s := range ss {
				if s.Program == p && s.Mode == m {
					wall = append(wall, float64(s.Wall)/1e6)
					inb = append(inb, float64(s.InBlock)/8)
					res = max(res, s.Residue)
				}
			}
			if len(wall) == 0 {
				continue
			}
			slices.Sort(wall)
			slices.Sort(inb)
			r := Row{Program: p, Mode: m, N: len(wall), Median: quantile(wall, 0.5), P25: quantile(wall, 0.25), P75: quantile(wall, 0.75),
				Min: wall[0], Max: wall[len(wall)-1], InBlock: quantile(inb, 0.5), Residue: res}
			if m == ModeBaseline {
				base = r.Median
			}
			if base > 0 {
				r.Change = (r.Median - base) / base
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// quantile of sorted v (linear interpolation).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	x := q * float64(len(v)-1)
	i := int(x)
	if i+1 >= len(v) {
		return v[len(v)-1]
	}
	return v[i] + (x-float64(i))*(v[i+1]-v[i])
}

// Agreement compares, per program, what the daemon's /metrics said its
// prefetches saved the program (pages used in time and late: pages the
// program did not have to read itself) with what the program's own block
// reads show: baseline's median minus the daemon mode's.
type Agreement struct {
	Program string `json:"program"`
	// MetricsPrefetched is the median of /metrics' prefetched pages per
	// daemon launch; DaemonRead the median of what the daemon process read
	// from storage then (/proc/PID/io): the same pages, counted inside
	// and outside the daemon.
	MetricsPrefetched float64 `json:"metrics_prefetched_pages"`
	DaemonRead        float64 `json:"daemon_read_pages"`
	// MetricsSubmitted is the median of the pages the daemon's backend
	// read ahead per launch (/metrics, backend submitted), which
	// DaemonRead measures outside the daemon; Effect says the daemon
	// counted effects (MetricsPrefetched, MetricsPages), which it does only
	// with effect = true.
	MetricsSubmitted float64 `json:"metrics_submitted_pages"`
	Effect           bool    `json:"effect"`
	// MetricsPages is the median of used_in_time + late over the daemon
	// launches; SavedPages the baseline's median block reads (4 KiB
	// pages) minus the daemon launches' median.
	MetricsPages float64 `json:"metrics_pages"`
	SavedPages   float64 `json:"saved_pages"`
	// Launches is the prefetched launches /metrics counted; Measured the
	// daemon launches the harness ran.
	Launches float64 `json:"metrics_launches"`
	Measured int     `json:"measured_launches"`
}

func agreement(ss []Sample) []Agreement {
	var out []Agreement
	for _, p := range DefaultPrograms {
		var base, dm, used, pref, dread, sub []float64
		var launches float64
		effect := false
		n := 0
		for _, s := range ss {
			if s.Program != p {
				continue
			}
			switch s.Mode {
			case ModeBaseline:
				base = append(base, float64(s.InBlock)/8)
			case ModeDaemon:
				dm = append(dm, float64(s.InBlock)/8)
				if s.Metrics != nil {
					used = append(used, s.Metrics.UsedInTime+s.Metrics.Late)
					pref = append(pref, s.Metrics.Prefetched)
					dread = append(dread, s.Metrics.DaemonRead)
					sub = append(sub, s.Metrics.Submitted)
					effect = effect || s.Metrics.Effect
					launches += s.Metrics.Launches
				}
				n++
			}
		}
		if len(base) == 0 || len(dm) == 0 {
			continue
		}
		slices.Sort(base)
		slices.Sort(dm)
		slices.Sort(used)
		slices.Sort(pref)
		slices.Sort(dread)
		slices.Sort(sub)
		out = append(out, Agreement{Program: p, MetricsPages: quantile(used, 0.5), SavedPages: quantile(base, 0.5) - quantile(dm, 0.5),
			MetricsPrefetched: quantile(pref, 0.5), DaemonRead: quantile(dread, 0.5), MetricsSubmitted: quantile(sub, 0.5),
			Effect: effect, Launches: launches, Measured: n})
	}
	return out
}

// WriteJSON writes the report.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteMarkdown writes the tables docs/BENCHMARKS.md takes.
func (r *Report) WriteMarkdown(w io.Writer) {
	temp := "cold (drop_caches before each launch, verified)"
	if r.Warm {
		temp = "warm"
	}
	fmt.Fprintf(w, "Launches %s, %d rounds (modes alternating, rotated each round), after %d learned launches; kernel %s; %s.\n\n",
		temp, r.Rounds, r.Learn, r.Kernel, r.Started.Format(time.DateOnly))
	fmt.Fprintln(w, "| program | mode | median ms | p25–p75 ms | min–max ms | vs baseline | block reads (pages) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		ch := "—"
		if row.Mode != ModeBaseline {
			ch = fmt.Sprintf("%+.1f%%", 100*row.Change)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.1f–%.1f | %.1f–%.1f | %s | %.0f |\n", row.Program, row.Mode, row.Median, row.P25, row.P75, row.Min, row.Max, ch, row.InBlock)
	}
	if g := r.geomean(ModeDaemon); !math.IsNaN(g) {
		fmt.Fprintf(w, "\nGeometric mean of median/baseline: daemon %+.1f%%", 100*(g-1))
		if g2 := r.geomean(ModeRun); !math.IsNaN(g2) {
			fmt.Fprintf(w, ", run %+.1f%%", 100*(g2-1))
		}
		fmt.Fprintln(w, ".")
	}
	if len(r.Agree) > 0 {
		fmt.Fprintln(w, "\n| program | /metrics: pages the backend read ahead | the daemon's storage reads (/proc/PID/io, pages) | /metrics: pages prefetched, used in time + late | the program's block reads saved vs baseline (pages; includes readahead it no longer triggers) | launches prefetched, /metrics / measured |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, a := range r.Agree {
			eff := "not counted (the daemon's effect = false)"
			if a.Effect {
				eff = fmt.Sprintf("%.0f, %.0f", a.MetricsPrefetched, a.MetricsPages)
			}
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %.0f | %.0f / %d |\n", a.Program, a.MetricsSubmitted, a.DaemonRead, eff, a.SavedPages, a.Launches, a.Measured)
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "\nSkipped: %s.\n", strings.Join(r.Skipped, "; "))
	}
	if len(r.Overhead) > 0 {
		writeOverhead(w, r.Overhead)
	}
}

// geomean is the geometric mean over programs of mode's median divided by
// the baseline's.
func (r *Report) geomean(mode string) float64 {
	base := map[string]float64{}
	for _, row := range r.Rows {
		if row.Mode == ModeBaseline {
			base[row.Program] = row.Median
		}
	}
	var sum float64
	n := 0
	for _, row := range r.Rows {
		if row.Mode == mode && base[row.Program] > 0 {
			sum += math.Log(row.Median / base[row.Program])
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(sum / float64(n))
}

// WritePlot draws the median launch time of every program in each mode,
// as a ratio to its baseline, with the p25–p75 spread, into file (.png,
// .svg or .pdf).
func (r *Report) WritePlot(file string) error {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	switch ext {
	case "png", "svg", "pdf":
	default:
		return fmt.Errorf("write plot %s: unknown format %q; use .png, .svg or .pdf", file, ext)
	}
	var progs, modes []string
	base := map[string]float64{}
	for _, row := range r.Rows {
		if !slices.Contains(progs, row.Program) {
			progs = append(progs, row.Program)
		}
		if !slices.Contains(modes, row.Mode) {
			modes = append(modes, row.Mode)
		}
		if row.Mode == ModeBaseline {
			base[row.Program] = row.Median
		}
	}
	if len(progs) == 0 {
		return fmt.Errorf("write plot %s: no results", file)
	}
	p := plot.New()
	temp := "cold"
	if r.Warm {
		temp = "warm"
	}
	p.Title.Text = fmt.Sprintf("%s launches: median time relative to the baseline (bars: p25–p75)", temp)
	p.Y.Label.Text = "launch time / baseline median"
	p.Add(plotter.NewGrid())
	for i, m := range modes {
		pts := make(plotter.XYs, 0, len(progs))
		var errs plotter.YErrors
		for j, pr := range progs {
			for _, row := range r.Rows {
				if row.Program == pr && row.Mode == m && base[pr] > 0 {
					x := float64(j) + 0.14*(float64(i)-float64(len(modes)-1)/2)
					pts = append(pts, plotter.XY{X: x, Y: row.Median / base[pr]})
					errs = append(errs, struct{ Low, High float64 }{(row.Median - row.P25) / base[pr], (row.P75 - row.Median) / base[pr]})
				}
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("write plot %s: %w", file, err)
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		sc.GlyphStyle.Radius = vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(m, sc)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return fmt.Errorf("write plot %s: %w", file, err)
		}
		eb.LineStyle.Color = plotutil.Color(i)
		p.Add(eb)
	}
	p.Legend.Top = true
	p.X.Min, p.X.Max = -0.6, float64(len(progs))-0.4
	p.NominalX(progs...)
	if err := p.Save(vg.Length(max(7, len(progs)+2))*vg.Inch, 4.5*vg.Inch, file); err != nil {
		return fmt.Errorf("write plot %s: %w", file, err)
	}
	return nil
}
