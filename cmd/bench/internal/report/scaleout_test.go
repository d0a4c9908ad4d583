package report

import (
	"strings"
	"testing"
)

func TestScaleOutMarkdown(t *testing.T) {
	var m markdown
	m.scaleOut(&ScaleOutResult{Events: 2_000_000, Users: 200_000, Topologies: []ScaleOutTopology{{
		Topology: "cluster", Partitions: 16, Replication: 3, RedisNodes: 6,
		Runs: []ScaleOutRun{
			{Aggregators: 1, EventsPerSec: 50_000, FirstWriteSeconds: 2, Seconds: 40, AggregatorCores: 0.7, MachineBusyCores: 1.9},
			{Aggregators: 2, EventsPerSec: 75_000, FirstWriteSeconds: 3, Seconds: 26.7, AggregatorCores: 0.9, MachineBusyCores: 2},
		},
		Speedup: 1.5,
	}}})
	got := m.String()
	for _, want := range []string{
		"2,000,000 events of 200,000 users",
		"| cluster | 16 × 3 | 6 | 1 | 50,000 | 2.0 s | 40.0 s | 0.70 | 1.90 |  |",
		"| cluster | 16 × 3 | 6 | 2 | 75,000 | 3.0 s | 26.7 s | 0.90 | 2.00 | 1.50× (means) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}
