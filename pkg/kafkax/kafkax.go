// Package kafkax builds franz-go clients with Pulse's defaults (deadlines on every
// request, slog logging, Prometheus metrics) and checks that brokers really answer.
package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/pulse-presence/pulse/pkg/config"
)

// Topic names of the pipeline; docs/design.md (The flow) fixes them, deployments may prefix them.
const (
	DefaultEventsTopic  = "presence.events"
	DefaultChangesTopic = "presence.changes"
)

// Config is how a service reaches Kafka.
type Config struct {
	Brokers  []string
	ClientID string
	// DialTimeout bounds opening a connection to a broker.
	DialTimeout time.Duration
	// RequestTimeout bounds one request to a broker beyond the time the request itself
	// asks the broker to wait (a fetch's max wait, a produce's ack timeout).
	RequestTimeout time.Duration
	// RetryTimeout bounds how long a request is retried before its error is returned.
	RetryTimeout time.Duration
	// FetchMaxWait is the longest a consumer's fetch waits at the broker for records.
	// A fetch normally returns as soon as records arrive, but one whose partitions
	// changed while it waited (a partition just assigned or whose offset was just
	// reset) can sit out the whole wait while records are ready; Kafka's default of
	// 5 s then shows as seconds of staleness. A shorter wait bounds that, for one
	// cheap request per interval per broker while idle.
	FetchMaxWait time.Duration
	// EventsTopic receives every status event; ChangesTopic every effective change.
	EventsTopic  string
	ChangesTopic string
}

// ConfigFromEnv reads PULSE_KAFKA_* variables.
func ConfigFromEnv(e *config.Env, clientID string) Config {
	return Config{
		Brokers:        e.List("PULSE_KAFKA_BROKERS", []string{"127.0.0.1:19092"}),
		ClientID:       e.String("PULSE_KAFKA_CLIENT_ID", clientID),
		DialTimeout:    e.Duration("PULSE_KAFKA_DIAL_TIMEOUT", 5*time.Second),
		RequestTimeout: e.Duration("PULSE_KAFKA_REQUEST_TIMEOUT", 10*time.Second),
		RetryTimeout:   e.Duration("PULSE_KAFKA_RETRY_TIMEOUT", 30*time.Second),
		FetchMaxWait:   e.Duration("PULSE_KAFKA_FETCH_MAX_WAIT", 500*time.Millisecond),
		EventsTopic:    e.String("PULSE_TOPIC_EVENTS", DefaultEventsTopic),
		ChangesTopic:   e.String("PULSE_TOPIC_CHANGES", DefaultChangesTopic),
	}
}

// Validate names the first setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("PULSE_KAFKA_BROKERS: at least one broker address is needed"))
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("PULSE_KAFKA_CLIENT_ID: must not be empty"))
	}
	if c.DialTimeout <= 0 || c.RequestTimeout <= 0 || c.RetryTimeout <= 0 {
		errs = append(errs, errors.New("PULSE_KAFKA_*_TIMEOUT: timeouts must be positive"))
	}
	if c.FetchMaxWait < 10*time.Millisecond || c.FetchMaxWait > time.Minute {
		errs = append(errs, fmt.Errorf("PULSE_KAFKA_FETCH_MAX_WAIT=%v: want 10ms..1m", c.FetchMaxWait))
	}
	if c.EventsTopic == "" || c.ChangesTopic == "" || c.EventsTopic == c.ChangesTopic {
		errs = append(errs, fmt.Errorf("PULSE_TOPIC_EVENTS=%q, PULSE_TOPIC_CHANGES=%q: want two different non-empty topics", c.EventsTopic, c.ChangesTopic))
	}
	return errors.Join(errs...)
}

// NewClient returns a client for cfg that logs through logger and registers its
// metrics with reg (nil: no metrics). extra options come last and win.
func NewClient(cfg Config, logger *slog.Logger, reg prometheus.Registerer, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DialTimeout(cfg.DialTimeout),
		kgo.RequestTimeoutOverhead(cfg.RequestTimeout),
		kgo.RetryTimeout(cfg.RetryTimeout),
		kgo.WithLogger(kslog.New(logger.With("component", "kafka"))),
	}
	if cfg.FetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(cfg.FetchMaxWait))
	}
	if reg != nil {
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("pulse_kafka", kprom.Registerer(reg))))
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	return cl, nil
}

// Ping sends a metadata request for topics (none: only the brokers) and fails unless a
// broker answers and every topic exists. The port of a starting broker opens before it
// serves requests, so a real request is the only honest readiness check.
func Ping(ctx context.Context, cl *kgo.Client, topics ...string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	if len(topics) == 0 {
		req.Topics = []kmsg.MetadataRequestTopic{} // empty, not nil: nil asks for all topics
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka metadata request: %w", err)
	}
	if len(resp.Brokers) == 0 {
		return errors.New("kafka metadata: no brokers")
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			return fmt.Errorf("kafka topic %q: %w", name, err)
		}
	}
	return nil
}
