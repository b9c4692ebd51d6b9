package eval

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure is one plot of a suite: lines against a numeric x, or grouped
// bars over categories. Lo and Hi, when set, are the spread (min and max
// over the rounds) drawn as error bars.
type Figure struct {
	Name   string // file name without extension, e.g. "readahead-coverage"
	Title  string
	XLabel string
	YLabel string
	LogX   bool
	// Categories makes a bar chart: Series[i].Y[j] is series i's bar in
	// category j.
	Categories []string
	Series     []Series
	// Diagonal draws y = x (delivered against offered).
	Diagonal bool
	// LegendBottom puts the legend at the bottom right (default top
	// right).
	LegendBottom bool
	// RefY draws a horizontal reference line (e.g. 1 for "normalized to
	// baseline"); NaN or 0 draws none.
	RefY float64
}

// Series is one line or one bar group member.
type Series struct {
	Name   string
	X      []float64 // lines only
	Y      []float64
	Lo, Hi []float64 // optional spread, same length as Y
}

func (f *Figure) empty() bool {
	for _, s := range f.Series {
		for _, y := range s.Y {
			if !math.IsNaN(y) {
				return false
			}
		}
	}
	return true
}

// render draws f as a plot.
func (f *Figure) render() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = !f.LegendBottom
	if f.Categories != nil {
		if err := f.bars(p); err != nil {
			return nil, err
		}
	} else if err := f.lines(p); err != nil {
		return nil, err
	}
	if f.Diagonal {
		d := plotter.NewFunction(func(x float64) float64 { return x })
		d.Color = color.Gray{Y: 90}
		d.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(d)
		p.Legend.Add("offered", d)
	}
	if f.RefY != 0 && !math.IsNaN(f.RefY) {
		ref := plotter.NewFunction(func(float64) float64 { return f.RefY })
		ref.Color = color.Gray{Y: 90}
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ref)
	}
	return p, nil
}

func (f *Figure) lines(p *plot.Plot) error {
	if f.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for i, s := range f.Series {
		var pts plotter.XYs
		var errs plotter.YErrors
		for j := range s.Y {
			if j >= len(s.X) || math.IsNaN(s.Y[j]) || (f.LogX && s.X[j] <= 0) {
				continue
			}
			pts = append(pts, plotter.XY{X: s.X[j], Y: s.Y[j]})
			errs = append(errs, spread(s, j))
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", f.Name, err)
		}
		line.Color, line.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		points.Color, points.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		if s.Lo != nil {
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYer
				plotter.YErrorer
			}{pts, errs})
			if err == nil {
				eb.Color = plotutil.Color(i)
				p.Add(eb)
			}
		}
	}
	return nil
}

func spread(s Series, j int) struct{ Low, High float64 } {
	if s.Lo == nil || j >= len(s.Lo) || j >= len(s.Hi) || math.IsNaN(s.Lo[j]) {
		return struct{ Low, High float64 }{}
	}
	return struct{ Low, High float64 }{s.Y[j] - s.Lo[j], s.Hi[j] - s.Y[j]}
}

// Bar chart geometry: a bar is at most maxBar wide and at least minBar;
// a category's group fills at most groupFill of its share of the axis;
// the axis gets what the figure's width leaves after plotMargin.
const (
	maxBar     = 10 * vg.Millimeter // about 28 pt
	minBar     = vg.Length(6)
	groupFill  = 0.8
	plotMargin = 3 * vg.Centimeter
)

// width is the figure's width: 16 cm, or more for a bar chart of many
// categories, so that each bar is at least minBar wide.
func (f *Figure) width() vg.Length {
	w := 16 * vg.Centimeter
	if f.Categories == nil {
		return w
	}
	need := vg.Length(len(f.Categories)*max(len(f.Series), 1))*minBar/groupFill + plotMargin
	return max(w, need)
}

// rotated reports whether a bar chart's category labels are drawn
// slanted: they are too long to stand side by side.
func (f *Figure) rotated() bool {
	total := 0
	for _, c := range f.Categories {
		total += len(c)
	}
	return f.Categories != nil && total*6 > int((f.width()-plotMargin)/vg.Points(1))
}

// share is each category's part of a bar chart's x axis.
func (f *Figure) share() vg.Length {
	return (f.width() - plotMargin) / vg.Length(max(len(f.Categories), 1))
}

// barWidth is the width of one bar: its group fills groupFill of its
// share, within minBar and maxBar.
func (f *Figure) barWidth() vg.Length {
	return min(maxBar, max(minBar, f.share()*groupFill/vg.Length(max(len(f.Series), 1))))
}

func (f *Figure) bars(p *plot.Plot) error {
	n := max(len(f.Series), 1)
	w := f.barWidth()
	for i, s := range f.Series {
		vals := make(plotter.Values, len(f.Categories))
		for j := range vals {
			if j < len(s.Y) && !math.IsNaN(s.Y[j]) {
				vals[j] = s.Y[j]
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("plot %s: %w", f.Name, err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
		if s.Lo != nil {
			p.Add(&barSpread{s: s, off: b.Offset, color: color.Gray{Y: 40}})
		}
	}
	p.NominalX(f.Categories...)
	if f.rotated() {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.X.Min, p.X.Max = -0.6, float64(len(f.Categories))-0.4
	p.Y.Min = math.Min(0, p.Y.Min)
	return nil
}

// barSpread draws a bar's min-max spread as a capped vertical line at
// the bar's canvas offset from its category.
type barSpread struct {
	s     Series
	off   vg.Length
	color color.Color
}

func (b *barSpread) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	sty := draw.LineStyle{Color: b.color, Width: vg.Points(1)}
	cap := vg.Points(3)
	for j := range b.s.Y {
		if j >= len(b.s.Lo) || j >= len(b.s.Hi) || math.IsNaN(b.s.Lo[j]) || math.IsNaN(b.s.Y[j]) {
			continue
		}
		x := trX(float64(j)) + b.off
		lo, hi := trY(b.s.Lo[j]), trY(b.s.Hi[j])
		c.StrokeLine2(sty, x, lo, x, hi)
		c.StrokeLine2(sty, x-cap, lo, x+cap, lo)
		c.StrokeLine2(sty, x-cap, hi, x+cap, hi)
	}
}

// writeFigure renders f into dir as NAME.png and NAME.svg and returns
// the SVG's bytes (the HTML report inlines them).
func writeFigure(dir string, f *Figure) ([]byte, error) {
	p, err := f.render()
	if err != nil {
		return nil, err
	}
	width, height := f.width(), 10*vg.Centimeter
	if f.rotated() {
		height += 2 * vg.Centimeter
	}
	var svg []byte
	for _, ext := range []string{".svg", ".png"} {
		var c vg.CanvasWriterTo
		if ext == ".svg" {
			c = vgsvg.New(width, height)
		} else {
			c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(120))}
		}
		p.Draw(draw.New(c))
		var buf bytes.Buffer
		if _, err := c.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("draw %s: %w", f.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name+ext), buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("write plot: %w", err)
		}
		if ext == ".svg" {
			svg = buf.Bytes()
		}
	}
	return svg, nil
}

// DataRange makes the axes include the spread.
func (b *barSpread) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = 0, float64(max(len(b.s.Y)-1, 0))
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for j := range b.s.Y {
		if j < len(b.s.Lo) && j < len(b.s.Hi) && !math.IsNaN(b.s.Lo[j]) {
			ymin, ymax = math.Min(ymin, b.s.Lo[j]), math.Max(ymax, b.s.Hi[j])
		}
	}
	if math.IsInf(ymin, 1) {
		ymin, ymax = 0, 0
	}
	return
}
