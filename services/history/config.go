package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/pkg/cassx"
	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
)

// Config is everything pulse-history reads at start.
type Config struct {
	HTTP      httpserver.Config
	Kafka     kafkax.Config
	Cassandra cassx.Config
	// Group is the Kafka consumer group shared by every history writer.
	Group string
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:  httpserver.ConfigFromEnv(env, ":18083"),
		Kafka: kafkax.ConfigFromEnv(env, "pulse-history"),
		Cassandra: cassx.Config{
			Hosts:          env.List("PULSE_CASSANDRA_HOSTS", []string{"127.0.0.1"}),
			Port:           env.Int("PULSE_CASSANDRA_PORT", 19042),
			Keyspace:       env.String("PULSE_CASSANDRA_KEYSPACE", "pulse"),
			Consistency:    env.String("PULSE_CASSANDRA_CONSISTENCY", "LOCAL_QUORUM"),
			Timeout:        env.Duration("PULSE_CASSANDRA_TIMEOUT", 5*time.Second),
			ConnectTimeout: env.Duration("PULSE_CASSANDRA_CONNECT_TIMEOUT", 5*time.Second),
			Username:       env.String("PULSE_CASSANDRA_USERNAME", ""),
			Password:       env.String("PULSE_CASSANDRA_PASSWORD", ""),
		},
		Group: env.String("PULSE_HISTORY_GROUP", "pulse-history"),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Kafka.Validate()}
	if err := c.Cassandra.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("PULSE_CASSANDRA_*: %w", err))
	}
	if c.Cassandra.Keyspace == "" {
		errs = append(errs, errors.New("PULSE_CASSANDRA_KEYSPACE: must not be empty"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("PULSE_HISTORY_GROUP: must not be empty"))
	}
	return errors.Join(errs...)
}
