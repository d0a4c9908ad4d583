// Package kafkax builds franz-go clients with Pulse's defaults (deadlines on every
// request, slog logging, Prometheus metrics) and checks that brokers really answer.
package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// Topic names of the pipeline; docs/design.md (The flow) fixes them, deployments may prefix them.
const (
	DefaultEventsTopic  = "presence.events"
	DefaultChangesTopic = "presence.changes"
	// DefaultWebhooksTopic is the notifier's replay topic: `pulsectl dlq replay` moves
	// dead-lettered webhook batches there (from its ".dlq" topic) to be delivered again.
	DefaultWebhooksTopic = "presence.webhooks"
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
	// TLS makes every connection to the brokers TLS (listeners of protocol SSL or
	// SASL_SSL).
	TLS config.ClientTLS
	// SASL authenticates every connection with SCRAM (listeners of protocol
	// SASL_PLAINTEXT or SASL_SSL); off while its Username is empty.
	SASL SASL
}

// SASL is a SCRAM user of the brokers.
type SASL struct {
	// Mechanism is SCRAM-SHA-256 or SCRAM-SHA-512 (empty: SCRAM-SHA-512).
	Mechanism string
	Username  string
	// Password, or PasswordFile naming a file that holds it (read at start); one of them.
	Password     string
	PasswordFile string
}

// The variables of Kafka's security, for the errors that name them.
const (
	envPrefix           = "PULSE_KAFKA_"
	SASLPasswordEnv     = "PULSE_KAFKA_SASL_PASSWORD"
	SASLPasswordFileEnv = "PULSE_KAFKA_SASL_PASSWORD_FILE"
)

// SCRAM mechanisms the brokers may offer.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Vars are the Kafka rows of a service's configuration table; clientID is the
// service's default client id.
func Vars(c *Config, clientID string) []*config.Var {
	return append(config.Group("kafka",
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
	), securityVars(c)...)
}

// securityVars are the rows of TLS and SASL, which NewClient also reads from the
// environment for a Config made in code.
func securityVars(c *Config) []*config.Var {
	vars := config.ClientTLSVars(&c.TLS, envPrefix, "Kafka")
	vars = append(vars,
		config.String(&c.SASL.Mechanism, "PULSE_KAFKA_SASL_MECHANISM", ScramSHA512,
			"SASL mechanism of PULSE_KAFKA_SASL_USERNAME", config.OneOf(ScramSHA256, ScramSHA512)),
		config.String(&c.SASL.Username, "PULSE_KAFKA_SASL_USERNAME", "",
			"SCRAM user every connection authenticates as (listeners SASL_SSL or SASL_PLAINTEXT); empty: no SASL"),
		config.String(&c.SASL.Password, SASLPasswordEnv, "", "that user's password; or PULSE_KAFKA_SASL_PASSWORD_FILE").Secret(),
		config.String(&c.SASL.PasswordFile, SASLPasswordFileEnv, "",
			"file holding that user's password (its final line end dropped), instead of PULSE_KAFKA_SASL_PASSWORD; read at start"),
	)
	return config.Group("kafka", vars...)
}

// ConfigFromEnv reads the Kafka rows (Vars) through e, which collects bad values.
func ConfigFromEnv(e *config.Env, clientID string) Config {
	var c Config
	e.Load(Vars(&c, clientID)...)
	return c
}

