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
	"github.com/pulse-presence/pulse/pkg/ports"
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

// Vars are the Kafka rows of a service's configuration table; clientID is the
// service's default client id.
func Vars(c *Config, clientID string) []*config.Var {
	return config.Group("kafka",
		config.List(&c.Brokers, "PULSE_KAFKA_BROKERS", []string{ports.LocalAddr(ports.Kafka)},
			"seed brokers, comma-separated", config.NotEmpty),
		config.String(&c.ClientID, "PULSE_KAFKA_CLIENT_ID", clientID,
			"client id the brokers see (their logs, quotas, metrics)").DocDefault("`pulse-` and the service's name"),
		config.Duration(&c.DialTimeout, "PULSE_KAFKA_DIAL_TIMEOUT", 5*time.Second,
			"bounds opening a connection to a broker", config.Positive),
		config.Duration(&c.RequestTimeout, "PULSE_KAFKA_REQUEST_TIMEOUT", 10*time.Second,
			"bounds one request to a broker beyond the wait the request itself asks for", config.Positive),
		config.Duration(&c.RetryTimeout, "PULSE_KAFKA_RETRY_TIMEOUT", 30*time.Second,
			"how long a failing request is retried before its error is returned", config.Positive),
		config.Duration(&c.FetchMaxWait, "PULSE_KAFKA_FETCH_MAX_WAIT", 500*time.Millisecond,
			"longest wait of one fetch at the broker; bounds how long records can sit behind a fetch that did not return early",
			config.Between(10*time.Millisecond, time.Minute)),
		config.String(&c.EventsTopic, "PULSE_TOPIC_EVENTS", DefaultEventsTopic, "topic of every status event"),
		config.String(&c.ChangesTopic, "PULSE_TOPIC_CHANGES", DefaultChangesTopic, "topic of every effective change; not the events topic"),
	)
}

// ConfigFromEnv reads the Kafka rows (Vars) through e, which collects bad values.
func ConfigFromEnv(e *config.Env, clientID string) Config {
	var c Config
	e.Load(Vars(&c, clientID)...)
	return c
}

// Validate names what no single variable's rules can see: the two topics must differ.
func (c Config) Validate() error {
	if c.EventsTopic == "" || c.ChangesTopic == "" || c.EventsTopic == c.ChangesTopic {
		return fmt.Errorf("PULSE_TOPIC_EVENTS=%q, PULSE_TOPIC_CHANGES=%q: want two different non-empty topics", c.EventsTopic, c.ChangesTopic)
	}
	return nil
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
