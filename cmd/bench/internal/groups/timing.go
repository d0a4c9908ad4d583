package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// call is one timed call: i numbers it, and it answers the time it measured itself
// (an HTTP call times its request and answer, not the decoding after).
type call func(i int) (time.Duration, error)

// sequential times n calls one after the other, after warm untimed ones.
func sequential(ctx context.Context, warm, n int, fn call) (report.Quantiles, error) {
	for i := range warm {
		if _, err := fn(i); err != nil {
			return report.Quantiles{}, err
		}
	}
	d := make([]time.Duration, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return report.Quantiles{}, err
		}
		took, err := fn(warm + i)
		if err != nil {
			return report.Quantiles{}, err
		}
		d = append(d, took)
	}
	return report.QuantilesOf(d), nil
}

// concurrently makes n calls from workers goroutines, each calling as soon as its last
// call returned, and answers the calls' latencies and the calls per second; the first
// error stops every worker.
func concurrently(ctx context.Context, workers, n int, fn call) ([]time.Duration, float64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := range next {
				d, err := fn(i)
				if err != nil {
					cancel(err)
					continue
				}
				took[i] = d
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return took, float64(n) / elapsed.Seconds(), nil
}

// concurrentRead times n reads from readers readers.
func concurrentRead(ctx context.Context, readers, n int, fn call) (report.ConcurrentRead, error) {
	took, perSec, err := concurrently(ctx, readers, n, fn)
	if err != nil {
		return report.ConcurrentRead{}, fmt.Errorf("%d concurrent readers: %w", readers, err)
	}
	return report.ConcurrentRead{Readers: readers, Calls: n, CallsPerSec: perSec, Ms: report.QuantilesOf(took)}, nil
}
