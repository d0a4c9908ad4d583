package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsTileTheRange(t *testing.T) {
	var next uint64
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d (no gap, no overlap)", i, lo, next)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d], but bucketOf gives %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		// The width bound is what the ≤ 1 % error rests on.
		if width := hi - lo + 1; lo >= subCount && width*subHalf > lo {
			t.Fatalf("bucket %d = [%d, %d] is wider than 1/%d of its start", i, lo, hi, subHalf)
		}
		next = hi + 1
	}
	if next != uint64(histMax)+1 {
		t.Fatalf("buckets end at %d, want histMax %d", next-1, histMax)
	}
}

func TestQuantilesExact(t *testing.T) {
	type want struct {
		q float64
		v time.Duration
	}
	tests := []struct {
		name   string
		values func(h *histogram)
		wants  []want
	}{
		{
			name:   "empty",
			values: func(*histogram) {},
			wants:  []want{{0.5, 0}, {1, 0}},
		},
		{
			name:   "one value is every quantile",
			values: func(h *histogram) { h.record(5 * time.Millisecond) },
			wants:  []want{{0, 5 * time.Millisecond}, {0.5, 5 * time.Millisecond}, {0.999, 5 * time.Millisecond}, {1, 5 * time.Millisecond}},
		},
		{
			// Below 256 ns every bucket has width 1: nearest rank, exactly.
			name: "1..100 ns",
			values: func(h *histogram) {
				for v := 1; v <= 100; v++ {
					h.record(time.Duration(v))
				}
			},
			wants: []want{{0, 1}, {0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}},
		},
		{
			// 1000 values 1 µs … 1000 µs. The rank-r value is r µs; the answer is the last
			// nanosecond of its bucket: 500 µs = 500000 ns has 19 significant bits, so its
			// bucket is 2^11 ns wide and starts at 244·2^11 = 499712: it ends at 501759.
			// Likewise 900 µs → 219·2^12 + 4095, 990 µs → 241·2^12 + 4095,
			// 999 µs → 243·2^12 + 4095. The top quantile is the exact maximum.
			name: "1..1000 µs",
			values: func(h *histogram) {
				for v := 1; v <= 1000; v++ {
					h.record(time.Duration(v) * time.Microsecond)
				}
			},
			wants: []want{
				{0, time.Microsecond},
				{0.5, 501759},
				{0.9, 901119},
				{0.99, 991231},
				{0.999, 999423},
				{1, time.Millisecond},
			},
		},
		{
			// Nine fast answers and one stall: p50 is fast, p90 still fast (rank 9),
			// p99 is the stall.
			name: "one stall in ten",
			values: func(h *histogram) {
				for range 9 {
					h.record(2 * time.Microsecond) // 2000 ns: bucket [2000, 2007]
				}
				h.record(3 * time.Second)
			},
			wants: []want{{0.5, 2007}, {0.9, 2007}, {0.91, 3 * time.Second}, {0.99, 3 * time.Second}, {1, 3 * time.Second}},
		},
		{
			// Beyond histMax the top bucket answers with the exact maximum.
			name: "overflow",
			values: func(h *histogram) {
				h.record(time.Millisecond)
				h.record(90 * time.Second)
			},
			wants: []want{{0.5, time.Millisecond}, {0.99, 90 * time.Second}, {1, 90 * time.Second}},
		},
		{
			name:   "negative counts as 0",
			values: func(h *histogram) { h.record(-time.Second) },
			wants:  []want{{0.5, 0}, {1, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			tt.values(&h)
			for _, w := range tt.wants {
				if got := h.quantile(w.q); got != w.v {
					t.Errorf("quantile(%v) = %d ns, want %d ns", w.q, got, w.v)
				}
			}
		})
	}
}

func TestQuantileErrorBelowOnePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var h histogram
	values := make([]time.Duration, 100000)
	for i := range values {
		// Log-uniform over 1 µs … 60 s, the range latencies and freshness live in.
		exp := 3 + rng.Float64()*(10.78-3) // 10^3 ns … 10^10.78 ns ≈ 60 s
		v := time.Duration(math.Pow(10, exp))
		values[i] = v
		h.record(v)
	}
	slices.Sort(values)
	for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
		rank := int(math.Ceil(q * float64(len(values))))
		exact := values[rank-1]
		got := h.quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/100 {
			t.Errorf("quantile(%v) = %v, exact %v: off by more than 1%% (or below)", q, got, exact)
		}
	}
	if h.count() != uint64(len(values)) {
		t.Errorf("count = %d, want %d", h.count(), len(values))
	}
}
