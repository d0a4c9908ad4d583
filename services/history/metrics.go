package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// metrics are pulse-history's own; the consumer and the Kafka client add theirs.
type metrics struct {
	rows         *prometheus.CounterVec
	writeSeconds prometheus.Histogram
	retries      prometheus.Counter
	// rejected counts statements Cassandra refused for good, by table: dropped.
	rejected       *prometheus.CounterVec
	cassandraUp    prometheus.Gauge
	skipped        *prometheus.CounterVec
	deadLetters    prometheus.Counter
	stale          prometheus.Counter
	erasures       prometheus.Counter
	scrubbed       prometheus.Counter
	commitLag      *prometheus.HistogramVec
	commitFailures prometheus.Counter
	windowEntries  prometheus.Gauge
	rebuilt        prometheus.Counter

	rollupChanges      *prometheus.CounterVec
	rollupUsers        prometheus.Gauge
	rollupMinutes      prometheus.Gauge
	rollupHours        prometheus.Gauge
	rollupReplayed     prometheus.Counter
	checkpoints        prometheus.Counter
	checkpointBytes    prometheus.Histogram
	checkpointFailures prometheus.Counter
}

// Reasons a record is skipped.
const (
	skipDuplicate   = "duplicate"
	skipUndecodable = "undecodable"
	// skipErased: an event of an erased user dated at or before the erasure, in flight
	// when it came (docs/design.md, "Erasure").
	skipErased = "erased"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_history_rows_written_total",
			Help: "Rows written (inserted or updated) in Cassandra, by table.",
		}, []string{"table"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_history_write_duration_seconds",
			Help:    "Latency of one Cassandra write (one partition key's batch), failed attempts included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_history_rejected_statements_total",
			Help: "Statements Cassandra refused as invalid for good (after splitting their batch), dropped so the partition moves on, by table.",
		}, []string{"table"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_write_retries_total",
			Help: "Cassandra writes that failed and were retried.",
		}),
		cassandraUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_history_cassandra_up",
			Help: "1 when the last Cassandra write succeeded, 0 while writes are failing and being retried.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_dead_letters_total",
			Help: "Records of presence.changes written to presence.changes.dlq because they cannot be decoded.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_history_records_skipped_total",
			Help: "Records not written, by reason: duplicate (event id seen within the horizon) or undecodable.",
		}, []string{"reason"}),
		erasures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_erasures_total",
			Help: "Erasures carried out: the user's rows deleted from presence.events' side (user_status, user_activity) and from presence.changes' side (sessions, days, index maps), each counted once per side.",
		}),
		scrubbed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_erasure_rewrites_total",
			Help: "Rows an erasure rewrote or deleted to take the user's index out of the rows that hold it without naming the user: uniques hours, point-in-time snapshots and shard_changes.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_stale_events_total",
			Help: "Events recorded as stale: older than the newest event of their device.",
		}),
		commitLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulse_history_commit_lag_seconds",
			Help:    "Age of the last record of each committed batch (its log timestamp to its commit), by topic.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
		}, []string{"topic"}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_commit_failures_total",
			Help: "Offset commits that failed; the next commit covers them, and a replay rewrites identical rows.",
		}),
		windowEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_history_horizon_entries",
			Help: "Event ids and (user, device) pairs remembered by the partitions' horizons.",
		}),
		rebuilt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_horizon_records_replayed_total",
			Help: "Records re-read from the log to rebuild horizons on assignment.",
		}),
		rollupChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_history_rollup_changes_total",
			Help: "Changes given to the rollups, by outcome: applied, late (moved up to the frontier), dropped (not after the user's previous one, or corrupt), mismatched (previous status other than the fold's), repeated (source position already folded).",
		}, []string{"outcome"}),
		rollupUsers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_history_rollup_users",
			Help: "Users the rollup folds hold (with an unfinished session or day).",
		}),
		rollupMinutes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_history_rollup_minutes",
			Help: "Unfinished minutes the rollup folds hold.",
		}),
		rollupHours: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_history_rollup_hours",
			Help: "Unfinished hours the rollup folds hold.",
		}),
		rollupReplayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_rollup_records_replayed_total",
			Help: "presence.changes records re-read after a checkpoint to restore rollup folds on assignment.",
		}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_rollup_checkpoints_total",
			Help: "Rollup checkpoints written.",
		}),
		checkpointBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_history_rollup_checkpoint_bytes",
			Help:    "Size of each rollup checkpoint written.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10),
		}),
		checkpointFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_history_rollup_checkpoint_unusable_total",
			Help: "Checkpoints that could not be restored; the fold started empty.",
		}),
	}
	reg.MustRegister(m.deadLetters, m.rows, m.writeSeconds, m.retries, m.rejected, m.cassandraUp, m.skipped, m.stale, m.erasures, m.scrubbed,
		m.commitLag, m.commitFailures, m.windowEntries, m.rebuilt,
		m.rollupChanges, m.rollupUsers, m.rollupMinutes, m.rollupHours, m.rollupReplayed,
		m.checkpoints, m.checkpointBytes, m.checkpointFailures)
	for _, o := range []string{"applied", "late", "dropped", "mismatched", "repeated"} {
		m.rollupChanges.WithLabelValues(o)
	}
	m.cassandraUp.Set(1)
	for _, r := range []string{skipDuplicate, skipUndecodable, skipErased} {
		m.skipped.WithLabelValues(r)
	}
	for _, t := range []string{historystore.TableActivity, historystore.TableStatus, historystore.TableSessions,
		historystore.TableUserDaily, historystore.TableDailyUsers, historystore.TableConcurrency, historystore.TableUniques,
		historystore.TableCheckpoints} {
		m.rows.WithLabelValues(t)
	}
	return m
}
