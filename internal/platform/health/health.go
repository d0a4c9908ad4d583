// Package health runs a service's readiness checks: one per dependency, concurrently,
// each under its own deadline, so one hung server cannot stall the report.
package health

import (
	"context"
	"log/slog"
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

// Prober answers readiness from a cached probe: the checks run at most once per
// interval however many callers ask, so /readyz cannot multiply the load a prober or
// an attacker puts on the dependencies (docs/design.md, Security). The report it
// returns names a failed check only as "<name> unavailable"; the reason, which may
// hold addresses or a server's own words, goes to the log.
type Prober struct {
	checks   []Check
	timeout  time.Duration
	interval time.Duration
	logger   *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	last    Report
	at      time.Time     // when last was probed; zero before the first probe
	running chan struct{} // closed when the probe in flight ends; nil when none is
}

// NewProber probes checks, each under timeout, at most once per interval.
func NewProber(checks []Check, timeout, interval time.Duration, logger *slog.Logger) *Prober {
	return &Prober{checks: checks, timeout: timeout, interval: interval, logger: logger, now: time.Now}
}

// Unavailable is what the network learns of a failed check.
func Unavailable(name string) string { return name + " unavailable" }

// Report returns the last probe's report when it is younger than the interval, else
// probes (or waits for the probe another caller started). A caller whose ctx ends
// while it waits gets the previous report. The probe does not depend on any
// caller's ctx, so a client that goes away does not fail it for the others.
func (p *Prober) Report(ctx context.Context) Report {
	p.mu.Lock()
	if !p.at.IsZero() && p.now().Sub(p.at) < p.interval {
		rep := p.last
		p.mu.Unlock()
		return rep
	}
	running := p.running
	if running == nil {
		running = make(chan struct{})
		p.running = running
		go p.probe(running)
	}
	p.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at.IsZero() {
		return Report{Ready: false, Checks: []Result{}}
	}
	return p.last
}

func (p *Prober) probe(done chan struct{}) {
	rep := Run(context.Background(), p.timeout, p.checks)
	for i, r := range rep.Checks {
		if !r.OK {
			p.logger.Warn("readiness check failed", "check", r.Name, "err", r.Error, "duration", r.Duration)
			rep.Checks[i].Error = Unavailable(r.Name)
		}
	}
	p.mu.Lock()
	p.last, p.at, p.running = rep, p.now(), nil
	p.mu.Unlock()
	close(done)
}
