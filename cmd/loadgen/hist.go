package main

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear, in the manner of HdrHistogram: values (nanoseconds)
// below 2^subBits land in buckets of width 1; above that, every power-of-two range
// [2^k, 2^(k+1)) is cut into 2^(subBits-1) equal buckets. A bucket is then never wider
// than 1/2^(subBits-1) of its lower bound, so with subBits = 8 any value is known to
// within 1/128 ≈ 0.8 %, across 1 µs … histMax with 3,840 fixed counters and no
// allocation per recorded value.
const (
	subBits  = 8
	subCount = 1 << subBits // width-1 buckets at the bottom, and the first mantissa range
	subHalf  = subCount / 2 // buckets per power of two above it
	// histMax is the largest value tracked exactly to the bucket; larger ones are
	// counted in the top bucket (their exact maximum is kept aside). 2^36 ns ≈ 68.7 s.
	histMaxBits = 36
	histMax     = time.Duration(1)<<histMaxBits - 1
	histBuckets = subCount + (histMaxBits-subBits)*subHalf
)

// histogram records latencies. It is not safe for concurrent use; callers lock.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	min    time.Duration
	max    time.Duration
	sum    time.Duration
}

// bucketOf returns the index of the bucket that holds v (0 ≤ v ≤ histMax).
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	// shift keeps the top subBits bits of v: its mantissa m is in [subHalf, subCount).
	shift := bits.Len64(v) - subBits
	m := v >> shift
	return subCount + (shift-1)*subHalf + int(m-subHalf)
}

// bucketRange returns the lowest and highest value that land in bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := (i-subCount)/subHalf + 1
	m := uint64((i-subCount)%subHalf + subHalf)
	lo = m << shift
	return lo, lo + 1<<shift - 1
}

// record adds one value; negative values count as 0.
func (h *histogram) record(d time.Duration) {
	d = max(d, 0)
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
	h.counts[bucketOf(uint64(min(d, histMax)))]++
}

// count is the number of recorded values.
func (h *histogram) count() uint64 { return h.n }

// quantile returns the value at quantile q (0 ≤ q ≤ 1) by nearest rank: the smallest
// recorded value that at least ⌈q·n⌉ values are less than or equal to. It reports the
// highest value of that value's bucket (never understating a latency), clamped to the
// exact minimum and maximum seen, so q = 0 and q = 1 are exact. An empty histogram
// answers 0.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	if rank == 1 {
		return h.min
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == histBuckets-1 {
				return h.max // the top bucket also holds everything above histMax
			}
			_, hi := bucketRange(i)
			return min(max(time.Duration(hi), h.min), h.max)
		}
	}
	return h.max // unreachable: the counts add up to n
}

// mean is the arithmetic mean of the recorded values.
func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
