package steps

import (
	"math"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
)

func TestInternals(t *testing.T) {
	page := func(fast, slow float64) probe.Metrics {
		m, err := probe.ParseMetrics(strings.NewReader(
			"# TYPE pulse_aggregator_flush_seconds histogram\n" +
				"pulse_aggregator_flush_seconds_bucket{le=\"0.01\"} " + ff(fast) + "\n" +
				"pulse_aggregator_flush_seconds_bucket{le=\"0.1\"} " + ff(fast+slow) + "\n" +
				"pulse_aggregator_flush_seconds_bucket{le=\"+Inf\"} " + ff(fast+slow) + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := snapshot{metrics: map[string]probe.Metrics{"aggregator": page(100, 0)}}
	after := snapshot{metrics: map[string]probe.Metrics{"aggregator": page(200, 100)}}
	got := internals(before, after)
	// Over the step: 100 flushes ≤ 10 ms, 100 in (10 ms, 100 ms].
	if len(got) != 2 || math.Abs(got["aggregatorFlushSecondsP50"]-0.01) > 1e-12 || math.Abs(got["aggregatorFlushSecondsP99"]-0.0982) > 1e-12 {
		t.Fatalf("internals = %v", got)
	}
}
