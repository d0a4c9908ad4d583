// Package eventlog appends presence events to the events topic, presence.events, and
// waits for Kafka's acknowledgement: the one way events enter the log, whether they
// come from ingest's HTTP API or from a present socket on query (docs/design.md,
// "Presence that follows the socket").
package eventlog

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

// Opts are the Kafka client settings the acknowledgement guarantee rests on, for a
// client that produces to topic.
func Opts(topic string, ackTimeout, linger time.Duration) []kgo.Opt {
	// acks=all with the idempotent producer (franz-go's default): an acknowledged
	// event is on every in-sync replica, and retries never write it twice.
	return []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(ackTimeout),
		// Events wait for Kafka's acknowledgement anyway; a short linger lets the
		// events of concurrent requests travel in one produce request per partition,
		// which takes less CPU here and at the brokers. Measured with
		// BenchmarkPostStatus (128 concurrent single-event requests): 1ms answers in
		// about half the time of franz-go's default 10ms, for no more CPU.
		kgo.ProducerLinger(linger),
	}
}

// Producer appends events to the events topic and waits for Kafka's acknowledgement.
type Producer struct {
	client     *kgo.Client
	topic      string
	ackTimeout time.Duration
	// Latency is the time from producing a call's events to Kafka acknowledging all
	// of them (or giving up), by outcome.
	Latency *prometheus.HistogramVec
	// acked and failed are Latency's observers, resolved on first use so that an
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

// NewProducer produces through client (made with Opts) to topic; metric names its
// latency histogram in reg ("pulse_ingest_produce_duration_seconds").
func NewProducer(client *kgo.Client, topic string, ackTimeout time.Duration, metric string, reg prometheus.Registerer) *Producer {
	p := &Producer{
		client:     client,
		topic:      topic,
		ackTimeout: ackTimeout,
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metric,
			Help:    "Time from producing a request's events to Kafka acknowledging all of them (or giving up), by outcome.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"outcome"}),
	}
	p.acked = lazyObserver{vec: p.Latency, label: "acked"}
	p.failed = lazyObserver{vec: p.Latency, label: "failed"}
	reg.MustRegister(p.Latency)
	return p
}

// Produce appends events posted by principal (the credential's name, which every
// record carries in records.PrincipalHeader) and returns nil only once Kafka
// acknowledged every one of them. It gives up after the ack timeout; records already
// sent may still land, which is why a client retrying a failed request keeps its event
// ids: the aggregator drops the duplicates by id.
func (p *Producer) Produce(ctx context.Context, principal string, events []presence.Event) error {
	var one [1]*kgo.Record // most calls carry one event: no slice to allocate
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

func (p *Producer) wait(ctx context.Context, acks <-chan error, n int) error {
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
