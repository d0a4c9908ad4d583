package main

import (
	"context"
	"sync"
	"time"
)

// schedule is an open-loop timeline: the i-th request of a workload is due at
// start + i/rate, whatever happened to the ones before it. Computing each due time
// from i, instead of adding a period to the previous one, keeps rounding from
// drifting the rate over a long run.
type schedule struct {
	start time.Time
	rate  float64 // requests per second, > 0
}

// at returns the intended start of request i.
func (s schedule) at(i uint64) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// pacer fires requests on a schedule. Each request runs in its own goroutine, at most
// workers at a time; a request due while all workers are busy is not queued but
// dropped (reported as such), so a slow server shows up as latency and drops instead
// of silently lowering the offered rate.
type pacer struct {
	sched   schedule
	workers int
	// fire performs request seq, intended to start at intended, under ctx. It measures
	// its own latency from intended, so time spent waiting anywhere — for a connection,
	// for a CPU, for a late wake-up of this loop — counts against the server.
	fire func(ctx context.Context, seq uint64, intended time.Time)
	// drop is told about a request that was due but found no free worker.
	drop func(seq uint64, intended time.Time)

	wg sync.WaitGroup
}

// run schedules requests due before end until then or until stop is done, and
// returns without waiting for the requests it started: wait does that. Requests run
// under reqCtx, which outlives stop so in-flight work can finish after a Ctrl-C.
func (p *pacer) run(stop, reqCtx context.Context, end time.Time) {
	sem := make(chan struct{}, p.workers)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := uint64(0); ; i++ {
		due := p.sched.at(i)
		if !due.Before(end) {
			return
		}
		// A loop that wakes late fires the overdue requests at once, each still
		// carrying its own intended start.
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-stop.Done():
				return
			case <-timer.C:
			}
		} else if stop.Err() != nil {
			return
		}
		select {
		case sem <- struct{}{}:
			p.wg.Go(func() {
				defer func() { <-sem }()
				p.fire(reqCtx, i, due)
			})
		default:
			p.drop(i, due)
		}
	}
}

// wait blocks until every started request has returned or ctx is done, and reports
// whether they all returned.
func (p *pacer) wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
