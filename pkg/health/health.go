// Package health runs a service's readiness checks: one per dependency, concurrently,
// each under its own deadline, so one hung server cannot stall the report.
package health

import (
	"context"
	"sync"
	"time"
)

// Check is one dependency probe. Func must honour ctx's deadline.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

// Result is the outcome of one Check.
type Result struct {
	Name     string        `json:"name"`
	OK       bool          `json:"ok"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"-"`
	Millis   float64       `json:"duration_ms"`
}

// Report holds every check's result in the order the checks were given.
type Report struct {
	Ready  bool     `json:"ready"`
	Checks []Result `json:"checks"`
}

// Run runs every check at once, each bounded by timeout, and reports all results.
func Run(ctx context.Context, timeout time.Duration, checks []Check) Report {
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			err := c.Func(cctx)
			d := time.Since(start)
			r := Result{Name: c.Name, OK: err == nil, Duration: d, Millis: float64(d.Microseconds()) / 1000}
			if err != nil {
				r.Error = err.Error()
			}
			results[i] = r
		}()
	}
	wg.Wait()
	rep := Report{Ready: true, Checks: results}
	for _, r := range results {
		rep.Ready = rep.Ready && r.OK
	}
	return rep
}
