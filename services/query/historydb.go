package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/pkg/cassx"
)

// historyDB is query's connection to the history tables in Cassandra. Nothing on the
// live path needs Cassandra, so query starts without it: Run connects in the
// background and keeps retrying, and until then the history routes answer 503 while
// every other route, and /readyz, carry on. Once connected, the driver reconnects to
// nodes by itself; a read that fails meanwhile is a 503 as well.
type historyDB struct {
	cfg     cassx.Config
	logger  *slog.Logger
	session atomic.Pointer[gocql.Session]
	// retry bounds the wait between two connection attempts.
	retry time.Duration
}

func newHistoryDB(cfg cassx.Config, logger *slog.Logger) *historyDB {
	return &historyDB{cfg: cfg, logger: logger, retry: 30 * time.Second}
}

// get is the session, nil while not connected (or for a nil historyDB).
func (d *historyDB) get() *gocql.Session {
	if d == nil {
		return nil
	}
	return d.session.Load()
}

// Run connects, retrying with a doubling wait (1s up to d.retry), then holds the
// session until ctx ends and closes it.
func (d *historyDB) Run(ctx context.Context) error {
	wait := time.Second
	for {
		s, err := cassx.NewSession(d.cfg)
		if err == nil {
			d.session.Store(s)
			d.logger.Info("history store connected", "cassandra", d.cfg.String())
			<-ctx.Done()
			d.session.Store(nil)
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
