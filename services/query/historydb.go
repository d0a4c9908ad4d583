package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// historyDB is query's connection to the history tables in Cassandra. Nothing on the
// live path needs Cassandra, so query starts without it: Run connects in the
// background and keeps retrying, and until then the history routes answer 503 while
// every other route, and /readyz, carry on. Once connected, the driver reconnects to
// nodes by itself; a read that fails meanwhile is a 503 as well.
type historyDB struct {
	cfg    cassx.Config
	logger *slog.Logger
	store  atomic.Pointer[historystore.Store]
	// retry bounds the wait between two connection attempts.
	retry time.Duration
}

func newHistoryDB(cfg cassx.Config, logger *slog.Logger) *historyDB {
	return &historyDB{cfg: cfg, logger: logger, retry: 30 * time.Second}
}

// get is the store, nil while not connected (or for a nil historyDB).
func (d *historyDB) get() *historystore.Store {
	if d == nil {
		return nil
	}
	return d.store.Load()
}

// Run connects, retrying with a doubling wait (1s up to d.retry), then holds the
// store's session until ctx ends and closes it.
func (d *historyDB) Run(ctx context.Context) error {
	wait := time.Second
	for {
		s, err := d.connect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			d.store.Store(s)
			d.logger.Info("history store connected", "cassandra", d.cfg.String())
			<-ctx.Done()
			d.store.Store(nil)
			s.Close()
			return nil
		}
		d.logger.Warn("history store unreachable; history routes answer 503 until it connects", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, d.retry)
	}
}

// connect opens a session, or gives up waiting when ctx ends: the driver's connect
// takes no context, and on a busy machine its dials and handshakes add up to far
// longer than a shutdown may wait. A session that arrives after ctx ended is closed.
func (d *historyDB) connect(ctx context.Context) (*historystore.Store, error) {
	type result struct {
		s   *historystore.Store
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := historystore.Open(d.cfg)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// connectedGauge reports whether the history routes can reach Cassandra: the
// informational counterpart of a readiness check, which query must not have, since
// its live routes do not need Cassandra.
func (d *historyDB) connectedGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulse_query_history_connected",
		Help: "1 while query holds a Cassandra session for the history routes, else 0 (they answer 503).",
	}, func() float64 {
		if d.get() != nil {
			return 1
		}
		return 0
	})
}
