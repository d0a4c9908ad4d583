// Package loadreport is the JSON report of cmd/loadgen, shared with cmd/bench, which
// runs loadgen once per step and reads its reports, and the latency format both print.
package loadreport

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// Version is the layout Report has; a breaking change bumps it.
const Version = 1

// Report is the document -json writes: the numbers of the table, with field names
// that stay stable so bench scripts can step rates and compare runs. Latencies and
// freshness are in milliseconds; rates per second of the measured window.
//
//	version               Version, 1 for this layout
//	startedAt             when the warm-up began (RFC 3339)
//	warmupSeconds         length of the warm-up, excluded from every number below
//	measuredSeconds       length of the measured window (shorter after a Ctrl-C)
//	interrupted           true when a Ctrl-C ended the run early
//	seed                  the -seed, for a reproducible rerun
//	config                every flag's value, by flag name
//	acceptedEvents        events in 2xx answers of all ingest workloads
//	acceptedEventsPerSec  acceptedEvents / measuredSeconds: the headline number
//	workloads[]           one per workload whose rate is not 0:
//	  name, endpoint      e.g. "batch", "POST /v1/events"
//	  targetRate          requests/s asked for
//	  achievedRate        requests/s that got an answer or a transport error (not dropped)
//	  targetEventsPerSec  targetRate × events per request (ingest workloads, else 0)
//	  eventsPerSec        accepted events/s (ingest workloads, else 0)
//	  scheduled           intended starts in the window = ok + errors + aborted
//	  ok                  2xx answers
//	  errors              {"4xx","5xx","transport","dropped"}: dropped = due while every
//	                      worker was busy (or the probe user was), so never sent
//	  aborted             cut off by the shutdown after a Ctrl-C; not an error
//	  statusCodes         non-2xx answers by status code, e.g. {"503": 2}
//	  events              accepted events (ingest workloads)
//	  latencyMs           2xx latency from the intended start:
//	                      {"count","mean","p50","p90","p99","p999","max"}
//	freshness             present when -fresh-rate > 0: from a status write's 2xx to
//	                      the end of the first read showing it
//	  probes              probes whose write got a 2xx (the rest are the "fresh"
//	                      workload's errors)
//	  seen, timeouts, aborted
//	  polls, pollErrors   status reads made while waiting, and how many failed
//	  ms                  {"count","mean","p50","p90","p99","p999","max"} of seen probes
type Report struct {
	Version              int               `json:"version"`
	StartedAt            time.Time         `json:"startedAt"`
	WarmupSeconds        float64           `json:"warmupSeconds"`
	MeasuredSeconds      float64           `json:"measuredSeconds"`
	Interrupted          bool              `json:"interrupted"`
	Seed                 uint64            `json:"seed"`
	Config               map[string]string `json:"config"`
	AcceptedEvents       uint64            `json:"acceptedEvents"`
	AcceptedEventsPerSec float64           `json:"acceptedEventsPerSec"`
	Workloads            []WorkloadReport  `json:"workloads"`
	Freshness            *FreshnessReport  `json:"freshness,omitempty"`
}

// WorkloadReport is one workload's line of the report.
type WorkloadReport struct {
	Name               string            `json:"name"`
	Endpoint           string            `json:"endpoint"`
	TargetRate         float64           `json:"targetRate"`
	AchievedRate       float64           `json:"achievedRate"`
	TargetEventsPerSec float64           `json:"targetEventsPerSec"`
	EventsPerSec       float64           `json:"eventsPerSec"`
	Scheduled          uint64            `json:"scheduled"`
	OK                 uint64            `json:"ok"`
	Errors             ErrorCounts       `json:"errors"`
	Aborted            uint64            `json:"aborted"`
	StatusCodes        map[string]uint64 `json:"statusCodes"`
	Events             uint64            `json:"events"`
	LatencyMs          Quantiles         `json:"latencyMs"`
}

// ErrorCounts are a workload's failed requests by class.
type ErrorCounts struct {
	C4xx      uint64 `json:"4xx"`
	C5xx      uint64 `json:"5xx"`
	Transport uint64 `json:"transport"`
	Dropped   uint64 `json:"dropped"`
}

// Quantiles summarise a histogram, in milliseconds.
type Quantiles struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// FreshnessReport is what the freshness probes measured.
type FreshnessReport struct {
	Probes     uint64    `json:"probes"`
	Seen       uint64    `json:"seen"`
	Timeouts   uint64    `json:"timeouts"`
	Aborted    uint64    `json:"aborted"`
	Polls      uint64    `json:"polls"`
	PollErrors uint64    `json:"pollErrors"`
	Ms         Quantiles `json:"ms"`
}

// Failed is every request of the workload that did not get a 2xx.
func (w WorkloadReport) Failed() uint64 {
	return w.Errors.C4xx + w.Errors.C5xx + w.Errors.Transport + w.Errors.Dropped
}

// WriteJSON writes v to path as indented JSON: loadgen's -json report, bench's
// results.json.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadFile reads the report at path, which must be of this Version.
func ReadFile(path string) (Report, error) {
	var r Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", path, err)
	}
	if r.Version != Version {
		return r, fmt.Errorf("%s: report version %d, want %d", path, r.Version, Version)
	}
	return r, nil
}

// Workload is the named workload's line, if the run had it.
func (r Report) Workload(name string) (WorkloadReport, bool) {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return WorkloadReport{}, false
}

// Ms is d in milliseconds, the unit of every latency in the report.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// QuantilesOf is the summary of n latencies of mean mean whose value at quantile q
// (0 ≤ q ≤ 1, 1 the maximum) at answers; an empty summary when n is 0.
func QuantilesOf(n uint64, mean time.Duration, at func(q float64) time.Duration) Quantiles {
	if n == 0 {
		return Quantiles{}
	}
	return Quantiles{Count: n, Mean: Ms(mean),
		P50: Ms(at(0.5)), P90: Ms(at(0.9)), P99: Ms(at(0.99)), P999: Ms(at(0.999)), Max: Ms(at(1))}
}

// FmtMs prints a latency in milliseconds with about three significant digits; "–"
// when nothing was measured (n = 0).
func FmtMs(v float64, n uint64) string {
	switch {
	case n == 0 || math.IsNaN(v):
		return "–"
	case v < 0.001:
		return fmt.Sprintf("%.0f ns", v*1e6)
	case v < 0.01:
		return fmt.Sprintf("%.1f µs", v*1000)
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}
