// Package historystore is Pulse's history in Cassandra: every statement against the
// history tables (migrations/0002 to 0010) lives here, typed in and out, as
// internal/stores/statestore is for the state in Redis.
//
// It owns:
//
//   - the writes of pulse-history: events and changes in user_activity, the
//     user_status updates (writes.go); the analysts' rollups and the point-in-time
//     rows a rollup.Fold hands out, and shard_progress (rollups.go); the rollup
//     folds' checkpoints (checkpoints.go). A write is a Write value, built by a
//     typed constructor, that knows its statement, its bound values and its
//     partition key; Pack groups a plan's writes into requests, each one unlogged
//     batch or a single statement, and Store.Write sends one (batches.go);
//   - the reads of pulse-query's history routes: a user's timeline (Q1, timeline.go),
//     sessions (Q2, sessions.go), days and every user's totals of a day (Q3,
//     daily.go), concurrency (Q4, concurrency.go) and unique users (Q6, uniques.go);
//     a shard's state and a user's status at any past instant (Q5, pointintime.go);
//     a user's user_status row as stored, for the operator's export (Q7, userstatus.go);
//   - the last known state of a shard's users, which the aggregator rebuilds a shard
//     from when the log no longer reaches back to them (lastknown.go,
//     docs/design.md guarantee 10).
//
// It does not own when or what history writes (services/history plans each batch of
// records, keeps user_status and rollup rows for their schedules, retries, splits what
// Cassandra refuses and counts rows in its metrics), nor the rollup arithmetic
// (internal/domain/rollup computes the rows; the query service folds what it reads into answers).
// Neither does it own the schema: the migrations and their machinery (internal/platform/migrate,
// internal/platform/cassx's schema agreement) keep their own statements, as do cmd/bench's minimal
// gocql writer (the baseline history is measured against, deliberately free of Pulse's
// code) and the integration tests in tests/, which check what Cassandra holds with
// statements of their own.
//
// Every statement runs with the session's consistency level (PULSE_CASSANDRA_CONSISTENCY)
// under the caller's context, whose deadline bounds it. Writes carry USING TIMESTAMP
// from the log, never the time of writing, so that a replay rewrites identical cells
// (docs/design.md, History).
package historystore
