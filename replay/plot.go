package replay

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlot draws the per-access latency CDF of each run spec (all rounds
// pooled) into file; the extension (.png, .svg, .pdf) picks the format.
func (rep *Report) WritePlot(file string) error {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	switch ext {
	case "png", "svg", "pdf", "jpg", "jpeg":
	default:
		return fmt.Errorf("write plot %s: unknown format %q; use .png, .svg or .pdf", file, ext)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("replay latency CDF (%s backend, %s timing)", rep.Backend, rep.Timing)
	p.X.Label.Text = "per-access latency (µs, log scale)"
	p.Y.Label.Text = "fraction of accesses"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	seen := map[string]bool{}
	i := 0
	for _, r := range rep.Runs {
		if seen[r.Policy] {
			continue
		}
		seen[r.Policy] = true
		var lat []int64
		for _, r2 := range rep.Runs {
			if r2.Policy == r.Policy && !r2.CountsOnly {
				lat = append(lat, r2.lat...)
			}
		}
		if len(lat) == 0 {
			continue
		}
		slices.Sort(lat)
		pts := cdfPoints(lat, 2000)
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("write plot %s: %w", file, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		line.Dashes = plotutil.Dashes(i)
		p.Add(line)
		p.Legend.Add(r.Policy, line)
		i++
	}
	if i == 0 {
		return fmt.Errorf("write plot %s: no runs to draw", file)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, file); err != nil {
		return fmt.Errorf("write plot %s: %w", file, err)
	}
	return nil
}

// cdfPoints samples the empirical CDF of sorted latencies (ns) at most n
// points, in µs; latencies are clamped at 0.01 µs for the log axis.
func cdfPoints(lat []int64, n int) plotter.XYs {
	step := max(1, len(lat)/n)
	var pts plotter.XYs
	for i := 0; i < len(lat); i += step {
		pts = append(pts, plotter.XY{X: math.Max(float64(lat[i])/1e3, 0.01), Y: float64(i+1) / float64(len(lat))})
	}
	last := len(lat) - 1
	pts = append(pts, plotter.XY{X: math.Max(float64(lat[last])/1e3, 0.01), Y: 1})
	return pts
}
