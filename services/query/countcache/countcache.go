// Package countcache serves Pulse's online counts from memory.
//
// A count is the sum of every shard's bitmap cardinalities: one pipelined Redis round
// trip whatever the number of users, but still a round trip per request, and a
// dashboard polled by thousands of clients would send Redis thousands of identical
// pipelines a second. The cache reads the counts in the background at a fixed interval
// and answers requests from the last read, so a count request costs no Redis work and
// Redis sees one read per interval per query instance, however many ask.
//
// A cached count is at most one interval plus one read old. The aggregator publishes
// state in 100 ms windows, so an interval of the same order adds little to what a
// reader could see anyway; every answer says when its read started (Snapshot.At).
// When reads fail for longer than MaxAge, Get reads synchronously and returns that
// read's error: a count older than MaxAge is never served as current.
package countcache

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// ReadFunc reads the counts from Redis (statestore.Store.Counts).
type ReadFunc func(ctx context.Context) (statestore.Counts, error)

// Config tunes a Cache.
type Config struct {
	// Interval is the time between two background reads. 0 disables the cache: every
	// Get reads Redis.
	Interval time.Duration
	// MaxAge is the oldest snapshot Get serves; older, it reads synchronously. At
	// least Interval.
	MaxAge time.Duration
	// Timeout bounds one read.
	Timeout time.Duration
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, errors.New("interval must not be negative"))
	}
	if c.Interval > 0 && c.MaxAge < c.Interval {
		errs = append(errs, errors.New("max age must be at least the interval"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Snapshot is one read of the counts.
type Snapshot struct {
	Counts statestore.Counts
	// At is when the read started: the counts are at least this recent.
	At time.Time
}

// Cache holds the latest counts. Run keeps it fresh; Get answers from it.
type Cache struct {
	read   ReadFunc
	cfg    Config
	logger *slog.Logger
	now    func() time.Time

	cur atomic.Pointer[Snapshot]
	// mu makes concurrent synchronous reads (a cold or stale cache) share one read.
	mu sync.Mutex
}

// New returns a cache over read. Nothing is read until Run or Get.
func New(read ReadFunc, cfg Config, logger *slog.Logger) *Cache {
	return &Cache{read: read, cfg: cfg, logger: logger, now: time.Now}
}

// Get returns the latest snapshot if it is at most MaxAge old, else reads now.
func (c *Cache) Get(ctx context.Context) (Snapshot, error) {
	if c.cfg.Interval == 0 {
		return c.readNow(ctx)
	}
	if s, ok := c.fresh(); ok {
		return s, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Another request may have read while this one waited.
	if s, ok := c.fresh(); ok {
		return s, nil
	}
	return c.refresh(ctx)
}

func (c *Cache) fresh() (Snapshot, bool) {
	s := c.cur.Load()
	if s == nil || c.now().Sub(s.At) > c.cfg.MaxAge {
		return Snapshot{}, false
	}
	return *s, true
}

func (c *Cache) readNow(ctx context.Context) (Snapshot, error) {
	at := c.now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	n, err := c.read(rctx)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Counts: n, At: at}, nil
}

// refresh reads and, on success, publishes the read unless a newer one was published
// meanwhile.
func (c *Cache) refresh(ctx context.Context) (Snapshot, error) {
	s, err := c.readNow(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	for {
		old := c.cur.Load()
		if old != nil && !old.At.Before(s.At) {
			return *old, nil
		}
		if c.cur.CompareAndSwap(old, &s) {
			return s, nil
		}
	}
}

// failureLogEvery bounds how often Run logs failing reads; an outage's reads fail
// every interval.
const failureLogEvery = 10 * time.Second

// Run reads every Interval until ctx ends. It returns nil at once when the cache is
// disabled.
func (c *Cache) Run(ctx context.Context) error {
	if c.cfg.Interval == 0 {
		return nil
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	var logged time.Time
	failures := 0
	for {
		if _, err := c.refresh(ctx); err != nil && ctx.Err() == nil {
			failures++
			if now := c.now(); now.Sub(logged) >= failureLogEvery {
				c.logger.Warn("reading online counts failed; serving the last read while it is recent",
					"err", err, "failures_since_last_log", failures, "max_age", c.cfg.MaxAge)
				logged, failures = now, 0
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
