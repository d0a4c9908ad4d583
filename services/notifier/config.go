package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// Config is everything pulse-notifier reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	// Group is the Kafka consumer group shared by every notifier.
	Group string
	// WebhooksTopic is the replay topic; its dead-letter topic is WebhooksTopic+".dlq".
	WebhooksTopic string
	// EndpointsFile lists the endpoints (docs/webhooks.md); read again every
	// EndpointsReload. Empty: no endpoints.
	EndpointsFile   string
	EndpointsReload time.Duration
	// MaxBacklog bounds the changes one partition holds for one endpoint; past it the
	// oldest go to the dead-letter topic, so a dead endpoint costs bounded memory and
	// never holds back the others.
	MaxBacklog int
	// CommitInterval is the time between two offset commits of a partition.
	CommitInterval time.Duration
	MaxPollRecords int
	QueueBatches   int
	// RevokeTimeout bounds sending what a partition holds on revoke or shutdown.
	RevokeTimeout  time.Duration
	SessionTimeout time.Duration
}

// vars is pulse-notifier's configuration table, bound to c.
func (c *Config) vars() []*config.Var {
	vars := httpserver.Vars(&c.HTTP, ports.ListenAddr(ports.Notifier))
	vars = append(vars, kafkax.Vars(&c.Kafka, "pulse-notifier")...)
	return append(vars, config.Group("notifier",
		config.String(&c.Group, "PULSE_NOTIFIER_GROUP", "pulse-notifier", "Kafka consumer group shared by every notifier"),
		config.String(&c.WebhooksTopic, "PULSE_TOPIC_WEBHOOKS", kafkax.DefaultWebhooksTopic,
			"replay topic of webhook batches: `pulsectl dlq replay` moves dead-lettered batches there from its .dlq topic, for the notifier to deliver again"),
		config.String(&c.EndpointsFile, "PULSE_NOTIFIER_ENDPOINTS_FILE", "",
			"JSON file of the webhook endpoints (docs/webhooks.md); holds their secrets. Empty: no endpoints"),
		config.Duration(&c.EndpointsReload, "PULSE_NOTIFIER_ENDPOINTS_RELOAD", 10*time.Second,
			"how often the endpoints file is read again; a file refused keeps the endpoints in force", config.Positive),
		config.Int(&c.MaxBacklog, "PULSE_NOTIFIER_MAX_BACKLOG", 10000,
			"most changes one partition holds for one endpoint; past it the oldest are dead-lettered, so a dead endpoint costs bounded memory", config.Positive),
		config.Duration(&c.CommitInterval, "PULSE_NOTIFIER_COMMIT_INTERVAL", time.Second,
			"time between two offset commits of a partition (each up to the oldest change not yet delivered nor dead-lettered)", config.Positive),
		config.Int(&c.MaxPollRecords, "PULSE_NOTIFIER_MAX_POLL_RECORDS", 5000, "most records of one poll", config.Positive),
		config.Int(&c.QueueBatches, "PULSE_NOTIFIER_QUEUE_BATCHES", 4, "polled batches queued per partition", config.Positive),
		config.Duration(&c.RevokeTimeout, "PULSE_NOTIFIER_REVOKE_TIMEOUT", 10*time.Second,
			"bounds sending what a partition holds on revoke or shutdown; what is left is delivered by the partition's next owner", config.Positive),
		config.Duration(&c.SessionTimeout, "PULSE_NOTIFIER_SESSION_TIMEOUT", 45*time.Second,
			"how long the group waits for a silent notifier before its partitions move to the others; within the brokers' group session bounds",
			config.Positive),
	)...)
}

// drainTimeout is how long a revoked partition's lanes may send: within the revoke
// timeout, leaving time for the commit.
func (c Config) drainTimeout() time.Duration { return c.RevokeTimeout * 3 / 4 }

func loadConfig(env *config.Env) (Config, error) {
	var cfg Config
	env.Load(cfg.vars()...)
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports what the table's rules cannot see.
func (c Config) Validate() error {
	errs := []error{c.Kafka.Validate()}
	if c.WebhooksTopic == "" || c.WebhooksTopic == c.Kafka.ChangesTopic || c.WebhooksTopic == c.Kafka.EventsTopic {
		errs = append(errs, fmt.Errorf("PULSE_TOPIC_WEBHOOKS=%q: want a topic of its own", c.WebhooksTopic))
	}
	return errors.Join(errs...)
}
