package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/pkg/retry"
)

// store executes one group of statements that share a partition key. cassStore is the
// real one; the tests' fake records and fails writes on demand.
type store interface {
	exec(ctx context.Context, g *group) error
}

// cassStore writes to Cassandra. The driver prepares each distinct statement once per
// connection and binds values from then on.
type cassStore struct{ session *gocql.Session }

var _ store = cassStore{}

func (s cassStore) exec(ctx context.Context, g *group) error {
	if len(g.stmts) == 1 {
		st := g.stmts[0]
		return s.session.Query(st.cql, st.args...).ExecContext(ctx)
	}
	// One partition key per batch: Cassandra applies it as a single mutation, with
	// neither the batch log nor a coordinator fan-out.
	b := s.session.Batch(gocql.UnloggedBatch)
	for _, st := range g.stmts {
		b.Query(st.cql, st.args...)
	}
	return b.ExecContext(ctx)
}

// Retry backoff of a failed write or horizon read: exponential with jitter, forever.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 10 * time.Second
)

// writer writes planned groups concurrently, bounded by one limit for the whole
// process, and retries each failed group until it succeeds or its context ends: a
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

// write writes every group and returns nil once all succeeded, or ctx's error.
func (w *writer) write(ctx context.Context, groups []*group) error {
	var wg sync.WaitGroup
	for _, g := range groups {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-w.sem }()
			w.writeGroup(ctx, g)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// writeGroup runs g until it succeeds or ctx ends. A group Cassandra rejects for good
// (rejectedForGood) is split in halves and each written on its own, down to single
// statements; one statement still rejected is dropped, logged and counted, so a value
// Cassandra will never take cannot stop the partition (docs/design.md guarantee 11).
func (w *writer) writeGroup(ctx context.Context, g *group) {
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
		err := w.store.exec(ctx, g)
		w.m.writeSeconds.Observe(time.Since(start).Seconds())
		if rejectedForGood(err) {
			return retry.Permanent(err)
		}
		return err
	}, "statements", len(g.stmts))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return // ctx ended: write reports it
	case len(g.stmts) > 1:
		// A batch too large, or one statement of it that Cassandra refuses: the
		// halves find out which.
		half := len(g.stmts) / 2
		w.writeGroup(ctx, &group{keys: g.keys, stmts: g.stmts[:half]})
		w.writeGroup(ctx, &group{keys: g.keys, stmts: g.stmts[half:]})
		return
	default:
		st := g.stmts[0]
		w.m.rejected.WithLabelValues(st.table).Inc()
		w.logger.Error("Cassandra rejected a statement for good; it is dropped", "table", st.table, "err", err)
		return
	}
	w.m.cassandraUp.Set(1)
	for _, st := range g.stmts {
		w.m.rows.WithLabelValues(st.table).Inc()
	}
}

// rejectedForGood reports whether Cassandra refused a request as invalid because of
// what it carries (a batch over batch_size_fail_threshold, a value it cannot store),
// which no retry changes. An invalid request that names the schema (a table, keyspace
// or column it does not know: migrations not applied) is an operator's to fix and is
// retried like an outage, so that nothing is dropped meanwhile.
func rejectedForGood(err error) bool {
	var re gocql.RequestError
	if err == nil || !errors.As(err, &re) || re.Code() != gocql.ErrCodeInvalid {
		return false
	}
	msg := strings.ToLower(re.Message())
	for _, schema := range []string{"unconfigured table", "keyspace", "undefined column", "unknown identifier", "does not exist"} {
		if strings.Contains(msg, schema) {
			return false
		}
	}
	return true
}
