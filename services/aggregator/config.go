package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// Config is everything pulse-aggregator reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	Redis redisx.Config
	// Cassandra is where history keeps its tables, read only when a shard is rebuilt
	// and the log no longer reaches back to its first record.
	Cassandra cassx.Config
	// RebuildFromHistory restores, in a rebuild, the users whose every event is older
	// than the log's start from history's tables; without it they read as never seen.
	RebuildFromHistory bool
	// HistoryGroup is history's consumer group: a rebuild restoring users from its
	// tables first waits until it has written every change produced so far.
	HistoryGroup string
	// HistoryWait bounds that wait; past it the rebuild is tried again.
	HistoryWait time.Duration
	// HistoryStatusInterval is history's PULSE_HISTORY_STATUS_INTERVAL: history
	// writes a user's last-seen up to that long after committing the event, so such a
	// rebuild waits that much longer before it reads user_status.
	HistoryStatusInterval time.Duration
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
	// DedupeMaxIDs bounds the ids each partition remembers, and so its memory: past
	// it the oldest are forgotten before DedupeHorizon.
	DedupeMaxIDs int
	// CommitInterval is how often a partition's offset is committed (and always on
	// revoke and shutdown); Redis's offset guard makes replays of the rest harmless.
	CommitInterval time.Duration
	// StateCheckInterval is how often a partition checks that Redis still holds its
	// shard, to rebuild it from the log when it does not (guarantee 10) even while no
	// event arrives.
	StateCheckInterval time.Duration
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
	// CrashAfterWrite, for fault tests, ends the process (exit code 3) right after its
	// N-th window reached Redis, before the window's changes are produced and its
	// offset committed: the one point a crash must not lose or double a change at.
	// 0, the default, never does. Only a binary built with -tags faulttest reads it
	// (crash.go); a production binary has no crash point at all.
	CrashAfterWrite int
}

