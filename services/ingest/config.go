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
	// MaxSkew is how far an event's occurredAt may be from the server clock, either
	// way; a client clock further off would make its events stale or block newer ones.
	MaxSkew time.Duration
	// MaxBody is the largest request body accepted, in bytes; larger gets a 413.
	MaxBody int64
	// MaxBatch is the most events one POST /v1/events may carry.
	MaxBatch int
}

// minBody is the smallest body limit that still fits a full single event.
const minBody = 1024

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:       httpserver.ConfigFromEnv(env, ":18080"),
		Kafka:      kafkax.ConfigFromEnv(env, "pulse-ingest"),
		AckTimeout: env.Duration("PULSE_INGEST_ACK_TIMEOUT", 5*time.Second),
		MaxSkew:    env.Duration("PULSE_INGEST_MAX_SKEW", 5*time.Minute),
		MaxBody:    int64(env.Int("PULSE_INGEST_MAX_BODY", 1<<20)),
		MaxBatch:   env.Int("PULSE_INGEST_MAX_BATCH", 1000),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Kafka.Validate()}
	if c.AckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_ACK_TIMEOUT=%v: must be positive", c.AckTimeout))
	}
	// A request waits up to the ack timeout before it answers; the answer must still
	// be writable, and a shutdown must still let it finish.
	if c.AckTimeout >= c.HTTP.WriteTimeout || c.AckTimeout >= c.HTTP.ShutdownTimeout {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_ACK_TIMEOUT=%v: must be below PULSE_HTTP_WRITE_TIMEOUT (%v) and PULSE_SHUTDOWN_TIMEOUT (%v)",
			c.AckTimeout, c.HTTP.WriteTimeout, c.HTTP.ShutdownTimeout))
	}
	if c.MaxSkew <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_MAX_SKEW=%v: must be positive", c.MaxSkew))
	}
	if c.MaxBody < minBody {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_MAX_BODY=%d: must be at least %d bytes", c.MaxBody, minBody))
	}
	if c.MaxBatch <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_MAX_BATCH=%d: must be positive", c.MaxBatch))
	}
	return errors.Join(errs...)
}
