package main

import (
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/countcache"
	"github.com/pulse-presence/pulse/pkg/feed"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
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
	// OperatorToken grants ?view=operator to requests carrying it as a bearer
	// token; "" grants it to nobody.
	OperatorToken string
	// Kafka is where the change feed reads presence.changes.
	Kafka kafkax.Config
	// Feed is the live change feed's settings (GET /v1/watch, /v1/watch/sse).
	Feed FeedConfig
	// Counts is how GET /v1/online/count is served from memory (pkg/countcache).
	Counts countcache.Config
}

// FeedConfig is the change feed's settings.
type FeedConfig struct {
	// QueueSize bounds the changes waiting for one connection; a connection whose
	// queue fills is closed as a slow consumer.
	QueueSize int
	// ReplayBuffer is how many recent changes are kept in memory for resumes.
	ReplayBuffer int
	// DedupeLookback is how many records per partition before a position are read to
	// recognise re-produced changes after it.
	DedupeLookback int
	// MaxUsers bounds the users one connection watches.
	MaxUsers int
	// PingInterval is how often an idle-looking connection gets a ping (WebSocket
	// ping frame, SSE comment), so proxies keep it open.
	PingInterval time.Duration
	// WriteTimeout bounds one write to a client; a client that does not take a
	// message in time is disconnected as a slow consumer.
	WriteTimeout time.Duration
	// SnapshotTimeout bounds a snapshot's state read.
	SnapshotTimeout time.Duration
	// CatchUpTimeout is how long a resume waits for this instance to reach the
	// position of a cursor another instance issued.
	CatchUpTimeout time.Duration
	// MaxLogReplays bounds the resumes reading Kafka at the same time.
	MaxLogReplays int
	// Origins are the host patterns (path.Match) of web pages allowed to open a
	// WebSocket; empty allows same-origin pages only. Non-browser clients send no
	// Origin and are always allowed.
	Origins []string
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
	cfg.Counts = countcache.Config{
		Interval: env.Duration("PULSE_QUERY_COUNTS_INTERVAL", 100*time.Millisecond),
		MaxAge:   env.Duration("PULSE_QUERY_COUNTS_MAX_AGE", time.Second),
		Timeout:  cfg.ReadTimeout,
	}
	cfg.OperatorToken = httpserver.OperatorTokenFromEnv(env)
	cfg.Kafka = kafkax.ConfigFromEnv(env, "pulse-query")
	cfg.Feed = FeedConfig{
		QueueSize:       env.Int("PULSE_FEED_QUEUE_SIZE", 1024),
		ReplayBuffer:    env.Int("PULSE_FEED_REPLAY_BUFFER", 65536),
		DedupeLookback:  env.Int("PULSE_FEED_DEDUPE_LOOKBACK", 1000),
		MaxUsers:        env.Int("PULSE_FEED_MAX_USERS", 10000),
		PingInterval:    env.Duration("PULSE_FEED_PING_INTERVAL", 25*time.Second),
		WriteTimeout:    env.Duration("PULSE_FEED_WRITE_TIMEOUT", 10*time.Second),
		SnapshotTimeout: env.Duration("PULSE_FEED_SNAPSHOT_TIMEOUT", 5*time.Second),
		CatchUpTimeout:  env.Duration("PULSE_FEED_CATCH_UP_TIMEOUT", 5*time.Second),
		MaxLogReplays:   env.Int("PULSE_FEED_MAX_LOG_REPLAYS", 8),
		Origins:         env.List("PULSE_FEED_ORIGINS", nil),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Redis.Validate(), httpserver.ValidateOperatorToken(c.OperatorToken)}
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
	if err := c.Counts.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("PULSE_QUERY_COUNTS_INTERVAL=%v, PULSE_QUERY_COUNTS_MAX_AGE=%v: %w", c.Counts.Interval, c.Counts.MaxAge, err))
	}
	errs = append(errs, c.Kafka.Validate(), c.Feed.Validate())
	return errors.Join(errs...)
}

// Validate reports every feed setting that cannot work.
func (f FeedConfig) Validate() error {
	var errs []error
	intIn := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s=%d: want %d..%d", name, v, lo, hi))
		}
	}
	intIn("PULSE_FEED_QUEUE_SIZE", f.QueueSize, 1, 1_000_000)
	intIn("PULSE_FEED_REPLAY_BUFFER", f.ReplayBuffer, 0, 10_000_000)
	intIn("PULSE_FEED_DEDUPE_LOOKBACK", f.DedupeLookback, 0, 1_000_000)
	intIn("PULSE_FEED_MAX_USERS", f.MaxUsers, 1, 1_000_000)
	intIn("PULSE_FEED_MAX_LOG_REPLAYS", f.MaxLogReplays, 1, 1000)
	if f.PingInterval < time.Second || f.PingInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("PULSE_FEED_PING_INTERVAL=%v: want 1s..10m", f.PingInterval))
	}
	for name, d := range map[string]time.Duration{
		"PULSE_FEED_WRITE_TIMEOUT":    f.WriteTimeout,
		"PULSE_FEED_SNAPSHOT_TIMEOUT": f.SnapshotTimeout,
		"PULSE_FEED_CATCH_UP_TIMEOUT": f.CatchUpTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%v: must be positive", name, d))
		}
	}
	for _, o := range f.Origins {
		if _, err := path.Match(o, ""); err != nil {
			errs = append(errs, fmt.Errorf("PULSE_FEED_ORIGINS: pattern %q: %w", o, err))
		}
	}
	return errors.Join(errs...)
}

// hub is the feed's hub configuration.
func (c Config) hub() feed.Config {
	return feed.Config{
		Kafka:           c.Kafka,
		QueueSize:       c.Feed.QueueSize,
		ReplayBuffer:    c.Feed.ReplayBuffer,
		DedupeLookback:  c.Feed.DedupeLookback,
		MaxUsers:        c.Feed.MaxUsers,
		SnapshotTimeout: c.Feed.SnapshotTimeout,
		CatchUpTimeout:  c.Feed.CatchUpTimeout,
		MaxLogReplays:   c.Feed.MaxLogReplays,
		DrainTimeout:    c.HTTP.ShutdownTimeout,
	}
}
