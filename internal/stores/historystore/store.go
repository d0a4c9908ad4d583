package historystore

import (
	"context"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
)

// The history tables, by the names Write.Table returns (pulse-history labels its row
// metrics with them).
const (
	TableActivity     = "user_activity"
	TableStatus       = "user_status"
	TableSessions     = "user_sessions"
	TableUserDaily    = "user_daily"
	TableDailyUsers   = "daily_users"
	TableConcurrency  = "concurrency"
	TableUniques      = "uniques"
	TableCheckpoints  = "rollup_checkpoints"
	TableSnapshots    = "shard_snapshots"
	TableShardChanges = "shard_changes"
	TableShardUsers   = "shard_users"
	TableUserIndexes  = "user_indexes"
	TableProgress     = "shard_progress"
)

// ShardUsersBlock is how many dense indexes one shard_users partition holds.
const ShardUsersBlock = 4096

// Store reads and writes the history tables of one keyspace.
type Store struct {
	session *gocql.Session
}

// New reads and writes through session, whose keyspace holds the history tables.
// Close closes the session.
func New(session *gocql.Session) *Store {
	return &Store{session: session}
}

// Open connects to the cluster cfg names (cassx.NewSession) and returns a store over
// the new session.
func Open(cfg cassx.Config) (*Store, error) {
	s, err := cassx.NewSession(cfg)
	if err != nil {
		return nil, err
	}
	return New(s), nil
}

// Close closes the store's session.
func (s *Store) Close() { s.session.Close() }

// Ping proves that a coordinator answers within ctx (cassx.Ping).
func (s *Store) Ping(ctx context.Context) error { return cassx.Ping(ctx, s.session) }