// vars is pulse-aggregator's configuration table, bound to c: every variable it reads.
func (c *Config) vars() []*config.Var {
	vars := httpserver.Vars(&c.HTTP, ports.ListenAddr(ports.Aggregator))
	vars = append(vars, kafkax.Vars(&c.Kafka, "pulse-aggregator")...)
	vars = append(vars, redisx.Vars(&c.Redis)...)
	vars = append(vars, cassx.Vars(&c.Cassandra)...)
	vars = append(vars, config.Group("aggregator",
		config.String(&c.RedisPrefix, "PULSE_REDIS_PREFIX", "pulse", "first part of every Redis key of Pulse's state"),
		config.String(&c.Group, "PULSE_AGGREGATOR_GROUP", "pulse-aggregator",
			"Kafka consumer group; every aggregator of a deployment shares it, so each partition has one owner"),
		config.Duration(&c.Window, "PULSE_AGGREGATOR_WINDOW", 100*time.Millisecond,
			"longest a partition's records are folded before they are written",
			config.Between(time.Millisecond, 10*time.Second)),
		config.Duration(&c.MinWindow, "PULSE_AGGREGATOR_MIN_WINDOW", 20*time.Millisecond,
			"a window open this long is written as soon as no more records wait, so a quiet partition's events are readable within it plus one write; under load windows grow towards PULSE_AGGREGATOR_WINDOW, which it may not exceed",
			config.NotNegative),
		config.Int(&c.MaxWindowRecords, "PULSE_AGGREGATOR_MAX_WINDOW_EVENTS", 20000,
			"most events of one window, which is written early when full", config.Positive),
		config.Duration(&c.DedupeHorizon, "PULSE_DEDUPE_HORIZON", 10*time.Minute, "how long an event id is remembered",
			config.AtLeast(time.Second)),
		config.Int(&c.DedupeMaxIDs, "PULSE_DEDUPE_MAX_IDS", 2_000_000,
			"most event ids a partition remembers (about 80 bytes each); past it the oldest are forgotten before PULSE_DEDUPE_HORIZON, so a copy of one arriving later is applied again, which changes no state (docs/design.md guarantee 2)",
			config.Between(1000, 1<<30)),
		config.Duration(&c.OpTimeout, "PULSE_AGGREGATOR_OP_TIMEOUT", 5*time.Second,
			"deadline of each Redis or Kafka call of a window (retried)", config.Positive),
		config.Duration(&c.CommitInterval, "PULSE_AGGREGATOR_COMMIT_INTERVAL", time.Second,
			"how often a partition's offset is committed (always on revoke and shutdown)", config.NotNegative),
		config.Duration(&c.StateCheckInterval, "PULSE_AGGREGATOR_STATE_CHECK_INTERVAL", 2*time.Second,
			"how often a partition checks that Redis still holds its shard (and rebuilds it from the log when not), besides every window write", config.Positive),
		config.Int(&c.QueueBatches, "PULSE_AGGREGATOR_QUEUE_BATCHES", 32, "polled batches queued per partition",
			config.Positive),
		config.Duration(&c.SessionTimeout, "PULSE_AGGREGATOR_SESSION_TIMEOUT", 45*time.Second,
			"how long the group waits for a silent aggregator before its partitions move to the others",
			config.AtLeast(6*time.Second).Want("want at least 6s: Kafka's brokers refuse less")),
		config.Duration(&c.RevokeTimeout, "PULSE_AGGREGATOR_REVOKE_TIMEOUT", 10*time.Second,
			"longest a revoked partition (rebalance, shutdown) takes to write and commit its open window; below PULSE_SHUTDOWN_TIMEOUT",
			config.Positive),
		config.String(&c.InstanceID, "PULSE_AGGREGATOR_INSTANCE_ID", "",
			"static group member id (a pod name): a restarted aggregator takes its partitions back without a rebalance; empty: dynamic member"),
		config.Duration(&c.OfflineAfter, "PULSE_OFFLINE_AFTER", 60*time.Second,
			"a device that sent nothing this long goes offline", config.AtLeast(100*time.Millisecond)),
		config.Duration(&c.IdleAfter, "PULSE_IDLE_AFTER", 5*time.Minute,
			"an online user without activity this long goes idle", config.AtLeast(100*time.Millisecond)),
		config.Int(&c.StateBuckets, "PULSE_STATE_BUCKETS", statestore.DefaultBuckets,
			"Redis hashes holding user states, over all shards; fixed when the state is first built, about users ÷ 80 (docs/redis.md)",
			config.Between(1, maxStateBuckets)),
		config.Bool(&c.RebuildFromHistory, "PULSE_AGGREGATOR_REBUILD_FROM_HISTORY", true,
			"a shard rebuilt after Redis lost it restores the users whose every event is older than the log's start from history's Cassandra tables; false: they read as never seen"),
		config.String(&c.HistoryGroup, "PULSE_HISTORY_GROUP", "pulse-history",
			"history's consumer group, whose progress such a rebuild waits for"),
		config.Duration(&c.HistoryWait, "PULSE_AGGREGATOR_REBUILD_HISTORY_WAIT", 2*time.Minute,
			"longest such a rebuild waits for history to write the changes produced so far before it tries again", config.Positive),
		config.Duration(&c.HistoryStatusInterval, "PULSE_HISTORY_STATUS_INTERVAL", 30*time.Second,
			"history's setting: such a rebuild waits this much longer, until history has written the last-seen times of the events it committed", config.NotNegative),
	)...)
	return append(vars, crashVars(&c.CrashAfterWrite)...)
}

func loadConfig(env *config.Env) (Config, error) {
	var cfg Config
	env.Load(cfg.vars()...)
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports what the table's rules cannot see, each needing two variables.
func (c Config) Validate() error {
	errs := []error{c.Kafka.Validate(), c.Redis.Validate()}
	if c.RebuildFromHistory {
		errs = append(errs, c.Cassandra.Validate())
	}
	if c.MinWindow > c.Window {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_MIN_WINDOW=%v: want 0..PULSE_AGGREGATOR_WINDOW (%v)", c.MinWindow, c.Window))
	}
	if c.RevokeTimeout >= c.HTTP.ShutdownTimeout {
		errs = append(errs, fmt.Errorf("PULSE_AGGREGATOR_REVOKE_TIMEOUT=%v: want less than PULSE_SHUTDOWN_TIMEOUT (%v), so a shutdown ends in time", c.RevokeTimeout, c.HTTP.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// maxStateBuckets bounds PULSE_STATE_BUCKETS where empty buckets alone (about 100
// bytes each) would take gigabytes: enough for billions of users.
const maxStateBuckets = 1 << 24
