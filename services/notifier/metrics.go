package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of deliveries and changes.
const (
	outcomeDelivered = "delivered"
	outcomeFailed    = "failed" // an attempt that failed; the batch is retried or dead-lettered
	outcomeDead      = "dead"
)

type metrics struct {
	deliveries     *prometheus.CounterVec
	changes        *prometheus.CounterVec
	attemptSeconds *prometheus.HistogramVec
	latency        *prometheus.HistogramVec
	replayed       *prometheus.CounterVec
	skipped        prometheus.Counter
	reloads        *prometheus.CounterVec
	endpoints      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, n *notifier) *metrics {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_notifier_deliveries_total",
			Help: "Webhook batches by endpoint and outcome: delivered, failed (an attempt that failed, to be retried or dead-lettered), dead (dead-lettered).",
		}, []string{"endpoint", "outcome"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_notifier_changes_total",
			Help: "Changes in webhook batches by endpoint and outcome: delivered or dead (dead-lettered).",
		}, []string{"endpoint", "outcome"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulse_notifier_attempt_seconds",
			Help:    "Duration of one webhook POST, by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"endpoint"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulse_notifier_latency_seconds",
			Help:    "From a change's write to presence.changes to its endpoint's 2xx, by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"endpoint"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_notifier_replayed_batches_total",
			Help: "Dead-lettered batches taken from the replay topic, by endpoint.",
		}, []string{"endpoint"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_notifier_skipped_records_total",
			Help: "Records skipped: not a change, not a webhook batch, or a replay for an endpoint no longer configured.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_notifier_endpoint_reloads_total",
			Help: "Endpoints file reloads by result: applied, or refused (the previous endpoints stay).",
		}, []string{"result"}),
		endpoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_notifier_endpoints",
			Help: "Endpoints configured.",
		}),
	}
	reg.MustRegister(m.deliveries, m.changes, m.attemptSeconds, m.latency, m.replayed, m.skipped, m.reloads, m.endpoints, backlogCollector{n})
	return m
}

// forget drops the series of an endpoint no longer configured.
func (m *metrics) forget(endpoint string) {
	for _, o := range []string{outcomeDelivered, outcomeFailed, outcomeDead} {
		m.deliveries.DeleteLabelValues(endpoint, o)
		m.changes.DeleteLabelValues(endpoint, o)
	}
	m.attemptSeconds.DeleteLabelValues(endpoint)
	m.latency.DeleteLabelValues(endpoint)
	m.replayed.DeleteLabelValues(endpoint)
}

var (
	backlogDesc = prometheus.NewDesc("pulse_notifier_backlog_changes",
		"Changes routed to an endpoint and neither delivered nor dead-lettered yet, by endpoint.", []string{"endpoint"}, nil)
	oldestDesc = prometheus.NewDesc("pulse_notifier_oldest_pending_seconds",
		"Age of the oldest change routed to an endpoint and neither delivered nor dead-lettered yet (0: none), by endpoint: its lag.", []string{"endpoint"}, nil)
)

// backlogCollector reads every lane's backlog when scraped.
type backlogCollector struct{ n *notifier }

func (backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- backlogDesc; ch <- oldestDesc }

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		n      int
		oldest time.Time
	}
	by := map[string]*agg{}
	for _, ep := range c.n.endpoints.Load().list {
		by[ep.ID] = &agg{}
	}
	c.n.lanes.Range(func(k, v any) bool {
		a := by[v.(string)]
		if a == nil {
			return true
		}
		if _, n, produced, ok := k.(*lane).pending(); ok {
			a.n += n
			if a.oldest.IsZero() || produced.Before(a.oldest) {
				a.oldest = produced
			}
		}
		return true
	})
	now := time.Now()
	for id, a := range by {
		age := 0.0
		if !a.oldest.IsZero() {
			age = max(now.Sub(a.oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(a.n), id)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, id)
	}
}
