package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
	"github.com/pulse-presence/pulse/pkg/redisx"
	"github.com/pulse-presence/pulse/pkg/statestore"
)

// Config is everything pulse-aggregator reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	Redis redisx.Config
	// RedisPrefix starts every key of Pulse's state.
	RedisPrefix string
	// Group is the Kafka consumer group; every aggregator of a deployment shares it,
	// so each partition (and so each user) has exactly one owner.
	Group string
	// Window is the longest a partition's records are folded before they are written.
	Window time.Duration
	// MinWindow is how long a window stays open at least. Once it has, the window is
	// written as soon as no more records wait for the partition: a quiet partition's
	// events become readable within MinWindow plus one write, while under load records
	// keep arriving and windows grow towards Window, so each write carries more. A
	// window rewrites the shard's changed bitmaps whole, which at millions of users per
	// shard is tens of kilobytes: MinWindow bounds how often that happens.
	MinWindow time.Duration
	// MaxWindowRecords flushes a window early, bounding its memory and write size.
	MaxWindowRecords int
	// DedupeHorizon is how long an event id is remembered (docs/design.md guarantee 2).
	DedupeHorizon time.Duration
	// CommitInterval is how often a partition's offset is committed (and always on
	// revoke and shutdown); Redis's offset guard makes replays of the rest harmless.
	CommitInterval time.Duration
	// QueueBatches bounds each partition's queue of polled batches.
	QueueBatches int
	// RevokeTimeout bounds how long a revoked partition (a rebalance, or shutdown) may
	// take to write and commit its open window; past it the window is dropped
	// uncommitted and the partition's next owner folds its records again, which the
	// offset-guarded writes make safe.
	RevokeTimeout time.Duration
	// SessionTimeout is how long the group waits for a member that stopped answering
	// (a crashed aggregator) before its partitions move to the others.
	SessionTimeout time.Duration
	// InstanceID, when set, makes the member static (KIP-345): a restarted aggregator
	// with the same id (a pod name) takes its partitions back without a rebalance.
	InstanceID string
	// OfflineAfter turns a device offline when it sent nothing for this long.
	OfflineAfter time.Duration
	// IdleAfter turns an online user idle after this long without activity.
	IdleAfter time.Duration
	// OpTimeout bounds each Redis or Kafka operation of a window; failed ones are retried.
	OpTimeout time.Duration
	// StateBuckets is how many Redis hashes hold the users' states, over all shards. It
	// is recorded with the shard count when the state is first built and cannot change
	// afterwards; size it so a bucket holds under about 100 users at the largest user
	// count expected (docs/redis.md).
	StateBuckets int
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:             httpserver.ConfigFromEnv(env, ":18082"),
		Kafka:            kafkax.ConfigFromEnv(env, "pulse-aggregator"),
		Redis:            redisx.ConfigFromEnv(env),
		RedisPrefix:      env.String("PULSE_REDIS_PREFIX", "pulse"),
		Group:            env.String("PULSE_AGGREGATOR_GROUP", "pulse-aggregator"),
		Window:           env.Duration("PULSE_AGGREGATOR_WINDOW", 100*time.Millisecond),
		MinWindow:        env.Duration("PULSE_AGGREGATOR_MIN_WINDOW", 20*time.Millisecond),
		MaxWindowRecords: env.Int("PULSE_AGGREGATOR_MAX_WINDOW_EVENTS", 20000),
		DedupeHorizon:    env.Duration("PULSE_DEDUPE_HORIZON", 10*time.Minute),
		OpTimeout:        env.Duration("PULSE_AGGREGATOR_OP_TIMEOUT", 5*time.Second),
		CommitInterval:   env.Duration("PULSE_AGGREGATOR_COMMIT_INTERVAL", time.Second),
		QueueBatches:     env.Int("PULSE_AGGREGATOR_QUEUE_BATCHES", 32),
		SessionTimeout:   env.Duration("PULSE_AGGREGATOR_SESSION_TIMEOUT", 45*time.Second),
		RevokeTimeout:    env.Duration("PULSE_AGGREGATOR_REVOKE_TIMEOUT", 10*time.Second),
		InstanceID:       env.String("PULSE_AGGREGATOR_INSTANCE_ID", ""),
		OfflineAfter:     env.Duration("PULSE_OFFLINE_AFTER", 60*time.Second),
		IdleAfter:        env.Duration("PULSE_IDLE_AFTER", 5*time.Minute),
		StateBuckets:     env.Int("PULSE_STATE_BUCKETS", statestore.DefaultBuckets),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	errs := []error{c.HTTP.Validate(), c.Kafka.Validate(), c.Redis.Validate()}
	if c.Group == "" {
		errs = append(errs, errors.New("PULSE_AGGREGATOR_GROUP: must not be empty"))
	}
	if c.RedisPrefix == "" {
		errs = append(errs, errors.New("PULSE_REDIS_PREFIX: must not be empty"))
	}
	if c.Window < time.Millisecond || c.Window > 10*time.Second {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_WINDOW=%v: want 1ms..10s", c.Window))
	}
	if c.MinWindow < 0 || c.MinWindow > c.Window {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_MIN_WINDOW=%v: want 0..PULSE_AGGREGATOR_WINDOW (%v)", c.MinWindow, c.Window))
	}
	if c.MaxWindowRecords < 1 {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_MAX_WINDOW_EVENTS=%d: must be positive", c.MaxWindowRecords))
	}
	if c.DedupeHorizon < time.Second {
		errs = append(errs, fmt.Errorf("PULSE_DEDUPE_HORIZON=%v: want at least 1s", c.DedupeHorizon))
	}
	if c.OfflineAfter < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("PULSE_OFFLINE_AFTER=%v: want at least 100ms", c.OfflineAfter))
	}
	if c.IdleAfter < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("PULSE_IDLE_AFTER=%v: want at least 100ms", c.IdleAfter))
	}
	if c.CommitInterval < 0 {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_COMMIT_INTERVAL=%v: must not be negative", c.CommitInterval))
	}
	if c.QueueBatches < 1 {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_QUEUE_BATCHES=%d: must be positive", c.QueueBatches))
	}
	if c.RevokeTimeout <= 0 || c.RevokeTimeout >= c.HTTP.ShutdownTimeout {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_REVOKE_TIMEOUT=%v: want more than 0 and less than PULSE_SHUTDOWN_TIMEOUT (%v), so a shutdown ends in time", c.RevokeTimeout, c.HTTP.ShutdownTimeout))
	}
	if c.SessionTimeout < 6*time.Second {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_SESSION_TIMEOUT=%v: Kafka's brokers refuse less than 6s", c.SessionTimeout))
	}
	if c.OpTimeout <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_OP_TIMEOUT=%v: must be positive", c.OpTimeout))
	}
	if c.StateBuckets < 1 || c.StateBuckets > maxStateBuckets {
		errs = append(errs, fmt.Errorf("PULSE_STATE_BUCKETS=%d: want 1..%d", c.StateBuckets, maxStateBuckets))
	}
	return errors.Join(errs...)
}

// maxStateBuckets bounds PULSE_STATE_BUCKETS where empty buckets alone (about 100
// bytes each) would take gigabytes: enough for billions of users.
const maxStateBuckets = 1 << 24
