package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/predictio/predictio/policies"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ParseSweep parses a sweep spec "cache=64MiB,256MiB,1GiB" into cache
// sizes. Only the cache dimension is supported.
func ParseSweep(spec string) ([]int64, error) {
	key, vals, ok := strings.Cut(spec, "=")
	if !ok || strings.TrimSpace(key) != "cache" {
		return nil, fmt.Errorf("parse sweep %q: want cache=SIZE,SIZE,..., e.g. cache=64MiB,256MiB,1GiB", spec)
	}
	var sizes []int64
	for _, v := range strings.Split(vals, ",") {
		n, err := ParseSize(v)
		if err != nil {
			return nil, fmt.Errorf("parse sweep %q: %w", spec, err)
		}
		if n <= 0 {
			return nil, fmt.Errorf("parse sweep %q: cache size %q must be positive", spec, v)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// Sweep runs cfg once per cache size, in parallel goroutines (at most
// GOMAXPROCS at a time), each over its own source from open, and returns
// the reports in order of increasing cache size. cfg.Env must be safe for
// concurrent use; newEnv, when set, builds a fresh Env per run instead.
func Sweep(cfg Config, sizes []int64, open func() (Source, error), newEnv func() (policies.Env, error)) ([]*Report, error) {
	sizes = append([]int64(nil), sizes...)
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	reports := make([]*Report, len(sizes))
	errs := make([]error, len(sizes))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, size := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c := cfg
			c.CacheBytes = size
			if newEnv != nil {
				env, err := newEnv()
				if err != nil {
					errs[i] = err
					return
				}
				c.Env = env
			}
			src, err := open()
			if err != nil {
				errs[i] = err
				return
			}
			defer src.Close()
			reports[i], errs[i] = Run(c, src)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("cache %s: %w", FormatSize(size), errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reports, nil
}

// Plot draws coverage and speedup against cache size, one line per policy,
// into file; the format follows the extension, .svg or .png.
func Plot(file string, reports []*Report) error {
	var buf bytes.Buffer
	if err := WritePlot(&buf, filepath.Ext(file), reports); err != nil {
		return err
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// WritePlot renders the plot in format ext (".svg" or ".png") to w.
func WritePlot(w io.Writer, ext string, reports []*Report) error {
	ext = strings.ToLower(ext)
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("write plot: unsupported extension %q; use .svg or .png", ext)
	}
	if len(reports) == 0 {
		return errors.New("write plot: no results to plot")
	}
	cov, err := curvePlot(reports, "Coverage of baseline misses", "coverage", func(s *Stats) float64 { return s.Coverage })
	if err != nil {
		return err
	}
	spd, err := curvePlot(reports, "Speedup over baseline", "speedup", func(s *Stats) float64 { return s.Speedup })
	if err != nil {
		return err
	}
	width, height := 16*vg.Centimeter, 20*vg.Centimeter
	var c vg.CanvasWriterTo
	switch ext {
	case ".svg":
		c = vgsvg.New(width, height)
	default:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(120))}
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 6}
	plots := [][]*plot.Plot{{cov}, {spd}}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func curvePlot(reports []*Report, title, ylabel string, y func(*Stats) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "cache size (MiB)"
	p.Y.Label.Text = ylabel
	if len(reports) > 1 && reports[0].CacheBytes > 0 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	lo, hi := 0.0, 1.0
	for _, r := range reports {
		for i := range r.Policies {
			v := y(&r.Policies[i])
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	// Headroom above the data for the legend, one line per policy.
	p.Y.Min = lo
	p.Y.Max = hi + (hi-lo)*0.09*float64(len(reports[0].Policies)+1)
	for li := range reports[0].Policies {
		name := reports[0].Policies[li].Name
		pts := make(plotter.XYs, 0, len(reports))
		for _, r := range reports {
			if st := r.Lane(name); st != nil {
				pts = append(pts, plotter.XY{X: float64(r.CacheBytes) / (1 << 20), Y: y(st)})
			}
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", name, err)
		}
		line.Color = plotutil.Color(li)
		line.Dashes = plotutil.Dashes(li)
		points.Color = plotutil.Color(li)
		points.Shape = plotutil.Shape(li)
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	return p, nil
}
