package plot

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

func TestPlot(t *testing.T) {
	dir := t.TempDir()
	step := func(rate, p99 float64, kept bool) report.StepResult {
		return report.StepResult{OfferedEventsPerSec: rate, KeptUp: kept, IngestMs: report.Quantiles{Count: 100, P50: p99 / 4, P99: p99},
			Freshness: report.Freshness{Ms: report.Quantiles{Count: 100, P99: 2 * p99}}}
	}
	batched := &report.ModeResult{Steps: []report.StepResult{step(5000, 9, true), step(20000, 12, true), step(40000, 900, false)}}
	single := &report.ModeResult{Steps: []report.StepResult{step(1000, 5, true), step(5000, 70, false)}}
	for name, modes := range map[string][2]*report.ModeResult{"both": {batched, single}, "none": {nil, nil}} {
		path := filepath.Join(dir, name+".png")
		if err := Write(path, modes[0], modes[1]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 400 {
			t.Fatalf("%s: image is %v, want at least 1000×400", name, b)
		}
	}
}

func TestShortRate(t *testing.T) {
	for _, tt := range []struct{ got, want string }{{shortRate(5000), "5k"}, {shortRate(125000), "125k"}, {shortRate(2.5e6), "2.5M"}} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestOneTwoFiveTicks(t *testing.T) {
	var vals []float64
	for _, tk := range (oneTwoFive{}).Ticks(0.3, 250) {
		vals = append(vals, tk.Value)
	}
	want := []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200}
	if len(vals) != len(want) {
		t.Fatalf("ticks %v, want %v", vals, want)
	}
	for i := range want {
		if math.Abs(vals[i]-want[i]) > 1e-12 {
			t.Fatalf("ticks %v, want %v", vals, want)
		}
	}
}
