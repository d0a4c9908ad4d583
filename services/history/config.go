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
	// at least 2×MaxSkew (see internal/domain/dedupe for why that makes staleness exact).
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
	// EventRows is eventRowsStatus (status and timeout events are user_activity rows;
	// heartbeats and activity events only move user_status) or eventRowsAll (every
	// event is a row, for audit). Heartbeats and activity are most of the traffic and say
	// nothing the changes, last_seen and last_active do not, so by default they cost no
	// row.
	EventRows string
	// StatusInterval is how long an events partition gathers the user_status updates
	// of its events (last seen, last active) before writing them: a user's row is
	// written at most once per interval whatever their events (0: with every flush).
	// Offsets are committed without waiting for them; after a crash the horizon re-read
	// plans them again, which is why it is at most half of Horizon.
	StatusInterval time.Duration
	// RollupInterval is how long a changes partition folds changes before writing the
	// rows they touched in the analysts' tables (sessions, days, minutes, hours,
	// snapshots): a user's session and day rows are written at most once per interval
	// (0: with every flush). The fold's checkpoint keeps what is not written yet.
	RollupInterval time.Duration
	// CheckpointInterval is the least time between two checkpoints of a changes
	// partition's rollup fold; a partition taken over re-reads the log written since.
	CheckpointInterval time.Duration
	// FlushInterval is how long a partition gathers batches before writing them (0:
	// every batch is written as it comes). Gathering fills Cassandra's requests, writes
	// a user's user_status and rollup rows once for all their events of the interval,
	// and the rows of a shard's minutes and hours once instead of once per batch; it
	// delays the rows and the commit by as much. FlushStatements writes earlier when a
	// partition has gathered that many statements.
	FlushInterval   time.Duration
	FlushStatements int
	// ChangesFlushInterval is FlushInterval for a presence.changes partition, whose
	// flushes write the shard's changes and move how far its recent past can be
	// answered (shard_progress.provisional_through): shorter, so that the recent past
	// trails the clock by a few hundred milliseconds rather than a second. Its rollup
	// rows keep their own RollupInterval.
	ChangesFlushInterval time.Duration
	// SnapshotInterval is the time between two point-in-time snapshots of a shard
	// (shard_snapshots); it divides an hour. SnapshotRetention and
	// ShardChangesRetention are the TTLs of shard_snapshots and shard_changes rows.
	SnapshotInterval      time.Duration
	SnapshotRetention     time.Duration
	ShardChangesRetention time.Duration
	// Lateness is how far out of time order two users' changes may reach a changes
	// partition: an instant becomes final this long after the partition's latest change
	// or clock (docs/design.md, History). 0: twice MaxSkew, the most two clients'
	// clocks can be apart within what ingest accepts.
	Lateness time.Duration
	// QuietAfter is how long a changes partition that has read all its log has had
	// nothing new before its fold is moved to the clock, so that a quiet shard's past
	// becomes final by time (0: never, for loading logs of the past, which the clock
	// would overtake).
	QuietAfter time.Duration
}

// PULSE_HISTORY_EVENT_ROWS values.
const (
	eventRowsStatus = "status"
	eventRowsAll    = "all"
)

