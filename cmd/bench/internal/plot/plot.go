// Package plot draws latency.png: latency against offered rate for each ingest mode.
package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one line of a latency panel.
type series struct {
	name   string
	color  color.RGBA
	dashes []vg.Length
	value  func(report.StepResult) (float64, bool) // ms; false: not measured at this step
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
)

var latencySeries = []series{
	{"ingest p50", blue, nil, func(s report.StepResult) (float64, bool) { return s.IngestMs.P50, s.IngestMs.Count > 0 }},
	{"ingest p99", blue, []vg.Length{vg.Points(5), vg.Points(3)}, func(s report.StepResult) (float64, bool) { return s.IngestMs.P99, s.IngestMs.Count > 0 }},
	{"freshness p99", orange, nil, func(s report.StepResult) (float64, bool) { return s.Freshness.Ms.P99, s.Freshness.Ms.Count > 0 }},
	{"GET /status p99", green, []vg.Length{vg.Points(2), vg.Points(2)}, func(s report.StepResult) (float64, bool) { rd, ok := s.StatusRead(); return rd.Ms.P99, ok }},
}

// Write draws latency against offered rate, one panel per ingest mode, with
// log axes (rates and latencies both span orders of magnitude); steps that fell
// behind are marked with a red triangle on their ingest p99.
func Write(path string, batched, single *report.ModeResult) error {
	panels := []*plot.Plot{
		panel("batched POST /v1/events", batched),
		panel("one event per POST /status", single),
	}
	const w, h = 30 * vg.Centimeter, 13 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	var png bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&png); err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, png.Bytes(), 0o644)
}

func panel(title string, m *report.ModeResult) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "offered events/s"
	p.Y.Label.Text = "latency (ms, log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	var xs []float64
	if m != nil {
		for _, s := range m.Steps {
			xs = append(xs, s.OfferedEventsPerSec)
		}
		for _, sr := range latencySeries {
			var pts plotter.XYs
			for _, s := range m.Steps {
				if v, ok := sr.value(s); ok && v > 0 {
					pts = append(pts, plotter.XY{X: s.OfferedEventsPerSec, Y: v})
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				continue
			}
			line.Color, line.Dashes, line.Width = sr.color, sr.dashes, vg.Points(1.5)
			points.Color, points.Shape = sr.color, draw.CircleGlyph{}
			p.Add(line, points)
			p.Legend.Add(sr.name, line, points)
		}
		var behind plotter.XYs
		for _, s := range m.Steps {
			if !s.KeptUp && s.IngestMs.Count > 0 && s.IngestMs.P99 > 0 {
				behind = append(behind, plotter.XY{X: s.OfferedEventsPerSec, Y: s.IngestMs.P99})
			}
		}
		if len(behind) > 0 {
			if sc, err := plotter.NewScatter(behind); err == nil {
				sc.Color, sc.Shape, sc.Radius = red, draw.PyramidGlyph{}, vg.Points(5)
				p.Add(sc)
				p.Legend.Add("fell behind", sc)
			}
		}
	}
	if len(xs) == 0 {
		p.Title.Text += " (not run)"
		xs = []float64{1000, 10000}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 100
	}
	// The freshness p99 target, for scale.
	lo, hi = math.Min(lo, 150), math.Max(hi, 150)
	target := plotter.NewFunction(func(float64) float64 { return 150 })
	target.Color, target.Dashes, target.Width = grey, []vg.Length{vg.Points(1), vg.Points(3)}, vg.Points(1)
	p.Add(target)
	p.Legend.Add("freshness p99 target (150 ms)", target)

	p.X.Min, p.X.Max = xs[0]/1.3, xs[len(xs)-1]*1.3
	// Headroom above the data for the legend, which sits top left.
	p.Y.Min, p.Y.Max = lo/2, hi*15
	p.X.Tick.Marker = rateTicks(xs)
	p.Y.Tick.Marker = oneTwoFive{}
	return p
}

// rateTicks labels the steps' rates: 5k, 10k, 120k.
func rateTicks(xs []float64) plot.ConstantTicks {
	var ts plot.ConstantTicks
	for _, x := range xs {
		ts = append(ts, plot.Tick{Value: x, Label: shortRate(x)})
	}
	return ts
}

func shortRate(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'g', 3, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// oneTwoFive ticks a log axis at 1, 2, 5 × powers of ten, labelled.
type oneTwoFive struct{}

func (oneTwoFive) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ts
}
