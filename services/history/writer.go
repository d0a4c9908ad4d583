package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// store writes one request: the history store, or the tests' fakes, which record,
// count or fail what history sends to Cassandra.
type store interface {
	Write(ctx context.Context, b *historystore.Batch) error
}

var _ store = (*historystore.Store)(nil)

// Retry backoff of a failed write or horizon read: exponential with jitter, forever.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 10 * time.Second
)

// writer writes planned batches concurrently, bounded by one limit for the whole
// process, and retries each failed batch until it succeeds or its context ends: a
// Cassandra outage stalls the partitions, it never skips a write.
type writer struct {
	store   store
	timeout time.Duration
	sem     chan struct{}
	logger  *slog.Logger
	m       *metrics
}

func newWriter(s store, timeout time.Duration, concurrency int, logger *slog.Logger, m *metrics) *writer {
	return &writer{store: s, timeout: timeout, sem: make(chan struct{}, concurrency), logger: logger, m: m}
}

// write writes every batch and returns nil once all succeeded, or ctx's error.
func (w *writer) write(ctx context.Context, batches []*historystore.Batch) error {
	var wg sync.WaitGroup
	for _, b := range batches {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-w.sem }()
			w.writeBatch(ctx, b)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// writeBatch runs b until it succeeds or ctx ends. A batch Cassandra rejects for good
// (historystore.RejectedForGood) is split in halves and each written on its own, down
// to single statements; one statement still rejected is dropped, logged and counted,
// so a value Cassandra will never take cannot stop the partition (docs/design.md
// guarantee 11).
func (w *writer) writeBatch(ctx context.Context, b *historystore.Batch) {
	p := retry.Policy{
		Initial:    backoffMin,
		Max:        backoffMax,
		TryTimeout: w.timeout,
		OnRetry: func(int, error) {
			w.m.cassandraUp.Set(0)
			w.m.retries.Inc()
		},
	}
	err := retry.Do(ctx, p, w.logger, "writing to cassandra", func(ctx context.Context) error {
		start := time.Now()
		err := w.store.Write(ctx, b)
		w.m.writeSeconds.Observe(time.Since(start).Seconds())
		if historystore.RejectedForGood(err) {
			return retry.Permanent(err)
		}
		return err
	}, "statements", len(b.Writes))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return // ctx ended: write reports it
	case len(b.Writes) > 1:
		// A batch too large, or one statement of it that Cassandra refuses: the
		// halves find out which.
		half := len(b.Writes) / 2
		w.writeBatch(ctx, &historystore.Batch{Keys: b.Keys, Writes: b.Writes[:half]})
		w.writeBatch(ctx, &historystore.Batch{Keys: b.Keys, Writes: b.Writes[half:]})
		return
	default:
		table := b.Writes[0].Table()
		w.m.rejected.WithLabelValues(table).Inc()
		w.logger.Error("Cassandra rejected a statement for good; it is dropped", "table", table, "err", err)
		return
	}
	w.m.cassandraUp.Set(1)
	for _, st := range b.Writes {
		w.m.rows.WithLabelValues(st.Table()).Inc()
	}
}
