package limits

import (
	"errors"
	"testing"
	"time"
)

func TestRates(t *testing.T) {
	r := NewRates(10, 20, 100)
	now := time.Unix(1000, 0)
	if _, wait, err := r.Reserve("k", 20, now); wait != 0 || err != nil {
		t.Fatalf("a full bucket refused its burst: wait %v, %v", wait, err)
	}
	_, wait, err := r.Reserve("k", 5, now)
	if err != nil || wait != 500*time.Millisecond {
		t.Fatalf("empty bucket: wait %v, %v; want 500ms", wait, err)
	}
	// The refusal took nothing: half a second later exactly 5 are there.
	if _, wait, err := r.Reserve("k", 5, now.Add(500*time.Millisecond)); wait != 0 || err != nil {
		t.Fatalf("after the wait: wait %v, %v", wait, err)
	}
	if _, _, err := r.Reserve("other", 21, now); !errors.Is(err, ErrTooMany) {
		t.Fatalf("above the burst: %v, want ErrTooMany", err)
	}
	// Other keys have buckets of their own.
	if _, wait, err := r.Reserve("other", 20, now); wait != 0 || err != nil {
		t.Fatalf("another key: wait %v, %v", wait, err)
	}
}

func TestRatesCancel(t *testing.T) {
	r := NewRates(1, 10, 100)
	now := time.Unix(1000, 0)
	g, _, _ := r.Reserve("k", 10, now)
	g.Cancel()
	if _, wait, _ := r.Reserve("k", 10, now); wait != 0 {
		t.Fatalf("a cancelled grant was not given back: wait %v", wait)
	}
}

func TestRatesUnlimited(t *testing.T) {
	r := NewRates(0, 1, 1)
	for range 1000 {
		if _, wait, err := r.Reserve("k", 1_000_000, time.Unix(1, 0)); wait != 0 || err != nil {
			t.Fatalf("unlimited refused: %v %v", wait, err)
		}
	}
	if r.Len() != 0 || !r.Unlimited() {
		t.Fatalf("unlimited rates keep %d buckets", r.Len())
	}
}

func TestRatesForgetTheLeastRecentlyUsed(t *testing.T) {
	r := NewRates(1, 1, 2)
	now := time.Unix(1000, 0)
	for _, k := range []string{"a", "b", "a", "c"} { // c evicts b, the least recent
		_, _, _ = r.Reserve(k, 1, now)
	}
	if r.Len() != 2 {
		t.Fatalf("Len = %d, want 2", r.Len())
	}
	if _, wait, _ := r.Reserve("a", 1, now); wait == 0 {
		t.Fatal("a was forgotten; b should have been")
	}
	if _, wait, _ := r.Reserve("b", 1, now); wait != 0 {
		t.Fatal("b was remembered; it was the least recently used")
	}
}

func TestConns(t *testing.T) {
	c := NewConns(3, 2)
	r1, err := c.Acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("a"); !errors.Is(err, ErrKeyFull) {
		t.Fatalf("third of key a: %v, want ErrKeyFull", err)
	}
	if _, err := c.Acquire("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("c"); !errors.Is(err, ErrInstanceFull) {
		t.Fatalf("fourth: %v, want ErrInstanceFull", err)
	}
	r1()
	r1() // twice is once
	if c.Open() != 2 {
		t.Fatalf("Open = %d, want 2", c.Open())
	}
	if _, err := c.Acquire("c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if c := NewConns(0, 0); c != nil {
		for range 100 {
			if _, err := c.Acquire("k"); err != nil {
				t.Fatalf("unbounded: %v", err)
			}
		}
	}
}
