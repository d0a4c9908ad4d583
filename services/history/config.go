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
	// Horizon is how much log time each partition worker remembers to drop duplicate
	// event ids and flag stale events; rebuilt from the log on assignment. It must be
	// at least 2×MaxSkew (see pkg/recent for why that makes staleness exact).
	Horizon time.Duration
	// MaxSkew is ingest's PULSE_INGEST_MAX_SKEW: how far an event's occurred-at may be
	// from the server clock. Read here only to check Horizon against it.
	MaxSkew time.Duration
	// WriteConcurrency bounds the Cassandra writes in flight across all partitions.
	WriteConcurrency int
	// MaxBatchStatements splits the statements of one partition key into batches of at
	// most this many.
	MaxBatchStatements int
	// BatchPartitions is how many partition keys one request may carry, as one unlogged
	// batch. Where every node holds every partition (one node, or as many nodes as
	// replicas: the usual three-node cluster with replication factor 3) the coordinator
	// is always a replica, and packing keys saves most of Cassandra's per-request work
	// (on the local stack 2.5× less Cassandra CPU per row than one key per request).
	// On rings larger than the replication factor set 1: each key then goes as its own
	// single-partition batch, which token-aware routing takes straight to a replica.
	BatchPartitions int
	// MaxPollRecords bounds one poll; QueueBatches is each partition's queue in batches.
	MaxPollRecords int
	QueueBatches   int
	// CommitInterval is the least time between two offset commits of a partition
	// (0: commit after every batch). Replays after a crash rewrite identical rows, so a
	// longer interval costs only replay time.
	CommitInterval time.Duration
	// RevokeTimeout bounds draining a partition's writes on revoke or shutdown.
	RevokeTimeout time.Duration
	// SessionTimeout is how long the group waits for a silent member (a crashed
	// process) before giving its partitions to others; within the broker's
	// group.min/max.session.timeout.ms.
	SessionTimeout time.Duration
	// RebuildTimeout bounds one attempt to re-read a partition's horizon from the log.
	RebuildTimeout time.Duration
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
		Group:              env.String("PULSE_HISTORY_GROUP", "pulse-history"),
		Horizon:            env.Duration("PULSE_HISTORY_HORIZON", 10*time.Minute),
		MaxSkew:            env.Duration("PULSE_INGEST_MAX_SKEW", 5*time.Minute),
		WriteConcurrency:   env.Int("PULSE_HISTORY_WRITE_CONCURRENCY", 64),
		MaxBatchStatements: env.Int("PULSE_HISTORY_MAX_BATCH_STATEMENTS", 100),
		BatchPartitions:    env.Int("PULSE_HISTORY_BATCH_PARTITIONS", 50),
		MaxPollRecords:     env.Int("PULSE_HISTORY_MAX_POLL_RECORDS", 5000),
		QueueBatches:       env.Int("PULSE_HISTORY_QUEUE_BATCHES", 4),
		CommitInterval:     env.Duration("PULSE_HISTORY_COMMIT_INTERVAL", time.Second),
		RevokeTimeout:      env.Duration("PULSE_HISTORY_REVOKE_TIMEOUT", 10*time.Second),
		SessionTimeout:     env.Duration("PULSE_HISTORY_SESSION_TIMEOUT", 45*time.Second),
		RebuildTimeout:     env.Duration("PULSE_HISTORY_REBUILD_TIMEOUT", 2*time.Minute),
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
	if c.MaxSkew <= 0 {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_MAX_SKEW=%v: must be positive", c.MaxSkew))
	}
	if c.Horizon < 2*c.MaxSkew {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_HORIZON=%v: must be at least 2×PULSE_INGEST_MAX_SKEW (%v), or events made stale by an event received up to that long before would not be flagged", c.Horizon, 2*c.MaxSkew))
	}
	for name, n := range map[string]int{
		"PULSE_HISTORY_WRITE_CONCURRENCY":    c.WriteConcurrency,
		"PULSE_HISTORY_MAX_BATCH_STATEMENTS": c.MaxBatchStatements,
		"PULSE_HISTORY_BATCH_PARTITIONS":     c.BatchPartitions,
		"PULSE_HISTORY_MAX_POLL_RECORDS":     c.MaxPollRecords,
		"PULSE_HISTORY_QUEUE_BATCHES":        c.QueueBatches,
	} {
		if n < 1 {
			errs = append(errs, fmt.Errorf("%s=%d: must be positive", name, n))
		}
	}
	if c.CommitInterval < 0 {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_COMMIT_INTERVAL=%v: must not be negative", c.CommitInterval))
	}
	for name, d := range map[string]time.Duration{
		"PULSE_HISTORY_REVOKE_TIMEOUT":  c.RevokeTimeout,
		"PULSE_HISTORY_SESSION_TIMEOUT": c.SessionTimeout,
		"PULSE_HISTORY_REBUILD_TIMEOUT": c.RebuildTimeout,
		"PULSE_CASSANDRA_TIMEOUT":       c.Cassandra.Timeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%v: must be positive", name, d))
		}
	}
	return errors.Join(errs...)
}
