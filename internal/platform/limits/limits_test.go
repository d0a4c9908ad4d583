package limits

import (
	"context"
	"errors"
	"fmt"
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
	_, _, _ = r.Reserve("a", 1, now)
	_, _, _ = r.Reserve("b", 1, now)
	// A second later both are full again; a takes its token, c evicts b, the least
	// recently used.
	later := now.Add(time.Second)
	_, _, _ = r.Reserve("a", 1, later)
	_, _, _ = r.Reserve("c", 1, later)
	if r.Len() != 2 {
		t.Fatalf("Len = %d, want 2", r.Len())
	}
	if _, wait, _ := r.Reserve("a", 1, later); wait == 0 {
		t.Fatal("a was forgotten; b should have been")
	}
	if _, wait, _ := r.Reserve("b", 1, later); wait != 0 {
		t.Fatal("b was remembered; it was the least recently used")
	}
}

// A bucket in debt is never forgotten, however many other keys come: forgetting it
// would give it a full burst again. Full buckets make room as before.
func TestRatesKeepBucketsInDebt(t *testing.T) {
	r := NewRates(1, 5, 2)
	now := time.Unix(1000, 0)
	if _, wait, err := r.Reserve("debtor", 5, now); wait != 0 || err != nil {
		t.Fatalf("the debtor's burst: wait %v, %v", wait, err)
	}
	for i := range 20 {
		_, _, _ = r.Reserve(fmt.Sprintf("other-%d", i), 1, now.Add(time.Duration(i)*100*time.Millisecond))
	}
	at := now.Add(2 * time.Second) // the debtor has 2 of its 5 tokens back
	if _, wait, _ := r.Reserve("debtor", 5, at); wait != 3*time.Second {
		t.Fatalf("the debtor after 20 other keys: wait %v, want 3s (its debt kept)", wait)
	}
	// Every bucket but the debtor's refilled within a second of its use: they are
	// forgotten again, and the buckets are back within max once the debt is paid.
	paid := now.Add(10 * time.Second)
	for i := range 20 {
		_, _, _ = r.Reserve(fmt.Sprintf("late-%d", i), 1, paid.Add(time.Duration(i)*2*time.Second))
	}
	if r.Len() > 2 {
		t.Fatalf("Len = %d after the debts were paid, want at most 2", r.Len())
	}
}

// While every remembered bucket is in debt the memory grows past max, by the buckets
// in debt only.
func TestRatesGrowOnlyByDebt(t *testing.T) {
	r := NewRates(1000, 1000, 10)
	now := time.Unix(1000, 0)
	// One event a millisecond, each for a new key: a bucket is in debt for 1ms, so
	// about one is at any time.
	for i := range 10_000 {
		_, _, _ = r.Reserve(fmt.Sprintf("k%d", i), 1, now.Add(time.Duration(i)*time.Millisecond))
	}
	if r.Len() > 11 {
		t.Fatalf("Len = %d, want at most max+1", r.Len())
	}
}

func TestConns(t *testing.T) {
	c := NewConns(3, 0)
	r1, err := c.Acquire("a", 2, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("a", 2, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("a", 2, "a1"); !errors.Is(err, ErrKeyFull) {
		t.Fatalf("third of key a: %v, want ErrKeyFull", err)
	}
	if _, err := c.Acquire("b", 2, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("c", 2, "a1"); !errors.Is(err, ErrInstanceFull) {
		t.Fatalf("fourth: %v, want ErrInstanceFull", err)
	}
	r1()
	r1() // twice is once
	if c.Open() != 2 {
		t.Fatalf("Open = %d, want 2", c.Open())
	}
	if _, err := c.Acquire("c", 2, "a1"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if c := NewConns(0, 0); c != nil {
		for range 100 {
			if _, err := c.Acquire("k", 0, "a1"); err != nil {
				t.Fatalf("unbounded: %v", err)
			}
		}
	}
}

// Each credential brings its own bound (user tokens a smaller one), and one remote
// address holds at most perAddr whatever its credentials.
func TestConnsPerKeyBoundAndAddress(t *testing.T) {
	c := NewConns(0, 3)
	if _, err := c.Acquire("user:alice", 1, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("user:alice", 1, "10.0.0.2"); !errors.Is(err, ErrKeyFull) {
		t.Fatalf("second of a user bound to 1: %v, want ErrKeyFull", err)
	}
	for _, k := range []string{"k1", "k2"} {
		if _, err := c.Acquire(k, 10, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Acquire("k3", 10, "10.0.0.1"); !errors.Is(err, ErrAddrFull) {
		t.Fatalf("fourth from one address: %v, want ErrAddrFull", err)
	}
	release, err := c.Acquire("k3", 10, "10.0.0.2")
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	release()
	if c.Open() != 3 {
		t.Fatalf("Open = %d, want 3", c.Open())
	}
}

func TestSlotsBoundWorkInFlight(t *testing.T) {
	s := NewSlots(2)
	ctx := context.Background()
	r1, err1 := s.Acquire(ctx, time.Second)
	r2, err2 := s.Acquire(ctx, time.Second)
	if err1 != nil || err2 != nil || s.InUse() != 2 {
		t.Fatalf("two free slots: %v %v, in use %d", err1, err2, s.InUse())
	}
	start := time.Now()
	if _, err := s.Acquire(ctx, 50*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third with both taken: %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("refused after %v, before its wait", waited)
	}
	// A caller's own deadline is its error, not ErrBusy.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(dctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline while waiting: %v, want DeadlineExceeded", err)
	}
	// A release frees a waiter; releasing twice frees only one slot.
	type acquired struct {
		release func()
		err     error
	}
	got := make(chan acquired, 1)
	go func() {
		r, err := s.Acquire(ctx, 5*time.Second)
		got <- acquired{r, err}
	}()
	r1()
	r1()
	w := <-got
	if w.err != nil {
		t.Fatalf("a waiter after a release: %v", w.err)
	}
	if s.InUse() != 2 {
		t.Fatalf("in use with r2 and the waiter's: %d, want 2", s.InUse())
	}
	if _, ok := s.TryAcquire(); ok {
		t.Fatal("TryAcquire took a slot while both were taken")
	}
	w.release()
	r2()
	r3, ok := s.TryAcquire()
	if !ok {
		t.Fatal("TryAcquire found no free slot")
	}
	r3()
	if s.InUse() != 0 || s.Size() != 2 {
		t.Fatalf("in use %d of %d after every release", s.InUse(), s.Size())
	}
}