// vars is pulse-history's configuration table, bound to c: every variable it reads.
func (c *Config) vars() []*config.Var {
	vars := httpserver.Vars(&c.HTTP, ports.ListenAddr(ports.History))
	vars = append(vars, kafkax.Vars(&c.Kafka, "pulse-history")...)
	vars = append(vars, cassx.Vars(&c.Cassandra)...)
	return append(vars, config.Group("history",
		config.String(&c.Group, "PULSE_HISTORY_GROUP", "pulse-history", "Kafka consumer group shared by every history writer"),
		config.Duration(&c.Horizon, "PULSE_HISTORY_HORIZON", 10*time.Minute,
			"log time each partition remembers to drop duplicate event ids and flag stale events; at least 2 × PULSE_INGEST_MAX_SKEW"),
		config.Duration(&c.MaxSkew, "PULSE_INGEST_MAX_SKEW", 5*time.Minute,
			"ingest's setting, read to check PULSE_HISTORY_HORIZON against it", config.Positive),
		config.Int(&c.WriteConcurrency, "PULSE_HISTORY_WRITE_CONCURRENCY", 64,
			"Cassandra writes in flight across all partitions", config.Positive),
		config.Int(&c.MaxBatchStatements, "PULSE_HISTORY_MAX_BATCH_STATEMENTS", 100,
			"most statements of one partition key per Cassandra request", config.Positive),
		config.Int(&c.BatchPartitions, "PULSE_HISTORY_BATCH_PARTITIONS", 50,
			"partition keys per Cassandra request (one unlogged batch). Packing keys suits clusters where every node holds every partition (one node; three nodes with replication factor 3); set 1 on rings larger than the replication factor",
			config.Positive),
		config.Int(&c.MaxPollRecords, "PULSE_HISTORY_MAX_POLL_RECORDS", 5000, "most records of one poll", config.Positive),
		config.Int(&c.QueueBatches, "PULSE_HISTORY_QUEUE_BATCHES", 4, "polled batches queued per partition", config.Positive),
		config.Duration(&c.CommitInterval, "PULSE_HISTORY_COMMIT_INTERVAL", time.Second,
			"least time between two offset commits of a partition; 0: after every batch", config.NotNegative),
		config.Duration(&c.RevokeTimeout, "PULSE_HISTORY_REVOKE_TIMEOUT", 10*time.Second,
			"bounds draining a partition's writes on revoke or shutdown", config.Positive),
		config.Duration(&c.SessionTimeout, "PULSE_HISTORY_SESSION_TIMEOUT", 45*time.Second,
			"how long the group waits for a silent history writer before its partitions move to the others; within the brokers' group session bounds",
			config.Positive),
		config.Duration(&c.RebuildTimeout, "PULSE_HISTORY_REBUILD_TIMEOUT", 2*time.Minute,
			"bounds one attempt to re-read a partition's horizon from the log", config.Positive),
		config.String(&c.EventRows, "PULSE_HISTORY_EVENT_ROWS", eventRowsStatus,
			"status: status and timeout events are user_activity rows, heartbeats and activity events only move user_status (last_seen, last_active); all: every event is a user_activity row, for audit",
			config.OneOf(eventRowsStatus, eventRowsAll)),
		config.Duration(&c.StatusInterval, "PULSE_HISTORY_STATUS_INTERVAL", 30*time.Second,
			"how long an events partition gathers user_status updates (last seen, last active) before writing them, so a user's row is written at most once per interval; after a crash the horizon re-read plans them again; at most half of PULSE_HISTORY_HORIZON; 0: with every flush",
			config.NotNegative),
		config.Duration(&c.RollupInterval, "PULSE_HISTORY_ROLLUP_INTERVAL", 30*time.Second,
			"how long a presence.changes partition folds changes before writing the analysts' rows they touched (sessions, days, minutes, hours, snapshots), so a user's rows are written at most once per interval; point-in-time answers become final this much later; 0: with every flush",
			config.NotNegative),
		config.Duration(&c.CheckpointInterval, "PULSE_HISTORY_CHECKPOINT_INTERVAL", time.Minute,
			"least time between two checkpoints of a presence.changes partition's rollups (and on revoke and shutdown); a partition taken over re-reads the log written since the last one",
			config.Positive),
		config.Duration(&c.FlushInterval, "PULSE_HISTORY_FLUSH_INTERVAL", time.Second,
			"how long a partition gathers polled batches before writing them, so a user's rows and a shard's rollups are written once per interval; 0: write every batch as it comes",
			config.NotNegative),
		config.Duration(&c.ChangesFlushInterval, "PULSE_HISTORY_CHANGES_FLUSH_INTERVAL", 200*time.Millisecond,
			"PULSE_HISTORY_FLUSH_INTERVAL for a presence.changes partition: how often it writes the changes it read, and so how far the recent past (?at=) trails the clock; its rollups keep PULSE_HISTORY_ROLLUP_INTERVAL; 0: write every batch as it comes",
			config.NotNegative),
		config.Int(&c.FlushStatements, "PULSE_HISTORY_FLUSH_STATEMENTS", 20000,
			"a partition writes before its flush interval ends once it has gathered this many statements", config.Positive),
		config.Duration(&c.SnapshotInterval, "PULSE_HISTORY_SNAPSHOT_INTERVAL", time.Minute,
			"time between two point-in-time snapshots of a shard (shard_snapshots); must divide an hour", dividesAnHour),
		config.Duration(&c.SnapshotRetention, "PULSE_HISTORY_SNAPSHOT_RETENTION", 30*24*time.Hour,
			"how long shard_snapshots rows are kept (their TTL); point-in-time reads reach back this far", wholeSeconds),
		config.Duration(&c.ShardChangesRetention, "PULSE_HISTORY_SHARD_CHANGES_RETENTION", 30*24*time.Hour,
			"how long shard_changes rows are kept (their TTL); keep at least PULSE_HISTORY_SNAPSHOT_RETENTION", wholeSeconds),
		config.Duration(&c.Lateness, "PULSE_HISTORY_LATENESS", 0,
			"how far out of time order two users' changes may arrive: an instant's rollups and point-in-time answers become final this long after it (a change later than that is moved up and counted late); 0: twice PULSE_INGEST_MAX_SKEW (10m by default)",
			config.NotNegative),
		config.Duration(&c.QuietAfter, "PULSE_HISTORY_QUIET_AFTER", time.Second,
			"how long a presence.changes partition that has read everything its log holds waits with nothing new before history moves its fold to the clock, so a quiet shard's past becomes final by time; 0: never (when loading logs of the past, whose times the clock would overtake)",
			config.NotNegative),
	)...)
}

