package main

import (
	"errors"
	"fmt"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
	"github.com/pulse-presence/pulse/pkg/redisx"
)

// Config is everything pulse-aggregator reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	Redis redisx.Config
	// Group is the Kafka consumer group; every aggregator of a deployment shares it,
	// so each partition (and so each user) has exactly one owner.
	Group string
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:  httpserver.ConfigFromEnv(env, ":18082"),
		Kafka: kafkax.ConfigFromEnv(env, "pulse-aggregator"),
		Redis: redisx.ConfigFromEnv(env),
		Group: env.String("PULSE_AGGREGATOR_GROUP", "pulse-aggregator"),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Kafka.Validate(), c.Redis.Validate()}
	if c.Group == "" {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_GROUP: must not be empty"))
	}
	return errors.Join(errs...)
}
