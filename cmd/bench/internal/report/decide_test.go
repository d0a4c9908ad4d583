package report

import (
	"strings"
	"testing"
	"time"
)

var testCriteria = Criteria{MinAccepted: 0.95, MaxFailed: 0.01, MaxFreshP99: time.Second, LagGrowth: time.Second}

// healthy is a step at 10k events/s that kept up on every count.
func healthy() StepResult {
	return StepResult{
		OfferedEventsPerSec: 10000, AcceptedEventsPerSec: 9990, Requests: 1000, FailedRequests: 0,
		AggregatorLag: LagSummary{Known: true, Start: 500, End: 700},
		Freshness:     Freshness{Probes: 400, Seen: 400, Ms: Quantiles{P99: 80}},
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		change func(*StepResult)
		keptUp bool
		reason string // a substring of the one reason expected
	}{
		{"healthy", func(*StepResult) {}, true, ""},
		{"accepted exactly 95%", func(o *StepResult) { o.AcceptedEventsPerSec = 9500 }, true, ""},
		{"accepted below 95%", func(o *StepResult) { o.AcceptedEventsPerSec = 9499 }, false, "accepted 9499 of 10000"},
		{"1% failed is allowed", func(o *StepResult) { o.FailedRequests = 10 }, true, ""},
		{"over 1% failed", func(o *StepResult) { o.FailedRequests = 11 }, false, "11 of 1000 ingest requests"},
		{"nothing scheduled", func(o *StepResult) { o.Requests = 0 }, false, "no ingest request"},
		{"lag grew by one second of events", func(o *StepResult) { o.AggregatorLag.End = o.AggregatorLag.Start + 10000 }, true, ""},
		{"lag grew by more", func(o *StepResult) { o.AggregatorLag.End = o.AggregatorLag.Start + 10001 }, false, "aggregator lag grew by 10001"},
		{"lag fell", func(o *StepResult) { o.AggregatorLag.Start, o.AggregatorLag.End = 50000, 100 }, true, ""},
		{"lag unknown is not judged", func(o *StepResult) { o.AggregatorLag.Known, o.AggregatorLag.End = false, 1e9 }, true, ""},
		{"freshness p99 at the limit", func(o *StepResult) { o.Freshness.Ms.P99 = 1000 }, true, ""},
		{"freshness p99 over", func(o *StepResult) { o.Freshness.Ms.P99 = 1200 }, false, "freshness p99 1.2s"},
		{"no probe seen", func(o *StepResult) { o.Freshness.Seen, o.Freshness.Ms.P99 = 0, 0 }, false, "no freshness probe"},
		{"probes timed out", func(o *StepResult) { o.Freshness.Timeouts = 5 }, false, "5 of 400 freshness probes timed out"},
		{"no probes at all", func(o *StepResult) { o.Freshness.Probes, o.Freshness.Seen, o.Freshness.Ms.P99 = 0, 0, 0 }, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := healthy()
			tt.change(&o)
			Decide(&o, testCriteria)
			v := o
			if v.KeptUp != tt.keptUp {
				t.Fatalf("KeptUp = %v, want %v (reasons %q)", v.KeptUp, tt.keptUp, v.Reasons)
			}
			if tt.keptUp {
				// An unjudged lag is noted in parentheses, without falling behind.
				if len(v.Reasons) != 0 && !strings.HasPrefix(v.Reasons[0], "(") {
					t.Fatalf("kept up with reasons %q", v.Reasons)
				}
				return
			}
			if len(v.Reasons) != 1 || !strings.Contains(v.Reasons[0], tt.reason) {
				t.Fatalf("reasons = %q, want one containing %q", v.Reasons, tt.reason)
			}
		})
	}
}

// At low rates the lag floor, not a second of events, bounds the growth.
func TestDecideLagFloor(t *testing.T) {
	o := healthy()
	o.OfferedEventsPerSec, o.AcceptedEventsPerSec = 500, 500
	o.AggregatorLag.Start, o.AggregatorLag.End = 0, LagGrowthFloor
	if Decide(&o, testCriteria); !o.KeptUp {
		t.Fatalf("growth of %d records at 500 events/s fell behind: %q", LagGrowthFloor, o.Reasons)
	}
	o.AggregatorLag.End = LagGrowthFloor + 1
	if Decide(&o, testCriteria); o.KeptUp {
		t.Fatalf("growth of %d records at 500 events/s kept up", LagGrowthFloor+1)
	}
}

func TestDecideAllReasons(t *testing.T) {
	o := StepResult{OfferedEventsPerSec: 100000, AcceptedEventsPerSec: 50000, Requests: 100, FailedRequests: 50,
		AggregatorLag: LagSummary{Known: true, Start: 0, End: 1_000_000}, Freshness: Freshness{Probes: 10, Seen: 10, Ms: Quantiles{P99: 5000}}}
	Decide(&o, testCriteria)
	if o.KeptUp || len(o.Reasons) != 4 {
		t.Fatalf("got %v, %q; want four reasons", o.KeptUp, o.Reasons)
	}
}

func TestMaxKeptUp(t *testing.T) {
	step := func(rate float64, kept bool) StepResult {
		return StepResult{OfferedEventsPerSec: rate, AcceptedEventsPerSec: rate * 0.99, KeptUp: kept}
	}
	tests := []struct {
		name          string
		steps         []StepResult
		offered, accd float64
	}{
		{"none", nil, 0, 0},
		{"first fell behind", []StepResult{step(5000, false)}, 0, 0},
		{"third fell behind", []StepResult{step(5000, true), step(10000, true), step(20000, false)}, 10000, 9900},
		{"all kept up", []StepResult{step(5000, true), step(10000, true)}, 10000, 9900},
		// Stepping stops at the first that fell behind; a later one never counts.
		{"later ignored", []StepResult{step(5000, true), step(10000, false), step(20000, true)}, 5000, 4950},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, a := MaxKeptUp(tt.steps)
			if o != tt.offered || a != tt.accd {
				t.Fatalf("MaxKeptUp = %v, %v; want %v, %v", o, a, tt.offered, tt.accd)
			}
		})
	}
}

func TestClosestStep(t *testing.T) {
	steps := []StepResult{{OfferedEventsPerSec: 5000}, {OfferedEventsPerSec: 20000}, {OfferedEventsPerSec: 40000}, {OfferedEventsPerSec: 80000}}
	for _, tt := range []struct {
		rate float64
		want int
	}{{50000, 2}, {60000, 3}, {1000, 0}, {1e6, 3}, {20000, 1}} {
		if got := closestStep(steps, tt.rate); got != tt.want {
			t.Errorf("closestStep(%v) = %d, want %d", tt.rate, got, tt.want)
		}
	}
	if got := closestStep(nil, 50000); got != -1 {
		t.Errorf("closestStep(nil) = %d, want -1", got)
	}
}
