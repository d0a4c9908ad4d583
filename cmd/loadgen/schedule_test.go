package main

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fired remembers what a pacer did, by request number.
type fired struct {
	mu       sync.Mutex
	intended map[uint64]time.Time
	actual   map[uint64]time.Time
	latency  map[uint64]time.Duration
	dropped  []uint64
}

func newFired() *fired {
	return &fired{intended: map[uint64]time.Time{}, actual: map[uint64]time.Time{}, latency: map[uint64]time.Duration{}}
}

func (f *fired) pacer(rate float64, workers int, do func()) *pacer {
	return &pacer{
		sched:   schedule{start: time.Now(), rate: rate},
		workers: workers,
		fire: func(_ context.Context, seq uint64, intended time.Time) {
			f.mu.Lock()
			f.intended[seq], f.actual[seq] = intended, time.Now()
			f.mu.Unlock()
			do()
			f.mu.Lock()
			f.latency[seq] = time.Since(intended)
			f.mu.Unlock()
		},
		drop: func(seq uint64, _ time.Time) {
			f.mu.Lock()
			f.dropped = append(f.dropped, seq)
			f.mu.Unlock()
		},
	}
}

func TestPacerStartsOnTheTimeline(t *testing.T) {
	for _, tt := range []struct {
		rate float64
		span time.Duration
		want int
	}{
		{rate: 200, span: time.Second, want: 200},
		{rate: 3, span: time.Second, want: 3},       // due at 0, 333333333 ns, 666666666 ns
		{rate: 0.5, span: 5 * time.Second, want: 3}, // due at 0, 2 s, 4 s
		{rate: 1000, span: 10 * time.Millisecond, want: 10},
	} {
		synctest.Test(t, func(t *testing.T) {
			f := newFired()
			p := f.pacer(tt.rate, 10000, func() {})
			start := p.sched.start
			p.run(t.Context(), t.Context(), start.Add(tt.span))
			p.wait(t.Context())

			if len(f.intended) != tt.want || len(f.dropped) != 0 {
				t.Fatalf("rate %v over %v: %d started, %d dropped; want %d started, none dropped",
					tt.rate, tt.span, len(f.intended), len(f.dropped), tt.want)
			}
			for i := range uint64(tt.want) {
				want := start.Add(time.Duration(float64(i) * float64(time.Second) / tt.rate))
				if !f.intended[i].Equal(want) || !f.actual[i].Equal(want) {
					t.Fatalf("request %d intended at +%v, started at +%v; want both at +%v",
						i, f.intended[i].Sub(start), f.actual[i].Sub(start), want.Sub(start))
				}
			}
		})
	}
}

// A server that takes 30 ms per request behind a single connection, driven at one
// request per 10 ms: each request waits for the ones before it. A closed-loop tool
// timing from the actual send would see 30 ms every time; timing from the intended
// start shows the queue growing by 20 ms a request.
func TestPacerLatencyFromIntendedStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := make(chan chan struct{}, 100)
		go func() {
			for done := range conn {
				time.Sleep(30 * time.Millisecond)
				close(done)
			}
		}()
		defer close(conn)

		f := newFired()
		p := f.pacer(100, 1000, func() {
			done := make(chan struct{})
			conn <- done
			<-done
		})
		p.run(t.Context(), t.Context(), p.sched.start.Add(100*time.Millisecond))
		p.wait(t.Context())

		if len(f.latency) != 10 {
			t.Fatalf("%d requests finished, want 10", len(f.latency))
		}
		for i := range uint64(10) {
			want := time.Duration(20*i+30) * time.Millisecond
			if f.latency[i] != want {
				t.Errorf("request %d: latency %v, want %v", i, f.latency[i], want)
			}
		}
	})
}

func TestPacerDropsWhenEveryWorkerIsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFired()
		p := f.pacer(10, 2, func() { time.Sleep(time.Second) })
		start := p.sched.start
		p.run(t.Context(), t.Context(), start.Add(time.Second))
		if got := time.Since(start); got != 900*time.Millisecond {
			t.Errorf("run returned at +%v, want +900ms (the last due start)", got)
		}
		p.wait(t.Context())
		if got := time.Since(start); got != 1100*time.Millisecond {
			t.Errorf("wait returned at +%v, want +1.1s (the second request's end)", got)
		}

		started := slices.Sorted(maps.Keys(f.intended))
		slices.Sort(f.dropped)
		if !slices.Equal(started, []uint64{0, 1}) || !slices.Equal(f.dropped, []uint64{2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("started %v, dropped %v; want [0 1] and [2 … 9]", started, f.dropped)
		}
	})
}

func TestPacerStopsSchedulingButLetsRequestsFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop, cancel := context.WithCancel(t.Context())
		f := newFired()
		p := f.pacer(100, 1000, func() { time.Sleep(50 * time.Millisecond) })
		start := p.sched.start
		time.AfterFunc(255*time.Millisecond, cancel)
		p.run(stop, t.Context(), start.Add(time.Hour))
		if got := time.Since(start); got != 255*time.Millisecond {
			t.Errorf("run returned at +%v, want +255ms", got)
		}
		if !p.wait(t.Context()) {
			t.Fatal("wait gave up")
		}
		// Due at 0, 10, …, 250 ms: 26 requests, each allowed its full 50 ms.
		if len(f.latency) != 26 {
			t.Fatalf("%d requests finished, want 26", len(f.latency))
		}
		for seq, l := range f.latency {
			if l != 50*time.Millisecond {
				t.Errorf("request %d: latency %v, want 50ms", seq, l)
			}
		}
	})
}

func TestPacerWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFired()
		release := make(chan struct{})
		p := f.pacer(1, 10, func() { <-release })
		p.run(t.Context(), t.Context(), p.sched.start.Add(time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if p.wait(ctx) {
			t.Fatal("wait reported done with a request still blocked")
		}
		close(release)
		if !p.wait(t.Context()) {
			t.Fatal("wait gave up after the request returned")
		}
	})
}
