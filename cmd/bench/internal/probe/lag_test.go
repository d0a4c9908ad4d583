package probe

import (
	"testing"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int, lag int64) LagSample {
		return LagSample{At: t0.Add(time.Duration(s) * time.Second), Aggregator: lag}
	}
	samples := []LagSample{at(0, 9000), at(2, 100), at(4, 300), at(6, 250), at(8, 5000)}
	pick := func(s LagSample) int64 { return s.Aggregator }
	got := Summarize(samples, t0.Add(2*time.Second), t0.Add(6*time.Second), pick)
	want := report.LagSummary{Known: true, Start: 100, End: 250, Max: 300}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	if got := Summarize(samples, t0.Add(7*time.Second), t0.Add(9*time.Second), pick); got.Known {
		t.Fatalf("one sample in the window gave %+v, want unknown", got)
	}
}
