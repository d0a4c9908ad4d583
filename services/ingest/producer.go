package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
)

// producer appends events to presence.events and waits for Kafka's acknowledgement.
type producer struct {
	client     *kgo.Client
	topic      string
	ackTimeout time.Duration
	latency    *prometheus.HistogramVec
	// acked and failed are latency's observers, resolved on first use so that an
	// outcome never seen has no series.
	acked, failed lazyObserver
}

// lazyObserver is one series of a histogram, looked up once.
type lazyObserver struct {
	vec   *prometheus.HistogramVec
	label string
	obs   atomic.Pointer[prometheus.Observer]
}

func (l *lazyObserver) observe(v float64) {
	o := l.obs.Load()
	if o == nil {
		obs := l.vec.WithLabelValues(l.label)
		o = &obs
		l.obs.Store(o)
	}
	(*o).Observe(v)
}

func newProducer(client *kgo.Client, topic string, ackTimeout time.Duration, reg prometheus.Registerer) *producer {
	p := &producer{
		client:     client,
		topic:      topic,
		ackTimeout: ackTimeout,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulse_ingest_produce_duration_seconds",
			Help:    "Time from producing a request's events to Kafka acknowledging all of them (or giving up), by outcome.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"outcome"}),
	}
	p.acked = lazyObserver{vec: p.latency, label: "acked"}
	p.failed = lazyObserver{vec: p.latency, label: "failed"}
	reg.MustRegister(p.latency)
	return p
}

// produce appends events posted by principal (the credential's name, which every
// record carries in records.PrincipalHeader) and returns nil only once Kafka
// acknowledged every one of them (the client runs with acks=all). It gives up after the
// ack timeout; records already sent may still land, which is why a client retrying a
// failed request keeps its event ids: the aggregator drops the duplicates by id.
func (p *producer) produce(ctx context.Context, principal string, events []presence.Event) error {
	var one [1]*kgo.Record // most requests carry one event: no slice to allocate
	recs := one[:]
	if len(events) != 1 {
		recs = make([]*kgo.Record, len(events))
	}
	headers := records.EventHeaders(principal)
	for i := range events {
		r, err := records.EventWith(p.topic, &events[i], headers)
		if err != nil {
			return err
		}
		recs[i] = r
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	// Cancelling fails the records not yet sent once we stop waiting for them;
	// records in flight cannot be recalled (that would break idempotent sequencing).
	defer cancel()
	acks := make(chan error, len(recs)) // buffered: late promises never block
	for _, r := range recs {
		p.client.Produce(ctx, r, func(_ *kgo.Record, err error) { acks <- err })
	}
	// Waiting here rather than in ProduceSync bounds the wait by ctx even when a
	// record is stuck in flight, where franz-go no longer watches its context.
	err := p.wait(ctx, acks, len(recs))
	if err != nil {
		p.failed.observe(time.Since(start).Seconds())
	} else {
		p.acked.observe(time.Since(start).Seconds())
	}
	return err
}

func (p *producer) wait(ctx context.Context, acks <-chan error, n int) error {
	for range n {
		select {
		case err := <-acks:
			if err != nil {
				return fmt.Errorf("producing to %s: %w", p.topic, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for kafka to acknowledge %d events: %w", n, context.Cause(ctx))
		}
	}
	return nil
}
