package scaleout

import (
	"testing"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

func TestScaleOutSpeedupIsTheRatioOfMeans(t *testing.T) {
	runs := []report.ScaleOutRun{
		{Aggregators: 1, EventsPerSec: 100}, {Aggregators: 2, EventsPerSec: 150},
		{Aggregators: 1, EventsPerSec: 300}, {Aggregators: 2, EventsPerSec: 250},
	}
	// Means 200 and 200.
	if got := scaleOutSpeedup(runs); got != 1 {
		t.Errorf("speedup %v, want 1", got)
	}
	if got := scaleOutSpeedup(runs[:1]); got != 0 {
		t.Errorf("speedup without a two-member run: %v, want 0", got)
	}
	if got := scaleOutSpeedup(runs[:2]); got != 1.5 {
		t.Errorf("speedup of one round: %v, want 1.5", got)
	}
}
