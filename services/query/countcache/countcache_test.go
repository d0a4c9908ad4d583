package countcache

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// source is a fake Redis: it counts reads and fails while told to.
type source struct {
	mu     sync.Mutex
	online uint64
	fail   bool
	reads  atomic.Int64
}

func (s *source) read(context.Context) (statestore.Counts, error) {
	s.reads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return statestore.Counts{}, errors.New("redis down")
	}
	return statestore.Counts{Registered: 100, Online: s.online}, nil
}

func (s *source) set(online uint64, fail bool) {
	s.mu.Lock()
	s.online, s.fail = online, fail
	s.mu.Unlock()
}

var cfg = Config{Interval: 100 * time.Millisecond, MaxAge: time.Second, Timeout: 50 * time.Millisecond}

func start(t *testing.T, src *source, cfg Config) (*Cache, func()) {
	c := New(src.read, cfg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return c, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

func TestGetServesTheBackgroundRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{online: 7}
		c, stop := start(t, src, cfg)
		defer stop()
		synctest.Wait()
		t0 := time.Now()
		for range 1000 {
			s, err := c.Get(t.Context())
			if err != nil || s.Counts.Online != 7 || !s.At.Equal(t0) {
				t.Fatalf("Get = %+v, %v; want 7 online read at %v", s, err, t0)
			}
		}
		if n := src.reads.Load(); n != 1 {
			t.Fatalf("%d reads for 1,000 Gets within one interval, want 1 (the background read)", n)
		}
		// The next interval's read is served from then on.
		src.set(9, false)
		time.Sleep(cfg.Interval)
		synctest.Wait()
		s, err := c.Get(t.Context())
		if err != nil || s.Counts.Online != 9 || !s.At.Equal(t0.Add(cfg.Interval)) {
			t.Fatalf("Get after an interval = %+v, %v; want 9 online read at +100ms", s, err)
		}
		if n := src.reads.Load(); n != 2 {
			t.Fatalf("%d reads after one interval, want 2", n)
		}
	})
}

// While Redis fails, the last read is served until it is MaxAge old; then Get reads
// itself and reports the failure. Once Redis answers again, counts are current.
func TestFailingReadsServeTheLastReadUntilMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{online: 5}
		c, stop := start(t, src, cfg)
		defer stop()
		synctest.Wait()
		t0 := time.Now()
		src.set(6, true)
		time.Sleep(cfg.MaxAge)
		synctest.Wait()
		if s, err := c.Get(t.Context()); err != nil || s.Counts.Online != 5 || !s.At.Equal(t0) {
			t.Fatalf("Get at MaxAge = %+v, %v; want the last good read (5 online)", s, err)
		}
		time.Sleep(time.Millisecond)
		if s, err := c.Get(t.Context()); err == nil || !strings.Contains(err.Error(), "redis down") {
			t.Fatalf("Get past MaxAge = %+v, %v; want the read's error", s, err)
		}
		src.set(6, false)
		if s, err := c.Get(t.Context()); err != nil || s.Counts.Online != 6 || !s.At.Equal(time.Now()) {
			t.Fatalf("Get once Redis answers = %+v, %v; want 6 online read now", s, err)
		}
	})
}

// Concurrent Gets on a cold cache share one read.
func TestColdGetsShareOneRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{online: 3}
		c := New(src.read, cfg, slog.New(slog.DiscardHandler)) // not running
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if s, err := c.Get(t.Context()); err != nil || s.Counts.Online != 3 {
					t.Errorf("Get = %+v, %v", s, err)
				}
			})
		}
		wg.Wait()
		if n := src.reads.Load(); n != 1 {
			t.Fatalf("%d reads for 50 concurrent cold Gets, want 1", n)
		}
	})
}

func TestDisabledReadsEveryTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &source{online: 1}
		off := Config{Timeout: time.Second}
		c, stop := start(t, src, off)
		defer stop()
		for i := range 5 {
			src.set(uint64(i), false)
			if s, err := c.Get(t.Context()); err != nil || s.Counts.Online != uint64(i) {
				t.Fatalf("Get = %+v, %v; want %d online", s, err, i)
			}
		}
		if n := src.reads.Load(); n != 5 {
			t.Fatalf("%d reads for 5 Gets with the cache off, want 5", n)
		}
	})
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{cfg, ""},
		{Config{Timeout: time.Second}, ""},
		{Config{Interval: -1, Timeout: time.Second}, "interval must not be negative"},
		{Config{Interval: time.Second, MaxAge: time.Millisecond, Timeout: time.Second}, "max age must be at least the interval"},
		{Config{Interval: time.Second, MaxAge: time.Second}, "timeout must be positive"},
	} {
		err := tt.cfg.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}
