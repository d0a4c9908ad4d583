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
	"github.com/pulse-presence/pulse/pkg/ports"
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

// Vars are the Redis rows of a service's configuration table.
func Vars(c *Config) []*config.Var {
	return config.Group("redis",
		config.List(&c.Addrs, "PULSE_REDIS_ADDR", []string{ports.LocalAddr(ports.Redis)},
			"one address: a single Redis; several, comma-separated: seed nodes of a Redis Cluster", config.NotEmpty),
		config.String(&c.Password, "PULSE_REDIS_PASSWORD", "", "password of Redis's AUTH; empty: none").Secret(),
		config.Int(&c.DB, "PULSE_REDIS_DB", 0, "database number of a single Redis; a cluster has only 0"),
		config.Duration(&c.DialTimeout, "PULSE_REDIS_DIAL_TIMEOUT", 2*time.Second, "bounds opening a connection", config.Positive),
		config.Duration(&c.ReadTimeout, "PULSE_REDIS_READ_TIMEOUT", time.Second, "bounds reading one reply", config.Positive),
		config.Duration(&c.WriteTimeout, "PULSE_REDIS_WRITE_TIMEOUT", time.Second, "bounds writing one command", config.Positive),
		config.Int(&c.PoolSize, "PULSE_REDIS_POOL_SIZE", 0, "connections per node; 0: go-redis's default, 10 per CPU", config.NotNegative),
	)
}

// ConfigFromEnv reads the Redis rows (Vars) through e, which collects bad values.
func ConfigFromEnv(e *config.Env) Config {
	var c Config
	e.Load(Vars(&c)...)
	return c
}

// Validate names what no single variable's rules can see: a database number on a cluster.
func (c Config) Validate() error {
	if len(c.Addrs) > 1 && c.DB != 0 {
		return errors.New("PULSE_REDIS_DB: Redis Cluster has only database 0")
	}
	return nil
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
