// Package redisx builds go-redis clients with Pulse's deadlines, for one Redis or a
// Redis Cluster, and checks that the server answers.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/pkg/config"
)

// Config is how a service reaches Redis. One address means a single server; several
// mean a Redis Cluster reached through those seed nodes.
type Config struct {
	Addrs        []string
	Password     string
	DB           int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolSize     int
}

// ConfigFromEnv reads PULSE_REDIS_* variables.
func ConfigFromEnv(e *config.Env) Config {
	return Config{
		Addrs:        e.List("PULSE_REDIS_ADDR", []string{"127.0.0.1:16379"}),
		Password:     e.String("PULSE_REDIS_PASSWORD", ""),
		DB:           e.Int("PULSE_REDIS_DB", 0),
		DialTimeout:  e.Duration("PULSE_REDIS_DIAL_TIMEOUT", 2*time.Second),
		ReadTimeout:  e.Duration("PULSE_REDIS_READ_TIMEOUT", time.Second),
		WriteTimeout: e.Duration("PULSE_REDIS_WRITE_TIMEOUT", time.Second),
		PoolSize:     e.Int("PULSE_REDIS_POOL_SIZE", 0),
	}
}

// Validate names every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if len(c.Addrs) == 0 {
		errs = append(errs, errors.New("PULSE_REDIS_ADDR: at least one address is needed"))
	}
	if len(c.Addrs) > 1 && c.DB != 0 {
		errs = append(errs, errors.New("PULSE_REDIS_DB: Redis Cluster has only database 0"))
	}
	if c.DialTimeout <= 0 || c.ReadTimeout <= 0 || c.WriteTimeout <= 0 {
		errs = append(errs, errors.New("PULSE_REDIS_*_TIMEOUT: timeouts must be positive"))
	}
	if c.PoolSize < 0 {
		errs = append(errs, errors.New("PULSE_REDIS_POOL_SIZE: must not be negative"))
	}
	return errors.Join(errs...)
}

// LogValue masks the password in start-up logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("addrs", c.Addrs),
		slog.String("password", config.Mask(c.Password)),
		slog.Int("db", c.DB),
		slog.Duration("read_timeout", c.ReadTimeout),
	)
}

// NewClient returns a client for cfg: a cluster client for several addresses, else a
// single-server client. Socket timeouts apply to every command; callers add contexts.
func NewClient(cfg Config) redis.UniversalClient {
	opts := &redis.UniversalOptions{
		Addrs:        cfg.Addrs,
		Password:     cfg.Password,
		DB:           cfg.DB,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
		// Honour context deadlines on the socket too, so a caller's deadline is exact.
		ContextTimeoutEnabled: true,
	}
	return redis.NewUniversalClient(opts)
}

// Ping fails unless Redis answers PING with PONG.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}