// dividesAnHour accepts a positive duration that divides an hour: snapshots then fall
// on the same instants every hour.
func dividesAnHour(d time.Duration) (string, bool) {
	return "must be positive and divide an hour (1m, 5m, 15m, 1h, …)", d > 0 && time.Hour%d == 0
}

// wholeSeconds accepts a positive whole number of seconds, what a Cassandra TTL holds.
func wholeSeconds(d time.Duration) (string, bool) {
	return "must be a positive whole number of seconds", d >= time.Second && d%time.Second == 0
}

func loadConfig(env *config.Env) (Config, error) {
	var cfg Config
	env.Load(cfg.vars()...)
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports what the table's rules cannot see, each needing two variables.
func (c Config) Validate() error {
	errs := []error{c.Kafka.Validate()}
	if c.Cassandra.Username == "" && c.Cassandra.Password != "" {
		errs = append(errs, errors.New("PULSE_CASSANDRA_USERNAME: empty while PULSE_CASSANDRA_PASSWORD is set; the driver authenticates with Username and Password together"))
	}
	if c.ShardChangesRetention < c.SnapshotRetention {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_SHARD_CHANGES_RETENTION=%v: must be at least PULSE_HISTORY_SNAPSHOT_RETENTION (%v), or the oldest snapshots could not be moved forward", c.ShardChangesRetention, c.SnapshotRetention))
	}
	if c.StatusInterval > c.Horizon/2 {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_STATUS_INTERVAL=%v: must be at most half of PULSE_HISTORY_HORIZON (%v): after a crash the horizon re-read plans the user_status rows that were held", c.StatusInterval, c.Horizon))
	}
	if c.Lateness != 0 && c.Lateness < c.MaxSkew {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_LATENESS=%v: must be at least PULSE_INGEST_MAX_SKEW (%v), or every event of a client whose clock is behind would arrive late", c.Lateness, c.MaxSkew))
	}
	if c.Horizon < 2*c.MaxSkew {
		errs = append(errs, fmt.Errorf("PULSE_HISTORY_HORIZON=%v: must be at least 2×PULSE_INGEST_MAX_SKEW (%v), or events made stale by an event received up to that long before would not be flagged", c.Horizon, 2*c.MaxSkew))
	}
	return errors.Join(errs...)
}
