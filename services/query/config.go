package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/redisx"
)

// Config is everything pulse-query reads at start.
type Config struct {
	HTTP  httpserver.Config
	Redis redisx.Config
	// RedisPrefix starts every key of Pulse's state (the aggregator's setting).
	RedisPrefix string
	// ReadTimeout bounds a request's Redis work.
	ReadTimeout time.Duration
	// MaxBatch bounds the user ids of one POST /statuses.
	MaxBatch int
	// MaxBody bounds request bodies.
	MaxBody int64
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:        httpserver.ConfigFromEnv(env, ":18081"),
		Redis:       redisx.ConfigFromEnv(env),
		RedisPrefix: env.String("PULSE_REDIS_PREFIX", "pulse"),
		ReadTimeout: env.Duration("PULSE_QUERY_READ_TIMEOUT", time.Second),
		MaxBatch:    env.Int("PULSE_QUERY_MAX_BATCH", 1000),
		MaxBody:     int64(env.Int("PULSE_QUERY_MAX_BODY", 1<<20)),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Redis.Validate()}
	if c.RedisPrefix == "" {
		errs = append(errs, errors.New("PULSE_REDIS_PREFIX: must not be empty"))
	}
	if c.ReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_QUERY_READ_TIMEOUT=%v: must be positive", c.ReadTimeout))
	}
	if c.MaxBatch < 1 || c.MaxBatch > 100000 {
		errs = append(errs, fmt.Errorf("PULSE_QUERY_MAX_BATCH=%d: want 1..100000", c.MaxBatch))
	}
	if c.MaxBody < 1024 {
		errs = append(errs, fmt.Errorf("PULSE_QUERY_MAX_BODY=%d: want at least 1024", c.MaxBody))
	}
	return errors.Join(errs...)
}
