package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
)

// Config is everything pulse-ingest reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	// AckTimeout bounds the wait for Kafka to acknowledge a request's events; past it
	// the producer gets a 503 with Retry-After and may retry with the same event ids.
	AckTimeout time.Duration
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:       httpserver.ConfigFromEnv(env, ":18080"),
		Kafka:      kafkax.ConfigFromEnv(env, "pulse-ingest"),
		AckTimeout: env.Duration("PULSE_INGEST_ACK_TIMEOUT", 5*time.Second),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Kafka.Validate()}
	if c.AckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_ACK_TIMEOUT=%v: must be positive", c.AckTimeout))
	}
	return errors.Join(errs...)
}
