package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// Criteria say when a step falls behind.
type Criteria struct {
	// MinAccepted is the fraction of the offered events ingest must accept.
	MinAccepted float64
	// MaxFailed is the fraction of the ingest workload's requests that may fail or be
	// dropped (never sent because every worker was busy).
	MaxFailed float64
	// MaxFreshP99 bounds the freshness p99.
	MaxFreshP99 time.Duration
	// LagGrowth is how much the aggregator's lag may grow over the step, in seconds
	// of offered events; below LagGrowthFloor records growth is noise either way.
	LagGrowth time.Duration
}

// LagGrowthFloor: lag is read from committed offsets, which move once per 100 ms
// window and partition, so a few thousand records either way say nothing.
const LagGrowthFloor = 2000

// Decide judges a step against c: whether it kept up, and if not, every reason why.
// A step whose aggregator lag could not be judged says so among its reasons.
func Decide(s *StepResult, c Criteria) {
	var reasons []string
	offered, accepted := s.OfferedEventsPerSec, s.AcceptedEventsPerSec
	if offered > 0 && accepted < c.MinAccepted*offered {
		reasons = append(reasons, fmt.Sprintf("accepted %.0f of %.0f events/s offered (%.1f%%, want ≥ %.0f%%)",
			accepted, offered, 100*accepted/offered, 100*c.MinAccepted))
	}
	if s.Requests == 0 {
		reasons = append(reasons, "no ingest request was due in the measured window")
	} else if f := float64(s.FailedRequests) / float64(s.Requests); f > c.MaxFailed {
		reasons = append(reasons, fmt.Sprintf("%d of %d ingest requests failed or were dropped (%.2f%%, want ≤ %.2g%%)",
			s.FailedRequests, s.Requests, 100*f, 100*c.MaxFailed))
	}
	if lag := s.AggregatorLag; lag.Known {
		allowed := math.Max(LagGrowthFloor, offered*c.LagGrowth.Seconds())
		if g := lag.End - lag.Start; float64(g) > allowed {
			reasons = append(reasons, fmt.Sprintf("aggregator lag grew by %d records over the step (%d → %d; allowed %.0f)",
				g, lag.Start, lag.End, allowed))
		}
	}
	f := s.Freshness
	switch p99 := time.Duration(f.Ms.P99 * float64(time.Millisecond)); {
	case f.Probes > 0 && f.Seen == 0:
		reasons = append(reasons, fmt.Sprintf("no freshness probe saw its write (%d probes)", f.Probes))
	case f.Probes > 0 && float64(f.Timeouts) > c.MaxFailed*float64(f.Probes):
		reasons = append(reasons, fmt.Sprintf("%d of %d freshness probes timed out", f.Timeouts, f.Probes))
	case f.Seen > 0 && p99 > c.MaxFreshP99:
		reasons = append(reasons, fmt.Sprintf("freshness p99 %s > %s", p99.Round(time.Millisecond), c.MaxFreshP99))
	}
	s.KeptUp = len(reasons) == 0
	if !s.AggregatorLag.Known {
		reasons = append(reasons, "(aggregator lag not judged: too few lag samples)")
	}
	s.Reasons = reasons
}

// MaxKeptUp is the offered rate of the last step that kept up before the first that
// fell behind (steps run in increasing order and stop after the first that fell
// behind); 0 when the first already fell behind.
func MaxKeptUp(steps []StepResult) (offered, accepted float64) {
	for _, s := range steps {
		if !s.KeptUp {
			break
		}
		offered, accepted = s.OfferedEventsPerSec, s.AcceptedEventsPerSec
	}
	return offered, accepted
}

// closestStep is the index of the step whose offered rate is nearest to rate (by
// ratio, so 40k is as near to 50k as 62.5k), -1 for none.
func closestStep(steps []StepResult, rate float64) int {
	best, bestD := -1, math.Inf(1)
	for i, s := range steps {
		if s.OfferedEventsPerSec <= 0 {
			continue
		}
		d := math.Abs(math.Log(s.OfferedEventsPerSec / rate))
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// QuantilesOf summarises durations exactly (nearest rank), in milliseconds.
func QuantilesOf(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return loadreport.QuantilesOf(uint64(len(s)), sum/time.Duration(len(s)), func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	})
}
