package main

import "github.com/prometheus/client_golang/prometheus"

// metrics are the aggregator's own; franz-go's client metrics come from kafkax.
type metrics struct {
	records      *prometheus.CounterVec
	undecodable  prometheus.Counter
	changes      prometheus.Counter
	timeouts     prometheus.Counter
	windowSize   prometheus.Histogram
	flushSeconds prometheus.Histogram
	retries      *prometheus.CounterVec
	// Shards rebuilt from the log after Redis lost them (guarantee 10).
	rebuilds       prometheus.Counter
	deadLetters    prometheus.Counter
	devicesDropped prometheus.Counter
	groupRefused   prometheus.Counter
	rebuildSeconds prometheus.Histogram
	// Users a rebuild restored from history because the log no longer reaches back
	// to them, and rebuilds that could not (history off).
	restored       prometheus.Counter
	withoutHistory prometheus.Counter
	// Event ids forgotten before their horizon (PULSE_DEDUPE_MAX_IDS).
	dedupeEvicted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		devicesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_devices_dropped_total",
			Help: "Live devices dropped because their user had more than the bound of live devices (the one seen longest ago goes).",
		}),
		groupRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_group_joins_refused_total",
			Help: "Group joins refused because the user was already a member of the most groups one user can be in.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_dead_letters_total",
			Help: "Records of presence.events written to presence.events.dlq because they cannot be decoded or applied.",
		}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_rebuilds_total",
			Help: "Shards rebuilt from the log because Redis no longer held what this aggregator had written.",
		}),
		rebuildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_aggregator_rebuild_seconds",
			Help:    "Time to rebuild one shard from the log.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
		}),
		dedupeEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_dedupe_ids_evicted_total",
			Help: "Event ids forgotten before PULSE_DEDUPE_HORIZON because a partition remembered PULSE_DEDUPE_MAX_IDS: a copy of one arriving later is applied again.",
		}),
		restored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_rebuild_restored_users_total",
			Help: "Users a rebuild restored from history's tables because every event of theirs is older than the log's start.",
		}),
		withoutHistory: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_rebuilds_without_history_total",
			Help: "Rebuilds of a shard whose log no longer starts at offset 0 done from the log alone (PULSE_AGGREGATOR_REBUILD_FROM_HISTORY=false): users whose every event is older read as never seen.",
		}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_aggregator_events_total",
			Help: "Events folded, by outcome: applied, stale (older than the device's newest), duplicate, erased (an erase event that found the user) or in_flight (an event of an erased user dated at or before the erasure, dropped).",
		}, []string{"outcome"}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_undecodable_records_total",
			Help: "Records of presence.events skipped because they are not valid Pulse events.",
		}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_changes_total",
			Help: "Effective status changes produced to presence.changes.",
		}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_aggregator_timeouts_decided_total",
			Help: "Timeout events (device offline, user idle) written to presence.events.",
		}),
		windowSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_aggregator_window_events",
			Help:    "Events per window and partition.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pulse_aggregator_flush_seconds",
			Help:    "Time to make one window durable: state read, Redis write, changes produced, offset committed.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_aggregator_retries_total",
			Help: "Retried dependency operations, by operation.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.devicesDropped, m.groupRefused, m.deadLetters, m.rebuilds, m.rebuildSeconds, m.restored, m.withoutHistory, m.dedupeEvicted, m.records, m.undecodable, m.changes, m.timeouts, m.windowSize, m.flushSeconds, m.retries)
	return m
}

func (m *metrics) observeWindow(events int, s foldStats, changes int) {
	m.windowSize.Observe(float64(events))
	m.records.WithLabelValues("applied").Add(float64(s.applied))
	m.records.WithLabelValues("stale").Add(float64(s.stale))
	m.records.WithLabelValues("duplicate").Add(float64(s.duplicates))
	m.devicesDropped.Add(float64(s.devicesDropped))
	m.groupRefused.Add(float64(s.groupJoinsRefused))
	m.records.WithLabelValues("erased").Add(float64(s.erased))
	m.records.WithLabelValues("in_flight").Add(float64(s.inFlight))
}