// Validate names what no single variable's rules can see: the two topics must differ,
// and the security settings must be whole and their files load, so a service stops at
// start naming a bad one.
func (c Config) Validate() error {
	var errs []error
	if c.EventsTopic == "" || c.ChangesTopic == "" || c.EventsTopic == c.ChangesTopic {
		errs = append(errs, fmt.Errorf("PULSE_TOPIC_EVENTS=%q, PULSE_TOPIC_CHANGES=%q: want two different non-empty topics", c.EventsTopic, c.ChangesTopic))
	}
	if err := c.validateSecurity(); err != nil {
		errs = append(errs, err)
	} else if _, err := securityOpts(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) validateSecurity() error {
	errs := []error{c.TLS.Validate(envPrefix),
		config.CheckSecret(c.SASL.Password, c.SASL.PasswordFile, SASLPasswordEnv, SASLPasswordFileEnv)}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "", ScramSHA256, ScramSHA512:
	default:
		errs = append(errs, fmt.Errorf("PULSE_KAFKA_SASL_MECHANISM=%q: want %s or %s", c.SASL.Mechanism, ScramSHA256, ScramSHA512))
	}
	hasPassword := c.SASL.Password != "" || c.SASL.PasswordFile != ""
	switch {
	case c.SASL.Username == "" && hasPassword:
		errs = append(errs, errors.New("PULSE_KAFKA_SASL_USERNAME: required when a SASL password is set"))
	case c.SASL.Username != "" && !hasPassword:
		errs = append(errs, fmt.Errorf("PULSE_KAFKA_SASL_USERNAME=%q: needs %s or %s", c.SASL.Username, SASLPasswordEnv, SASLPasswordFileEnv))
	}
	return errors.Join(errs...)
}

// LogValue is the configuration for start-up logs: brokers, topics, whether TLS and
// SASL are on, never the password.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.Any("brokers", c.Brokers),
		slog.String("client_id", c.ClientID),
		slog.String("events_topic", c.EventsTopic),
		slog.String("changes_topic", c.ChangesTopic),
		slog.Bool("tls", c.TLS.On()),
	}
	if c.SASL.Username != "" {
		attrs = append(attrs, slog.String("sasl_mechanism", c.mechanism()), slog.String("sasl_username", c.SASL.Username),
			slog.String("sasl_password", config.Mask(c.SASL.Password+c.SASL.PasswordFile)))
	}
	return slog.GroupValue(attrs...)
}

// String is LogValue's text, for %v.
func (c Config) String() string { return c.LogValue().String() }

func (c Config) mechanism() string {
	if c.SASL.Mechanism == "" {
		return ScramSHA512
	}
	return strings.ToUpper(c.SASL.Mechanism)
}

// withEnvSecurity fills in TLS and SASL from the environment when cfg has neither: a
// Config made in code (pulsectl's commands build theirs from flags) connects the way
// the services' tables say, so every client of a deployment reaches secured brokers.
func (c Config) withEnvSecurity() (Config, error) {
	if !c.TLS.IsZero() || c.SASL != (SASL{}) {
		return c, nil
	}
	var sec Config
	env := config.NewEnv(nil)
	env.Load(securityVars(&sec)...)
	if err := env.Err(); err != nil {
		return c, err
	}
	c.TLS, c.SASL = sec.TLS, sec.SASL
	return c, nil
}

// securityOpts are the client options of cfg's TLS and SASL.
func securityOpts(cfg Config) ([]kgo.Opt, error) {
	cfg, err := cfg.withEnvSecurity()
	if err != nil {
		return nil, err
	}
	if err := cfg.validateSecurity(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	tc, err := cfg.TLS.Load(envPrefix)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL.Username != "" {
		pw, err := config.Secret(cfg.SASL.Password, cfg.SASL.PasswordFile, SASLPasswordEnv, SASLPasswordFileEnv)
		if err != nil {
			return nil, err
		}
		auth := scram.Auth{User: cfg.SASL.Username, Pass: pw}
		if cfg.mechanism() == ScramSHA256 {
			opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
		} else {
			opts = append(opts, kgo.SASL(auth.AsSha512Mechanism()))
		}
	}
	return opts, nil
}

// NewClient returns a client for cfg that logs through logger and registers its
// metrics with reg (nil: no metrics). extra options come last and win. A cfg with no
// TLS and no SASL settings takes them from the environment (PULSE_KAFKA_TLS*,
// PULSE_KAFKA_SASL_*), as the services' tables read them.
func NewClient(cfg Config, logger *slog.Logger, reg prometheus.Registerer, extra ...kgo.Opt) (*kgo.Client, error) {
	sec, err := securityOpts(cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
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
	opts = append(opts, sec...)
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
