package feed

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	subscribers *prometheus.GaugeVec
	delivered   *prometheus.CounterVec
	errors      *prometheus.CounterVec
	slow        prometheus.Counter
	delay       prometheus.Histogram
	records     *prometheus.CounterVec
	resumes     *prometheus.CounterVec
	ready       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		subscribers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_feed_subscribers",
			Help: "Open change feed connections, by kind (users: a set of user ids; firehose: every user).",
		}, []string{"kind"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_feed_messages_delivered_total",
			Help: "Messages written to change feed connections, by type (snapshot, change, error).",
		}, []string{"type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_feed_error_messages_total",
			Help: "Error messages written to change feed connections, by code (rate_limited: commands beyond the connection's rate; invalid_command, too_many_users, forbidden: refused commands; cursor_expired, unavailable, ...).",
		}, []string{"code"}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_feed_slow_consumer_disconnects_total",
			Help: "Connections closed because their queue was full or a write timed out.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pulse_feed_delivery_delay_seconds",
			Help: "Time from a change taking effect (changed_at) to its live delivery; replayed changes are not observed.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60,
				300},
		}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_feed_records_total",
			Help: "presence.changes records the hub read, by result (change, duplicate, undecodable).",
		}, []string{"result"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_feed_resumes_total",
			Help: "Connections that came with a cursor, by how they were served (buffer: from memory; log: read from Kafka first; expired: cursor too old or foreign, fresh snapshot sent; busy: refused, no log replay slot freed up in time).",
		}, []string{"source"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_feed_ready",
			Help: "1 while the hub tails presence.changes and accepts subscribers.",
		}),
	}
	for _, k := range []string{"users", "firehose"} {
		m.subscribers.WithLabelValues(k)
	}
	for _, t := range []string{TypeSnapshot, TypeChange, TypeError} {
		m.delivered.WithLabelValues(t)
	}
	for _, c := range []string{CodeInvalidCommand, CodeTooManyUsers, CodeForbidden, CodeRateLimited} {
		m.errors.WithLabelValues(c)
	}
	for _, r := range []string{"change", "duplicate", "undecodable"} {
		m.records.WithLabelValues(r)
	}
	for _, s := range []string{"buffer", "log", "expired", "busy"} {
		m.resumes.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.subscribers, m.delivered, m.errors, m.slow, m.delay, m.records, m.resumes, m.ready)
	}
	return m
}
